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

import keras

from zoo.data import load_splits
from zoo.distribute import setup
from zoo.evaluation import SpearmanEvaluator, evaluate_task
from zoo.losses import CoSENTLoss
from zoo.models import build_pair_trainer
from zoo.train import PairBatches, fit, learning_rate

job = zoo.job("train bi-encoder")  # the flags of `zoo train bi-encoder`, and its results writer
# the settings this script acts on; the job's others (--tasks, --loss, --batching, ...) are refused when set
config = job.parse(honours=(zoo.config.TrainOptions, "data_dir", "pooling", "warmup", "eval_batch_size", "length_buckets"),
                   description="CoSENT bi-encoder on LCQMC (the main job)")
t0 = time.time()
checkpoint = config.checkpoint or zoo.DEFAULT_PRESET
output = config.output or f"runs/LCQMC_cosent_{config.pooling}"
# --distribute data-parallel: every device (docs: training on many devices); several TensorFlow replicas: no XLA
dist = setup(config.distribute, config.coordinator, config.num_processes, config.process_id, config.batch_size)
config.jit_compile = dist.jit_compile(config.jit_compile)
keras.utils.set_random_seed(config.seed)

# 1. Data: LCQMC train / valid / test, pairs (text_a, text_b, label 0/1).
data = load_splits("LCQMC", config.data_dir, config.limit_train, limit_eval=config.limit_eval)

# 2. Model: BERT from any checkpoint (Google TF1, transformers, zoo preset) -> one vector per text.
encoder = zoo.SentenceEncoder.from_preset(checkpoint, pooling=config.pooling, maxlen=config.maxlen)

# 3. Loss: CoSENT on the cosine of each pair; batches of similar-length pairs, rows a1, b1, a2, b2, ...
batches = PairBatches(encoder.tokenizer, data["train"], config.batch_size, config.maxlen,
                      length_buckets=config.length_buckets)
trainer = build_pair_trainer(encoder, "cosent")
trainer.compile(optimizer=keras.optimizers.Adam(learning_rate(config.lr, config.warmup, config.epochs * len(batches))),
                loss=CoSENTLoss(), jit_compile=config.jit_compile)

# 4. Train: Keras fit, resumable; valid Spearman before training and after each epoch keeps the best model.
run = fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, model=encoder,
          evaluator=SpearmanEvaluator(data["valid"], config.eval_batch_size), save_every=config.save_every,
          show_progress=config.progress, metadata={"task": "LCQMC", "objective": "cosent"})

# 5. Evaluate the best model: test Spearman, and accuracy at the threshold fitted on valid.
best = zoo.SentenceEncoder.from_preset(run.model_dir)
scores = evaluate_task(best, data, config.eval_batch_size, valid_scores=run.best_scores)

# 6. Results: OUTPUT/results.json and results.md.
job.report(config, checkpoint, output, run, {"LCQMC": data}, {"LCQMC": scores}, t0)
