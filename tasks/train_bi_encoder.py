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

import keras

from zoo.augment import WORD_ORDER, word_order_pairs
from zoo.corpus import read_corpus
from zoo.data import load_splits
from zoo.distribute import setup
from zoo.evaluation import MeanEvaluator, SpearmanEvaluator, evaluate_task
from zoo.losses import objective_labels, objective_loss
from zoo.models import build_trainer
from zoo.train import InverseClozeBatches, fit, learning_rate, pair_training_batches, streamed_pairs

job = zoo.job("train bi-encoder")  # the flags of `zoo train bi-encoder`, and its results writer
config = job.parse()
t0 = time.time()
checkpoint = config.checkpoint or zoo.DEFAULT_PRESET
output = config.output or f"runs/{config.task}_{config.objective}_{config.pooling}"
# --distribute data-parallel: every device (docs: training on many devices); several TensorFlow replicas: no XLA
dist = setup(config.distribute, config.coordinator, config.num_processes, config.process_id, config.batch_size)
config.jit_compile = dist.jit_compile(config.jit_compile)
keras.utils.set_random_seed(config.seed)

# 1. Data: each task's train / valid / test pairs, or your files (--train/--valid/--test, any format, --columns);
#    with --stream, train is read lazily in step 3; triplets turn the in-batch ranking loss on.
splits = {t: load_splits(t, config.data_dir, config.limit_train, config.kept_splits, config.limit_eval,
                         **config.reading(t)) for t in config.tasks}
job.module.use_triplets(config, splits)

# 2. Model (--query-prefix: put before search queries, saved with it).
encoder = zoo.SentenceEncoder.from_preset(checkpoint, pooling=config.pooling, maxlen=config.maxlen)
encoder.query_prefix = config.query_prefix

# 3. Loss and batches: one task's pairs, or several tasks' (one task per batch, or mixed: --batching), each batch
#    with --word-order-negatives rewrites of its sentences (label 0); --ict-corpus adds inverse cloze batches.
if config.streamed:
    batches = streamed_pairs(encoder.tokenizer, config.tasks[0], config.batch_size, config.maxlen,
                             lambda y, graded: objective_labels(config.objective, y, graded), config.data_dir,
                             limit=config.limit_train, length_buckets=config.length_buckets,
                             **config.reading(config.tasks[0]))
else:
    ict = [InverseClozeBatches(encoder.tokenizer, read_corpus(config.ict_corpus), config.batch_size, config.ict_maxlen,
                               config.ict_maxlen - 2, config.query_prefix, limit=config.ict_limit, seed=config.seed)
           ] if config.ict_corpus else []
    batches = pair_training_batches(encoder.tokenizer, {t: splits[t]["train"] for t in config.tasks},
                                    config.batch_size, config.maxlen, objective=config.objective,
                                    batching=config.batching, length_buckets=config.length_buckets,
                                    in_batch=bool(config.in_batch_weight),
                                    word_order_negatives=config.word_order_negatives, seed=config.seed, extra=ict)
# cosine per pair (at each --matryoshka-dims too), the SBERT softmax head, or the embeddings (--in-batch-weight)
trainer = build_trainer(encoder, config.objective, config.matryoshka_dims, in_batch=bool(config.in_batch_weight))
trainer.compile(optimizer=keras.optimizers.Adam(learning_rate(config.lr, config.warmup, config.epochs * len(batches))),
                loss=objective_loss(config.objective, config.matryoshka_dims, config.in_batch_weight),
                jit_compile=config.jit_compile)

# 4. Train, keeping the best model by valid Spearman (the mean over tasks, and the word-order set, when several).
evaluators = {t: SpearmanEvaluator(splits[t]["valid"], config.eval_batch_size, name=t) for t in config.tasks}
if config.word_order_valid:  # LCQMC valid's paraphrases, and each first text against its word-order rewrite
    lcqmc_valid = load_splits("LCQMC", config.data_dir, splits=("valid",), limit_eval=config.limit_eval)["valid"]
    evaluators[WORD_ORDER] = SpearmanEvaluator(word_order_pairs(lcqmc_valid), config.eval_batch_size,
                                               name=WORD_ORDER)
evaluator = evaluators[config.tasks[0]] if len(evaluators) == 1 else MeanEvaluator(evaluators)
evaluator.name = "valid"
run = fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, evaluator=evaluator, model=encoder,
          save_every=config.save_every, show_progress=config.progress,
          metadata={"task": config.task, "objective": config.objective})

# 5. Evaluate the best model on every task's test split (and on --eval-tasks, not trained on).
best = zoo.SentenceEncoder.from_preset(run.model_dir)
scores = {t: evaluate_task(best, splits[t], config.eval_batch_size) for t in config.tasks}
for t in config.eval_tasks:
    scores[t] = evaluate_task(best, load_splits(t, config.data_dir, splits=("valid", "test"),
                                                limit_eval=config.limit_eval, **config.reading(t)),
                              config.eval_batch_size)

# 6. Results.
job.report(config, checkpoint, output, run, splits, scores, t0, batches)
