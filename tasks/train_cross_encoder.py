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

import keras

from zoo.data import load_splits
from zoo.distribute import setup
from zoo.evaluation import AccuracyEvaluator, evaluate_task
from zoo.losses import CoSENTLoss
from zoo.train import PairBatches, fit, streamed_pairs

job = zoo.job("train cross-encoder")  # the flags of `zoo train cross-encoder`, and its results writer
config = job.parse()
t0 = time.time()
checkpoint = config.checkpoint or zoo.DEFAULT_PRESET
output = config.output or f"runs/{config.task}_cross_{config.head}"
# --distribute data-parallel: every device (docs: training on many devices); several TensorFlow replicas: no XLA
dist = setup(config.distribute, config.coordinator, config.num_processes, config.process_id, config.batch_size)
config.jit_compile = dist.jit_compile(config.jit_compile)
keras.utils.set_random_seed(config.seed)

# 1. Data (with --stream / --train-files the train pairs are read lazily, in step 3).
data = load_splits(config.task, config.data_dir, config.limit_train, config.kept_splits, config.limit_eval,
                   **config.reading(config.task))

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
    batches = streamed_pairs(model.tokenizer, config.task, config.batch_size, config.maxlen,
                             lambda y, graded: y.astype(label_type), config.data_dir,
                             **config.reading(config.task), limit=config.limit_train, length_buckets=config.length_buckets, joint=True,
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
job.report(config, checkpoint, output, run, data, scores, t0, batches)
