"""Mirror-BERT / SimCSE, written out: an unsupervised sentence encoder, no labels.

    python tasks/mirror_bert.py --data-dir ../shared/data --output runs/mirror     # --k 0: SimCSE (dropout only)

The same job as `zoo mirror-bert` (zoo/jobs/mirror_bert.py).

Recorded run (written by tools/results_pages.py from bench/results):
<!-- generated: run mirror_bert -->
    python tasks/mirror_bert.py --data-dir ../shared/data --output runs/mirror_bert --no-progress

zero-shot test Spearman LCQMC 54.02 -> 50.51, BQ 41.36 -> 41.19, STS-B 50.85 -> 51.27; 32 min of training on 2 CPU
cores (bench/results/runs/mirror_bert.json).
<!-- /generated -->
"""

import zoo

zoo.logs.setup_cli()  # first: the backend's start-up lines stay out of the terminal; Ctrl-C ends in one line

# ruff: noqa: E402  (imports after setup_cli)
import time

job = zoo.job("mirror-bert")  # the flags of `zoo mirror-bert`, and its steps
config = job.parse()
steps = job.steps
t0 = time.time()

# 0. Start: the distribution (--distribute data-parallel: every device).
checkpoint = steps.start(config)

# 1. Data: sentences only (--sentences, or 10,000 train-split texts); the test splits scored: those of --tasks
#    found, or your --test (then --valid keeps the best epoch).
tasks, sentences = steps.data(config)

# 2. Model: an encoder that keeps dropout on while training.
encoder = steps.model(config, checkpoint)

# 3. Two views of each sentence (a random span masked in one copy; SimCSE, --k 0: dropout alone); loss: InfoNCE,
#    each view's partner is the other view of its sentence (at each --matryoshka-dims too).
batches = steps.batches(config, encoder, sentences)
trainer = steps.trainer(config, encoder)

# 4. Train, keeping the best model by LCQMC valid Spearman; zero-shot test Spearman before and after.
tests, valid = steps.evaluation_sets(config, tasks)
before = steps.zero_shot(config, encoder, tests)
run, best = steps.train(config, trainer, batches, valid, encoder)
after = steps.zero_shot(config, best, tests)

# 5. Results.
steps.report(config, checkpoint, sentences, run, before, after, t0)
