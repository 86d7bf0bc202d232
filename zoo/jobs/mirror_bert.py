"""Mirror-BERT / SimCSE job: an unsupervised sentence encoder from two views of each sentence (a random
character span masked in one copy, Mirror-BERT; dropout alone, SimCSE) and InfoNCE over the batch; zero-shot test
Spearman before and after."""

from __future__ import annotations

import dataclasses
import time

from ..choices import POOLINGS
from ..config import DataOptions, TrainOptions, option
from ..data.pair_files import read_pairs
from ..data.tasks import available_tasks, load_splits, read_lines, sample_texts, sample_train_texts
from ..errors import ConfigError
from ..logs import log
from ..paths import DEFAULT_PRESET
from . import common
from .common import check_checkpoint, check_tasks, setup_distribution, training_precision

EVAL_TASKS = ("LCQMC", "BQ", "STS-B")


@dataclasses.dataclass
class MirrorBertConfig(TrainOptions, DataOptions):
    """Mirror-BERT / SimCSE unsupervised sentence encoder."""

    tasks: tuple = option(EVAL_TASKS, "tasks whose test splits are scored before and after training (those found; "
                                      "their train texts are the default sentences)")
    sentences: str | None = option(None, "a text file, one sentence per line (default: 10,000 random train-split "
                                         "texts of --tasks, or of --train)")
    pooling: str | None = option(None, "sentence vector (default: the pooling of the SentenceEncoder --checkpoint "
                                       "holds, else mean)", choices=POOLINGS)
    k: int = option(5, "characters of the span to mask; 0 = SimCSE (dropout only)")
    min_chars: int = option(6, "leave shorter strings unmasked (the original: 30)")
    temperature: float = option(0.04, "InfoNCE temperature")
    matryoshka_dims: tuple = option((), "Matryoshka training: the loss also on the first D dimensions, e.g. "
                                        "64,128 (encode with truncate_dim=D)")
    batch_size: int = option(200, "sentences per step")
    maxlen: int = option(50, "tokens per sentence (batches are padded to it, as the original)")
    lr: float = option(2e-5, "learning rate (AdamW)")
    dropout: float = option(0.1, "dropout of the encoder while training")
    limit_train: int | None = option(None, "train on N sentences only (the default sample, or the first N of "
                                           "--sentences)")
    output: str = option("runs/mirror", "run folder (rerun to resume)")
    save_every: int = option(1000, "steps between mid-epoch checkpoints")

    def __post_init__(self):
        super().__post_init__()
        self.check_data()
        check_tasks(self.tasks, config=self)
        if self.sentences and self.train:
            raise ConfigError("--sentences and --train: give one (--train: the texts of your pairs)")
        if self.k < 0 or self.batch_size < 2 or self.temperature <= 0:
            raise ConfigError("--k must be >= 0, --batch-size >= 2 and --temperature > 0")
        try:
            self.matryoshka_dims = tuple(sorted(int(d) for d in self.matryoshka_dims))
        except ValueError:
            raise ConfigError(f"--matryoshka-dims must be integers, got {self.matryoshka_dims}") from None
        if self.matryoshka_dims and min(self.matryoshka_dims) < 1:
            raise ConfigError(f"--matryoshka-dims must be >= 1, got {self.matryoshka_dims}")
        check_checkpoint(self.checkpoint)


# ---------------------------------------------------------------------------------- the job's steps
# ``run`` calls them in this order, and so does the recipe (tasks/mirror_bert.py).
STEPS = ("start", "data", "model", "batches", "trainer", "evaluation_sets", "zero_shot", "train", "report")


def start(config):
    """The pooling (``--pooling``, or the checkpoint's own), the distribution (``--distribute``) -> the checkpoint
    to start from."""
    checkpoint = config.checkpoint or DEFAULT_PRESET
    common.resolve_pooling(config, checkpoint, "mean")
    setup_distribution(config)
    return checkpoint


def data(config):
    """({task: data folder} of the test splits scored: those of ``--tasks`` found, or your ``--test``; the training
    sentences: ``--sentences``, or 10,000 random train-split texts of the tasks, or of ``--train``)."""
    tasks = {config.tasks[0]: config.data_dir} if config.valid else available_tasks(config.tasks, config.data_dir)
    return tasks, training_sentences(config, tasks)


def training_sentences(config, tasks):
    """--sentences (one per line), or 10,000 random train-split texts of ``tasks``; ``--limit-train N``: N of them."""
    if config.sentences:
        sentences = [t.strip() for t in read_lines(config.sentences) if t.strip()]
        return sentences[: config.limit_train] if config.limit_train else sentences
    n = min(config.limit_train or 10_000, 10_000)
    if config.limit_train:
        log.info("%d training sentences (--limit-train)", n)
    if config.train:
        reading = {k: v for k, v in config.reading(config.tasks[0]).items() if k != "files"}
        return sample_texts(read_pairs(config.train, **reading).texts, n, config.seed)
    return sample_train_texts(tasks, n, config.seed)


def model(config, checkpoint):
    """The encoder (``--pooling``), which keeps dropout (``--dropout``) on while training; the seed is set first."""
    import keras

    from ..models.bi_encoder import SentenceEncoder

    keras.utils.set_random_seed(config.seed)
    with training_precision(config):
        return SentenceEncoder.from_preset(checkpoint, pooling=config.pooling, maxlen=config.maxlen,
                                           dropout=config.dropout)


def batches(config, encoder, sentences):
    """Two views of each sentence: a random span of ``--k`` characters masked in one copy (Mirror-BERT); dropout
    alone with ``--k 0`` (SimCSE)."""
    from ..train.text_batches import MirrorBatches

    return MirrorBatches(encoder.tokenizer, sentences, config.batch_size, config.maxlen, config.k, config.min_chars)


def trainer(config, encoder):
    """The compiled encoder: InfoNCE, each view's partner the other view of its sentence (at each
    ``--matryoshka-dims`` too); AdamW at ``--lr``."""
    from ..losses import InBatchSoftmaxLoss
    from ..train.adversarial import adversarial
    from ..train.optimizers import training_optimizer

    compiled = adversarial(encoder.trainer(), config.adversarial_epsilon)
    compiled.compile(optimizer=training_optimizer("adamw", config.lr, weight_decay=0.01, **config.optimizer_options()),
                     loss=InBatchSoftmaxLoss(config.temperature, config.matryoshka_dims),
                     jit_compile=config.jit_compile)
    return compiled


def evaluation_sets(config, tasks):
    """({task: test PairDataset}, the valid split that keeps an epoch: yours, or LCQMC's), cut to their first
    ``--limit-eval`` pairs."""
    tests = {task: load_splits(task, folder, splits=("test",), limit_eval=config.limit_eval,
                               **config.reading(task))["test"] for task, folder in tasks.items()}
    selector = config.tasks[0] if config.valid else "LCQMC"
    valid = load_splits(selector, tasks.get(selector) or config.data_dir, splits=("valid",),
                        limit_eval=config.limit_eval, **config.reading(selector))["valid"]
    return tests, valid


def zero_shot(config, encoder, tests):
    """{task: test Spearman} of an encoder (before training, and of the best model after)."""
    from ..evaluation import SpearmanEvaluator

    return {t: SpearmanEvaluator(d)(encoder)["spearman"] for t, d in tests.items()}


def train(config, trainer, batches, valid, encoder):
    """Keras fit, resumable (``zoo.train.fit``): valid Spearman keeps the best encoder in OUTPUT/model -> (the
    Run, the best encoder)."""
    from ..evaluation import SpearmanEvaluator
    from ..models.bi_encoder import SentenceEncoder
    from ..train.loop import fit

    run = fit(trainer, batches, config.output, epochs=config.epochs, seed=config.seed,
              evaluator=SpearmanEvaluator(valid), model=encoder, save_every=config.save_every,
              show_progress=config.progress, unit="sent", metadata={"job": "mirror-bert" if config.k else "simcse"})
    return run, SentenceEncoder.from_preset(run.model_dir)


def run(config: MirrorBertConfig):
    """The job: its steps in order; returns the results dict (also written to OUTPUT/results.json and
    results.md)."""
    t0 = time.time()
    checkpoint = start(config)
    tasks, sentences = data(config)
    encoder = model(config, checkpoint)
    source = batches(config, encoder, sentences)
    compiled = trainer(config, encoder)
    tests, valid = evaluation_sets(config, tasks)
    before = zero_shot(config, encoder, tests)
    result, best = train(config, compiled, source, valid, encoder)
    return report(config, checkpoint, sentences, result, before, zero_shot(config, best, tests), t0)


def report(config, start, sentences, run, before, after, t0):
    """results.json and results.md: zero-shot test Spearman before and after, per task."""
    from ..train.results import history_table, run_record, table, write_results

    markdown = table(["task", "zero-shot test Spearman before", "after"], [(t, before[t], after[t]) for t in before])
    return write_results(config.output, {
        **run_record(config, run, t0, start=start, sentences=len(sentences)),
        "zero_shot_test_spearman_before": before, "zero_shot_test_spearman_after": after},
        markdown + "\n\n" + history_table(run.history, "valid_spearman", run.best_epoch))
