"""Cross-encoder job: both texts in one sequence, a score from [CLS] (softmax head: cross-entropy; CoSENT head:
the ranking loss on raw scores), kept by valid accuracy at the threshold fitted on valid; test accuracy at that
threshold and test Spearman of the scores."""

from __future__ import annotations

import dataclasses
import time

from ..choices import SCORE_HEADS as HEADS
from ..config import DataOptions, StreamOptions, TrainOptions, option, output_option
from ..data.tasks import load_splits
from ..errors import ConfigError
from . import common
from .common import check_checkpoint, check_tasks, streamed_files, training_precision


@dataclasses.dataclass
class CrossEncoderConfig(TrainOptions, DataOptions, StreamOptions):
    """Train a cross-encoder (interaction-based matcher) on sentence pairs."""

    reports_without_test = True  # --valid alone: the test columns stay empty

    tasks: tuple = option(("LCQMC",), "the task to train on (one)", aliases=("--task",))
    head: str = option("softmax", "softmax: P(similar), cross-entropy; cosent: a raw score, CoSENT ranking loss",
                       choices=HEADS)
    maxlen: int = option(128, "tokens per pair")
    lr: float = option(2e-5, "learning rate")
    zero_segments: bool = option(False, "all segment ids 0, as bojone's interact.py")
    length_buckets: bool = option(True, "plain random batches (default: batches of similar-length pairs)")
    output: str | None = output_option("runs/TASK_cross_HEAD")

    def __post_init__(self):
        super().__post_init__()
        self.check_data()
        check_tasks(self.tasks, config=self)
        if len(self.tasks) != 1:
            raise ConfigError(f"--tasks: a cross-encoder trains on one task, got {','.join(self.tasks)}")
        check_checkpoint(self.checkpoint)
        if self.head not in HEADS:
            raise ConfigError(f"--head must be one of {HEADS}, got {self.head!r}")

    @property
    def task(self):
        return self.tasks[0]


# ---------------------------------------------------------------------------------- the job's steps
# ``run`` calls them in this order, and so does the recipe (tasks/train_cross_encoder.py).
STEPS = ("start", "data", "model", "trainer", "batches", "evaluator", "train", "final_scores", "report")


def start(config):
    """The distribution (``--distribute``), the seed, the run folder -> (checkpoint, output)."""
    return common.start(config, f"{config.task}_cross_{config.head}")


def data(config):
    """{split: PairDataset} of the task (or your files); train is left out when streamed (``--stream``)."""
    return load_splits(config.task, config.data_dir, config.limit_train, config.kept_splits, config.limit_eval,
                       **config.reading(config.task))


def model(config, checkpoint):
    """The CrossEncoder: ``[CLS] a [SEP] b [SEP]`` -> a score from [CLS] (``--head`` softmax: P(similar); cosent: a
    raw score)."""
    from ..models.cross_encoder import CrossEncoder

    with training_precision(config):
        return CrossEncoder.from_preset(checkpoint, head=config.head, maxlen=config.maxlen,
                                        zero_segments=config.zero_segments)


def trainer(config, model):
    """The compiled training model: cross-entropy on 0/1 labels (softmax head), or CoSENT's ranking loss on the raw
    scores (cosent head: 0/1 or graded labels); Adam at ``--lr``."""
    import keras

    from ..losses import CoSENTLoss
    from ..train.adversarial import adversarial
    from ..train.optimizers import training_optimizer

    compiled = adversarial(model.trainer(), config.adversarial_epsilon)
    compiled.compile(optimizer=training_optimizer("adam", config.lr, **config.optimizer_options()),
                     jit_compile=config.jit_compile,
                     loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True) if config.head == "softmax"
                     else CoSENTLoss(scale=1.0))
    return compiled


def batches(config, model, data):
    """One row ``[CLS] a [SEP] b [SEP]`` per pair, batches of similar length (``--length-buckets``), labels as the
    head's loss wants them; read lazily with ``--stream``."""
    from ..train.batches import PairBatches
    from ..train.streaming import streamed_pairs

    label_type = "int32" if config.head == "softmax" else "float32"
    if config.streamed:
        return streamed_pairs(model.tokenizer, config.task, config.batch_size, config.maxlen,
                              lambda y, graded: y.astype(label_type), config.data_dir,
                              **config.reading(config.task), limit=config.limit_train,
                              length_buckets=config.length_buckets, joint=True, zero_segments=config.zero_segments)
    return PairBatches(model.tokenizer, data["train"], config.batch_size, config.maxlen,
                       data["train"].labels.astype(label_type), config.length_buckets, joint=True,
                       zero_segments=config.zero_segments)


def evaluator(config, data):
    """What keeps the best epoch: valid accuracy at the threshold fitted on valid (0/1 labels), or the Spearman of
    the scores (graded labels, such as STS-B's 0-5)."""
    import numpy as np

    from ..evaluation import AccuracyEvaluator, SpearmanEvaluator

    binary = np.isin(data["valid"].labels, (0, 1)).all()
    return AccuracyEvaluator(data["valid"]) if binary else SpearmanEvaluator(data["valid"])


def train(config, trainer, batches, evaluator, model, output):
    """Keras fit, resumable (``zoo.train.fit``), keeping the best model in OUTPUT/model -> the Run."""
    from ..train.loop import fit

    return fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, evaluator=evaluator, model=model,
               save_every=config.save_every, show_progress=config.progress,
               metadata={"task": config.task, "head": config.head})


def final_scores(config, run, data):
    """The best model's valid and test Spearman of the scores, and (0/1 labels) test accuracy at the threshold
    fitted on valid."""
    from ..evaluation import evaluate_task
    from ..models.cross_encoder import CrossEncoder

    return evaluate_task(CrossEncoder.from_preset(run.model_dir), data, valid_scores=run.best_scores)


def run(config: CrossEncoderConfig):
    """The job: its steps in order; returns the results dict (also written to OUTPUT/results.json and
    results.md)."""
    t0 = time.time()
    checkpoint, output = start(config)
    splits = data(config)
    cross_encoder = model(config, checkpoint)
    compiled = trainer(config, cross_encoder)
    source = batches(config, cross_encoder, splits)
    result = train(config, compiled, source, evaluator(config, splits), cross_encoder, output)
    return report(config, checkpoint, output, result, splits, final_scores(config, result, splits), t0, source)


def report(config, checkpoint, output, run, data, scores, t0, batches=None):
    """Write results.json and results.md of a cross-encoder run (``scores`` from ``evaluate_task``)."""
    from ..train.results import accuracy_cell, data_files, history_table, run_record, table, write_results

    files = data_files(data)
    if streamed_files(batches):
        files["train"] = streamed_files(batches)
    results = {**run_record(config, run, t0, checkpoint=checkpoint, output=output), "data_files": files, **scores}
    binary = "threshold" in scores
    markdown = table(["task", "head", "valid acc", "threshold", "test acc [95% CI]", "valid Spearman",
                      "test Spearman"],
                     [(config.task, config.head, scores.get("valid_accuracy"),
                       f"{scores['threshold']:.4f}" if binary else None, accuracy_cell(scores) if binary else None,
                       scores["valid_spearman"], scores.get("test_spearman"))])
    return write_results(output, results, markdown + "\n\n" + history_table(
        run.history, "valid_accuracy" if binary else "valid_spearman", run.best_epoch))
