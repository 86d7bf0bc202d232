"""A bi-encoder on any task or several (CoSENT, Sentence-BERT softmax, cosine MSE), written out.

    python tasks/train_bi_encoder.py --task BQ --loss sbert --data-dir ../shared/data --output runs/BQ_sbert_cls
    python tasks/train_bi_encoder.py --task LCQMC,BQ,ATEC,STS-B --eval-tasks PAWSX --data-dir ../shared/data

The same job as `zoo train bi-encoder` (zoo/jobs/bi_encoder.py); tasks/lcqmc_cosent.py is the one-task case.
"""

import time

import zoo  # noqa: I001  (first: it imports Keras with TensorFlow's start-up lines silenced)
import keras

from zoo.config import parse
from zoo.data import load_splits
from zoo.evaluation import MeanEvaluator, SpearmanEvaluator
from zoo.jobs.bi_encoder import BiEncoderConfig, objective_loss, report, train_batches
from zoo.jobs.common import limit_eval, setup_distribution
from zoo.jobs.evaluate import evaluate_task
from zoo.logs import setup_cli
from zoo.models import build_pair_trainer
from zoo.train import fit, learning_rate

setup_cli()
config = parse(BiEncoderConfig)
t0 = time.time()
checkpoint = config.checkpoint or zoo.DEFAULT_PRESET
output = config.output or f"runs/{'+'.join(config.tasks)}_{config.objective}_{config.pooling}"
setup_distribution(config)  # --distribute data-parallel: every device (README: many GPUs / hosts)
keras.utils.set_random_seed(config.seed)

# 1. Data: each task's train / valid / test pairs (with --stream / --train-files, train is read lazily in step 3).
splits = {t: limit_eval(load_splits(t, config.data_dir, config.limit_train, config.kept_splits), config.limit_eval)
          for t in config.tasks}

# 2. Model.
encoder = zoo.SentenceEncoder.from_preset(checkpoint, pooling=config.pooling, maxlen=config.maxlen)

# 3. Loss and batches: one task's pairs, or several tasks' (one task per batch, or mixed: --batching).
batches = train_batches(config, encoder.tokenizer, splits)
# cosine per pair (at each --matryoshka-dims too), or the SBERT softmax head
trainer = build_pair_trainer(encoder, config.objective, matryoshka_dims=config.matryoshka_dims)
trainer.compile(optimizer=keras.optimizers.Adam(learning_rate(config.lr, config.warmup, config.epochs * len(batches))),
                loss=objective_loss(config.objective, config.matryoshka_dims), jit_compile=config.jit_compile)

# 4. Train, keeping the best model by valid Spearman (the mean over tasks when there are several).
evaluators = {t: SpearmanEvaluator(splits[t]["valid"], config.eval_batch_size, name=t) for t in config.tasks}
evaluator = evaluators[config.tasks[0]] if len(config.tasks) == 1 else MeanEvaluator(evaluators)
evaluator.name = "valid"
run = fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, evaluator=evaluator, model=encoder,
          save_every=config.save_every, show_progress=config.progress,
          metadata={"task": config.task, "objective": config.objective})

# 5. Evaluate the best model on every task's test split (and on --eval-tasks, not trained on).
best = zoo.SentenceEncoder.from_preset(run.model_dir)
scores = {t: evaluate_task(best, splits[t], config.eval_batch_size) for t in config.tasks}
for t in config.eval_tasks:
    scores[t] = evaluate_task(best, limit_eval(load_splits(t, config.data_dir, splits=("valid", "test")),
                                               config.limit_eval), config.eval_batch_size)

# 6. Results.
report(config, checkpoint, output, run, splits, scores, t0, batches)
