"""Mirror-BERT / SimCSE, written out: an unsupervised sentence encoder, no labels.

    python tasks/mirror_bert.py --data-dir ../shared/data --output runs/mirror     # --k 0: SimCSE (dropout only)

The same job as `zoo mirror-bert` (zoo/jobs/mirror_bert.py).
"""

import time

import zoo  # noqa: I001  (first: it imports Keras with TensorFlow's start-up lines silenced)
import keras

from zoo.config import parse
from zoo.data import load_task, resolve_data_dir
from zoo.evaluation import SpearmanEvaluator
from zoo.jobs.common import setup_distribution
from zoo.jobs.mirror_bert import MirrorBatches, MirrorBertConfig, available_tasks, report, training_sentences
from zoo.logs import setup_cli
from zoo.losses import InBatchSoftmaxLoss
from zoo.train import fit

setup_cli()
config = parse(MirrorBertConfig)
t0 = time.time()
start = config.start or zoo.DEFAULT_PRESET

# 1. Data: sentences only; two views of each (a random span masked in one copy; SimCSE: dropout alone).
tasks = available_tasks(config.data_dir)
sentences = training_sentences(config, tasks)

# 2. Model: an encoder that keeps dropout on while training.
setup_distribution(config)  # --distribute data-parallel: every device (README: many GPUs / hosts)
keras.utils.set_random_seed(config.seed)
encoder = zoo.SentenceEncoder.from_preset(start, pooling=config.pooling, maxlen=config.maxlen, dropout=config.dropout)

# 3. Loss: InfoNCE, each view's partner is the other view of its sentence.
trainer = encoder.trainer()
trainer.compile(optimizer=keras.optimizers.AdamW(config.lr, weight_decay=0.01),
                loss=InBatchSoftmaxLoss(config.temperature), jit_compile=config.jit_compile)
batches = MirrorBatches(encoder.tokenizer, sentences, config.batch_size, config.maxlen, config.k, config.min_chars)

# 4. Train, keeping the best model by LCQMC valid Spearman; zero-shot test Spearman before and after.
tests = {task: load_task(task, "test", folder) for task, folder in tasks.items()}
before = {t: SpearmanEvaluator(d)(encoder)["spearman"] for t, d in tests.items()}
valid = load_task("LCQMC", "valid", tasks.get("LCQMC") or resolve_data_dir("LCQMC", config.data_dir))
run = fit(trainer, batches, config.output, epochs=config.epochs, seed=config.seed, evaluator=SpearmanEvaluator(valid),
          model=encoder, save_every=1000, show_progress=config.progress, unit="sent",
          metadata={"job": "mirror-bert" if config.k else "simcse"})
best = zoo.SentenceEncoder.from_preset(run.model_dir)
after = {t: SpearmanEvaluator(d)(best)["spearman"] for t, d in tests.items()}

# 5. Results.
report(config, start, sentences, run, before, after, t0)
