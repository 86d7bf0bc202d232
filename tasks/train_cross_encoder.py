"""A cross-encoder (interaction-based matcher) on one task, written out.

    python tasks/train_cross_encoder.py --task LCQMC --head softmax --output runs/LCQMC_cross
    python tasks/train_cross_encoder.py --task BQ --data-dir ../shared/data --epochs 3 --lr 5e-5 --output runs/BQ_cross

The same job as `zoo train cross-encoder` (zoo/jobs/cross_encoder.py).
"""

import time

import zoo  # noqa: I001  (first: it imports Keras with TensorFlow's start-up lines silenced)
import keras

from zoo.config import parse
from zoo.data import load_splits
from zoo.evaluation import AccuracyEvaluator
from zoo.jobs.common import limit_eval, setup_distribution, streamed_pairs
from zoo.jobs.cross_encoder import CrossEncoderConfig, report
from zoo.jobs.evaluate import evaluate_task
from zoo.logs import setup_cli
from zoo.losses import CoSENTLoss
from zoo.train import PairBatches, fit

setup_cli()
config = parse(CrossEncoderConfig)
t0 = time.time()
checkpoint = config.checkpoint or zoo.DEFAULT_PRESET
output = config.output or f"runs/{config.task}_cross_{config.head}"
setup_distribution(config)  # --distribute data-parallel: every device (README: many GPUs / hosts)
keras.utils.set_random_seed(config.seed)

# 1. Data (with --stream / --train-files the train pairs are read lazily, in step 3).
data = limit_eval(load_splits(config.task, config.data_dir, config.limit_train, config.kept_splits),
                  config.limit_eval)

# 2. Model: [CLS] a [SEP] b [SEP] -> a score from [CLS] (softmax: P(similar); cosent: a raw score).
model = zoo.CrossEncoder.from_preset(checkpoint, head=config.head, maxlen=config.maxlen,
                                     zero_segments=config.zero_segments)

# 3. Loss: cross-entropy on 0/1 labels, or CoSENT's ranking loss on the raw scores.
trainer = model.trainer()
if config.head == "softmax":
    loss, label_type = keras.losses.SparseCategoricalCrossentropy(from_logits=True), "int32"
else:
    loss, label_type = CoSENTLoss(scale=1.0), "float32"
trainer.compile(optimizer=keras.optimizers.Adam(config.lr), loss=loss, jit_compile=config.jit_compile)
if config.streamed:
    batches = streamed_pairs(config, model.tokenizer, config.task, lambda y, graded: y.astype(label_type), joint=True,
                             zero_segments=config.zero_segments)
else:
    batches = PairBatches(model.tokenizer, data["train"], config.batch_size, config.maxlen,
                          data["train"].labels.astype(label_type), config.length_buckets, joint=True,
                          zero_segments=config.zero_segments)

# 4. Train, keeping the best model by valid accuracy at the threshold fitted on valid.
run = fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, evaluator=AccuracyEvaluator(data["valid"]),
          model=model, save_every=config.save_every, show_progress=config.progress,
          metadata={"task": config.task, "head": config.head})

# 5. Evaluate: test accuracy at the valid threshold, test Spearman of the scores.
scores = evaluate_task(zoo.CrossEncoder.from_preset(run.model_dir), data, valid_scores=run.best_scores)

# 6. Results: OUTPUT/results.json and results.md.
report(config, checkpoint, output, run, data, scores, t0, batches)
