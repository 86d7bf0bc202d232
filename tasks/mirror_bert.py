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

import keras

from zoo.data import available_tasks, load_splits, read_lines, read_pairs, sample_texts, sample_train_texts
from zoo.distribute import setup
from zoo.evaluation import SpearmanEvaluator
from zoo.losses import InBatchSoftmaxLoss
from zoo.train import MirrorBatches, fit

job = zoo.job("mirror-bert")  # the flags of `zoo mirror-bert`, and its results writer
config = job.parse()
t0 = time.time()
start = config.checkpoint or zoo.DEFAULT_PRESET

# 1. Data: sentences only (--sentences, or 10,000 train-split texts); two views of each (a random span masked in
#    one copy; SimCSE, --k 0: dropout alone).
#    The test splits scored: those of --tasks found, or your --test (then --valid keeps the best epoch).
tasks = {config.tasks[0]: config.data_dir} if config.valid else available_tasks(config.tasks, config.data_dir)
if config.sentences:
    sentences = [t.strip() for t in read_lines(config.sentences) if t.strip()][: config.limit_train]
elif config.train:  # the texts of your pairs
    reading = config.reading(config.tasks[0])
    texts = read_pairs(config.train, columns=reading["columns"], skip_bad_lines=reading["skip_bad_lines"],
                       labels=reading["labels"]).texts
    sentences = sample_texts(texts, min(config.limit_train or 10_000, 10_000), config.seed)
else:
    sentences = sample_train_texts(tasks, min(config.limit_train or 10_000, 10_000), config.seed)

# 2. Model: an encoder that keeps dropout on while training.
# --distribute data-parallel: every device (docs: training on many devices); several TensorFlow replicas: no XLA
dist = setup(config.distribute, config.coordinator, config.num_processes, config.process_id, config.batch_size)
config.jit_compile = dist.jit_compile(config.jit_compile)
keras.utils.set_random_seed(config.seed)
encoder = zoo.SentenceEncoder.from_preset(start, pooling=config.pooling, maxlen=config.maxlen, dropout=config.dropout)

# 3. Loss: InfoNCE, each view's partner is the other view of its sentence (at each --matryoshka-dims too).
trainer = encoder.trainer()
trainer.compile(optimizer=keras.optimizers.AdamW(config.lr, weight_decay=0.01),
                loss=InBatchSoftmaxLoss(config.temperature, config.matryoshka_dims), jit_compile=config.jit_compile)
batches = MirrorBatches(encoder.tokenizer, sentences, config.batch_size, config.maxlen, config.k, config.min_chars)

# 4. Train, keeping the best model by LCQMC valid Spearman; zero-shot test Spearman before and after.
tests = {task: load_splits(task, folder, splits=("test",), limit_eval=config.limit_eval, **config.reading(task))["test"]
         for task, folder in tasks.items()}
before = {t: SpearmanEvaluator(d)(encoder)["spearman"] for t, d in tests.items()}
selector = config.tasks[0] if config.valid else "LCQMC"
valid = load_splits(selector, tasks.get(selector) or config.data_dir, splits=("valid",), limit_eval=config.limit_eval,
                    **config.reading(selector))["valid"]
run = fit(trainer, batches, config.output, epochs=config.epochs, seed=config.seed,
          evaluator=SpearmanEvaluator(valid), model=encoder, save_every=config.save_every,
          show_progress=config.progress, unit="sent", metadata={"job": "mirror-bert" if config.k else "simcse"})
best = zoo.SentenceEncoder.from_preset(run.model_dir)
after = {t: SpearmanEvaluator(d)(best)["spearman"] for t, d in tests.items()}

# 5. Results.
job.report(config, start, sentences, run, before, after, t0)
