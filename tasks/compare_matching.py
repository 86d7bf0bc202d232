"""Representation vs interaction (CoSENT 二): a CoSENT and a Sentence-BERT bi-encoder and a cross-encoder per task,
each trained by its own job (tasks/train_bi_encoder.py, tasks/train_cross_encoder.py) or reloaded when its run
folder is complete; thresholds fitted on valid; test accuracy with bootstrap intervals, Spearman, and plots.

    python tasks/compare_matching.py --tasks LCQMC,PAWSX --data-dir ../shared/data --output runs/compare_lcqmc

The same job as `zoo compare` (zoo/jobs/compare.py).

Recorded run (written by tools/results_pages.py from bench/results):
<!-- generated: run compare_4000 -->
    python tasks/compare_matching.py --tasks LCQMC --checkpoint ../shared/models/chinese_L-4_H-256_A-4/google \\
        --data-dir ../shared/data --limit-train 4000 --output runs/compare_4000 --no-progress

LCQMC cosent: test accuracy 74.82% [74.1, 75.6], test Spearman 59.31; LCQMC sbert: test accuracy 63.77% [62.9,
64.6], test Spearman 38.12; LCQMC interact: test accuracy 77.99% [77.3, 78.7], test Spearman 66.25; 15 min in all on
2 CPU cores (bench/results/runs/compare_4000.json).
<!-- /generated -->
"""

import zoo

zoo.logs.setup_cli()  # first: the backend's start-up lines stay out of the terminal; Ctrl-C ends in one line

job = zoo.job("compare")  # each model is trained by its own job, or reloaded when its run folder is complete
job.run(job.parse())
