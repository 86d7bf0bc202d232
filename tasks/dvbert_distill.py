"""DvBERT, written out: distil trained cross-encoder teachers into a bi-encoder with teacher annealing.

    python tasks/dvbert_distill.py --tasks LCQMC --teacher runs/LCQMC_cross/model --objective cosent-gap \\
        --pooling cls --epochs 1 --batch-size 32 --lr 1e-4 --output runs/LCQMC_dvbert_cosent_gap

The same job as `zoo train dvbert` (zoo/jobs/dvbert.py, which explains the objectives).

Recorded run, with the teacher of tasks/train_cross_encoder.py's recorded run (written by tools/results_pages.py
from bench/results):
<!-- generated: run dvbert_4000 -->
    python tasks/dvbert_distill.py --tasks LCQMC --teacher runs/cross_encoder_4000/model --objective cosent-gap \\
        --pooling cls --epochs 1 --batch-size 32 --lr 1e-4 \\
        --checkpoint ../shared/models/chinese_L-4_H-256_A-4/google --data-dir ../shared/data --limit-train 4000 \\
        --seed 42 --output runs/dvbert_4000 --no-progress

LCQMC test Spearman 60.56 (valid 45.08); test accuracy 75.69% [75.0, 76.4] at the valid threshold; 17 min of
training on 2 CPU cores (bench/results/runs/dvbert_4000.json).
<!-- /generated -->
"""

import zoo

zoo.logs.setup_cli()  # first: the backend's start-up lines stay out of the terminal; Ctrl-C ends in one line

# ruff: noqa: E402  (imports after setup_cli)
import time

job = zoo.job("train dvbert")  # the flags of `zoo train dvbert`, and its steps
config = job.parse()
steps = job.steps
t0 = time.time()

# 0. Start: the distribution (--distribute data-parallel: every device), the seed, the run folder.
checkpoint, output = steps.start(config)

# 1. Data (0/1 labels), and the teachers' probabilities on every train pair (cached in the run folder).
data = steps.data(config)
teacher_probs = steps.teachers(config, data, output)

# 2. The student: a bi-encoder (the seed set again, so the teachers' pass does not shift its random stream).
student = steps.model(config, checkpoint)

# 3. Targets annealed from the teachers to the gold labels over the run; the student's loss (--objective: the
#    softmax head against the targets, CoSENT ranked by them, or that CoSENT weighted by each pair's target gap).
batches, trainer = steps.trainer(config, student, data, teacher_probs)

# 4. Train, keeping the best student by valid Spearman.
run = steps.train(config, trainer, batches, steps.evaluator(config, data), student, output)

# 5. Evaluate: test Spearman, accuracy at the valid threshold.
scores = steps.final_scores(config, run, data)

# 6. Results: OUTPUT/results.json and results.md.
steps.report(config, checkpoint, output, run, data, scores, t0)
