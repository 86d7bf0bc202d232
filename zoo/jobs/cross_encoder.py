"""Cross-encoder job: both texts in one sequence, a score from [CLS] (softmax head: cross-entropy; CoSENT head:
the ranking loss on raw scores), kept by valid accuracy at the threshold fitted on valid; test accuracy at that
threshold and test Spearman of the scores."""

from __future__ import annotations

import dataclasses
import time

from ..config import CROSS_ENCODER_HEADS as HEADS
from ..config import DataOptions, StreamOptions, TrainOptions, option, output_option
from ..data import load_splits
from ..errors import ConfigError
from .common import check_checkpoint, check_tasks, start, streamed_files


@dataclasses.dataclass
class CrossEncoderConfig(TrainOptions, DataOptions, StreamOptions):
    """Train a cross-encoder (interaction-based matcher) on sentence pairs."""

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


def run(config: CrossEncoderConfig):
    """The job; returns the results dict (also written to OUTPUT/results.json and results.md)."""
    import keras

    from ..evaluation import AccuracyEvaluator, evaluate_task
    from ..losses import CoSENTLoss
    from ..models.cross_encoder import CrossEncoder
    from ..train import PairBatches, fit, streamed_pairs

    t0 = time.time()
    checkpoint, output = start(config, f"{config.task}_cross_{config.head}")
    data = load_splits(config.task, config.data_dir, config.limit_train, config.kept_splits, config.limit_eval,
                       **config.reading(config.task))

    model = CrossEncoder.from_preset(checkpoint, head=config.head, maxlen=config.maxlen,
                                     zero_segments=config.zero_segments)
    trainer = model.trainer()
    trainer.compile(optimizer=keras.optimizers.Adam(config.lr), jit_compile=config.jit_compile,
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True) if config.head == "softmax"
                    else CoSENTLoss(scale=1.0))
    label_type = "int32" if config.head == "softmax" else "float32"
    if config.streamed:
        batches = streamed_pairs(model.tokenizer, config.task, config.batch_size, config.maxlen,
                                 lambda y, graded: y.astype(label_type), config.data_dir,
                                 **config.reading(config.task), limit=config.limit_train, length_buckets=config.length_buckets, joint=True,
                                 zero_segments=config.zero_segments)
    else:
        batches = PairBatches(model.tokenizer, data["train"], config.batch_size, config.maxlen,
                              data["train"].labels.astype(label_type), config.length_buckets, joint=True,
                              zero_segments=config.zero_segments)
    run = fit(trainer, batches, output, epochs=config.epochs, seed=config.seed,
              evaluator=AccuracyEvaluator(data["valid"]), model=model, save_every=config.save_every,
              show_progress=config.progress, metadata={"task": config.task, "head": config.head})

    scores = evaluate_task(CrossEncoder.from_preset(run.model_dir), data, valid_scores=run.best_scores)
    return report(config, checkpoint, output, run, data, scores, t0, batches)


def report(config, checkpoint, output, run, data, scores, t0, batches=None):
    """Write results.json and results.md of a cross-encoder run (``scores`` from ``evaluate_task``)."""
    from ..train.results import accuracy_cell, data_files, history_table, run_record, table, write_results

    files = data_files(data)
    if streamed_files(batches):
        files["train"] = streamed_files(batches)
    results = {**run_record(config, run, t0, checkpoint=checkpoint, output=output), "data_files": files, **scores}
    markdown = table(["task", "head", "valid acc", "threshold", "test acc [95% CI]", "test Spearman"],
                     [(config.task, config.head, scores["valid_accuracy"], f"{scores['threshold']:.4f}",
                       accuracy_cell(scores), scores["test_spearman"])])
    return write_results(output, results,
                         markdown + "\n\n" + history_table(run.history, "valid_accuracy", run.best_epoch))
