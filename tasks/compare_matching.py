"""Representation vs interaction (CoSENT 二): a CoSENT and a Sentence-BERT bi-encoder and a cross-encoder per task,
each trained by its own job (tasks/train_bi_encoder.py, tasks/train_cross_encoder.py) or reloaded when its run
folder is complete; thresholds fitted on valid; test accuracy with bootstrap intervals, Spearman, and plots.

    python tasks/compare_matching.py --tasks LCQMC,PAWSX --data-dir ../shared/data --output runs/compare_lcqmc

The same job as `zoo compare` (zoo/jobs/compare.py).
"""

import zoo

zoo.logs.setup_cli()  # first: the backend's start-up lines stay out of the terminal; Ctrl-C ends in one line

job = zoo.job("compare")  # each model is trained by its own job, or reloaded when its run folder is complete
job.run(job.parse())
