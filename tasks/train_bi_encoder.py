"""A bi-encoder on any task or several (CoSENT, Sentence-BERT softmax, cosine MSE), written out.

    python tasks/train_bi_encoder.py --tasks BQ --loss sbert --data-dir ../shared/data --output runs/BQ_sbert_cls
    python tasks/train_bi_encoder.py --tasks LCQMC,BQ,ATEC,STS-B --eval-tasks PAWSX --data-dir ../shared/data

The same job as `zoo train bi-encoder` (zoo/jobs/bi_encoder.py); tasks/lcqmc_cosent.py is the one-task case.

Recorded run (written by tools/results_pages.py from the shipped preset's ship.json):
<!-- generated: preset zoo-embed-zh-L4 -->
    python tasks/train_bi_encoder.py --tasks LCQMC,BQ,ATEC,STS-B --eval-tasks PAWSX --batching task \\
        --limit-train 80000 --pooling first-last-avg --warmup 0.1 --data-dir ../shared/data --epochs 1 --lr 1e-4 \\
        --save-every 500 --checkpoint ../shared/models/chinese_L-4_H-256_A-4/google --output runs/general_L4

Shipped as the preset zoo-embed-zh-L4: test Spearman ATEC 38.76, BQ 61.59, LCQMC 72.33, PAWS-X 5.63, STS-B 63.64; 58
min of training on 2 CPU cores (data/presets/zoo-embed-zh-L4/ship.json).
<!-- /generated -->
"""

import zoo

zoo.logs.setup_cli()  # first: the backend's start-up lines stay out of the terminal; Ctrl-C ends in one line

# ruff: noqa: E402  (imports after setup_cli)
import time

job = zoo.job("train bi-encoder")  # the flags of `zoo train bi-encoder`, and its steps
config = job.parse()
steps = job.steps
t0 = time.time()

# 0. Start: the distribution (--distribute: every device, docs: training on many devices), the seed, the run folder.
checkpoint, output = steps.start(config)

# 1. Data: each task's train / valid / test pairs, or your files (--train/--valid/--test, any format, --columns);
#    with --stream, train is read lazily in step 3; triplets turn the in-batch ranking loss on.
splits = steps.data(config)

# 2. Model: a SentenceEncoder on any checkpoint (Google TF1, transformers, zoo preset), with --pooling.
encoder = steps.model(config, checkpoint)

# 3. Batches: one task's pairs, or several tasks' (one task per batch, or mixed: --batching), each batch with
#    --word-order-negatives rewrites of its sentences (label 0); --ict-corpus adds inverse cloze batches.
batches = steps.batches(config, encoder, splits)

# 4. Loss: the cosine per pair (at each --matryoshka-dims too), the SBERT softmax head, or the embeddings
#    (--in-batch-weight), with --loss; Adam at --lr, --warmup.
trainer = steps.trainer(config, encoder, batches)

# 5. Train, keeping the best model by valid Spearman (the mean over tasks, and the word-order set, when several).
run = steps.train(config, trainer, batches, steps.evaluator(config, splits), encoder, output)

# 6. Evaluate the best model on every task's test split (and on --eval-tasks, not trained on).
scores = steps.final_scores(config, run, splits)

# 7. Results: OUTPUT/results.json and results.md.
steps.report(config, checkpoint, output, run, splits, scores, t0, batches)
