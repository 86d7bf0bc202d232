"""A cross-encoder (interaction-based matcher) on one task, written out.

    python tasks/train_cross_encoder.py --tasks LCQMC --head softmax --output runs/LCQMC_cross
    python tasks/train_cross_encoder.py --tasks BQ --data-dir ../shared/data --epochs 3 --lr 5e-5 --output runs/BQ_cross

The same job as `zoo train cross-encoder` (zoo/jobs/cross_encoder.py).

Recorded run (written by tools/results_pages.py from bench/results):
<!-- generated: run cross_encoder_4000 -->
    python tasks/train_cross_encoder.py --tasks LCQMC --checkpoint ../shared/models/chinese_L-4_H-256_A-4/google \\
        --data-dir ../shared/data --limit-train 4000 --maxlen 64 --lr 1e-4 --seed 42 \\
        --output runs/cross_encoder_4000 --no-progress

LCQMC test Spearman 67.05 (valid 48.81); test accuracy 77.72% [77.0, 78.5] at the valid threshold; 6 min of training
on 2 CPU cores (bench/results/runs/cross_encoder_4000.json).
<!-- /generated -->
"""

import zoo

zoo.logs.setup_cli()  # first: the backend's start-up lines stay out of the terminal; Ctrl-C ends in one line

# ruff: noqa: E402  (imports after setup_cli)
import time

job = zoo.job("train cross-encoder")  # the flags of `zoo train cross-encoder`, and its steps
config = job.parse()
steps = job.steps
t0 = time.time()

# 0. Start: the distribution (--distribute data-parallel: every device), the seed, the run folder.
checkpoint, output = steps.start(config)

# 1. Data (with --stream the train pairs are read lazily, in step 4).
data = steps.data(config)

# 2. Model: [CLS] a [SEP] b [SEP] -> a score from [CLS] (--head softmax: P(similar); cosent: a raw score).
model = steps.model(config, checkpoint)

# 3. Loss: cross-entropy on 0/1 labels, or CoSENT's ranking loss on the raw scores; Adam at --lr.
trainer = steps.trainer(config, model)

# 4. Batches: one row per pair, pairs of similar length together.
batches = steps.batches(config, model, data)

# 5. Train, keeping the best model by valid accuracy at the threshold fitted on valid (graded labels: Spearman).
run = steps.train(config, trainer, batches, steps.evaluator(config, data), model, output)

# 6. Evaluate: test accuracy at the valid threshold, test Spearman of the scores.
scores = steps.final_scores(config, run, data)

# 7. Results: OUTPUT/results.json and results.md.
steps.report(config, checkpoint, output, run, data, scores, t0, batches)
