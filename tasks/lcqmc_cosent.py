"""The main job, written out: a CoSENT bi-encoder on LCQMC, from the data to the results table.

    python tasks/lcqmc_cosent.py                        # embedded LCQMC + default model, 1 epoch
    python tasks/lcqmc_cosent.py --checkpoint chinese_L-12_H-768_A-12/ --epochs 5 --output runs/bert
    python tasks/lcqmc_cosent.py --help                 # every flag

Rerunning with the same --output resumes a killed run (or, when it finished, re-evaluates its model). The same
job, for any task and loss, is `zoo train bi-encoder` (zoo/jobs/bi_encoder.py); its flags are these.

Recorded run (written by tools/results_pages.py from bench/results):
<!-- generated: run lcqmc_cosent_4000 -->
    python tasks/lcqmc_cosent.py --limit-train 4000 --checkpoint ../shared/models/chinese_L-4_H-256_A-4/google \\
        --seed 42 --output runs/lcqmc_cosent_4000 --no-progress

LCQMC test Spearman 59.31 (valid 48.66); test accuracy 74.82% [74.1, 75.6] at the valid threshold; 78 s of training
on 2 CPU cores (bench/results/runs/lcqmc_cosent_4000.json).
<!-- /generated -->
"""

import zoo

zoo.logs.setup_cli()  # first: the backend's start-up lines stay out of the terminal; Ctrl-C ends in one line

# ruff: noqa: E402  (imports after setup_cli)
import time

job = zoo.job("train bi-encoder")  # the flags of `zoo train bi-encoder`, and its steps
# the settings this script acts on; the job's others (--tasks, --loss, --batching, ...) are refused when set
config = job.parse(honours=(zoo.config.TrainOptions, "data_dir", "pooling", "warmup", "eval_batch_size",
                            "length_buckets"), description="CoSENT bi-encoder on LCQMC (the main job)")
steps = job.steps
t0 = time.time()

# 0. Start: the distribution (--distribute data-parallel: every device), the seed, the run folder.
checkpoint, output = steps.start(config)

# 1. Data: LCQMC train / valid / test, pairs (text_a, text_b, label 0/1).
splits = steps.data(config)

# 2. Model: BERT from any checkpoint (Google TF1, transformers, zoo preset) -> one vector per text.
encoder = steps.model(config, checkpoint)

# 3. Batches of similar-length pairs, rows a1, b1, a2, b2, ...
batches = steps.batches(config, encoder, splits)

# 4. Loss: CoSENT on the cosine of each pair; Adam at --lr.
trainer = steps.trainer(config, encoder, batches)

# 5. Train: Keras fit, resumable; valid Spearman before training and after each epoch keeps the best model.
run = steps.train(config, trainer, batches, steps.evaluator(config, splits), encoder, output)

# 6. Evaluate the best model: test Spearman, and accuracy at the threshold fitted on valid.
scores = steps.final_scores(config, run, splits)

# 7. Results: OUTPUT/results.json and results.md.
steps.report(config, checkpoint, output, run, splits, scores, t0, batches)
