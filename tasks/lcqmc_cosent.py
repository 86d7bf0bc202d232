"""The main job, written out: a CoSENT bi-encoder on LCQMC, from the data to the results table.

    python tasks/lcqmc_cosent.py                        # embedded LCQMC + default model, 1 epoch
    python tasks/lcqmc_cosent.py --checkpoint chinese_L-12_H-768_A-12/ --epochs 5 --output runs/bert
    python tasks/lcqmc_cosent.py --help                 # every flag

Rerunning with the same --output resumes a killed run (or, when it finished, re-evaluates its model). The same
job, for any task and loss, is `zoo train bi-encoder` (zoo/jobs/bi_encoder.py); its flags are these.
"""

import time

import zoo  # noqa: I001  (first: it imports Keras with TensorFlow's start-up lines silenced)
import keras

from zoo.config import parse
from zoo.data import load_splits
from zoo.evaluation import SpearmanEvaluator
from zoo.jobs.bi_encoder import BiEncoderConfig, report
from zoo.jobs.common import limit_eval, setup_distribution
from zoo.jobs.evaluate import evaluate_task
from zoo.logs import setup_cli
from zoo.losses import CoSENTLoss
from zoo.models import build_pair_trainer
from zoo.train import PairBatches, fit, learning_rate

setup_cli()
config = parse(BiEncoderConfig, fixed={"task": "LCQMC", "objective": "cosent", "matryoshka_dims": (),
                                         "train_files": (), "stream": False},
               description="CoSENT bi-encoder on LCQMC (the main job)")
t0 = time.time()
checkpoint = config.checkpoint or zoo.DEFAULT_PRESET
output = config.output or f"runs/LCQMC_cosent_{config.pooling}"
setup_distribution(config)  # --distribute data-parallel: every device (README: many GPUs / hosts)
keras.utils.set_random_seed(config.seed)

# 1. Data: LCQMC train / valid / test, pairs (text_a, text_b, label 0/1).
data = limit_eval(load_splits("LCQMC", config.data_dir, config.limit_train), config.limit_eval)

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
report(config, checkpoint, output, run, {"LCQMC": data}, {"LCQMC": scores}, t0)
