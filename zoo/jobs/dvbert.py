"""DvBERT job: a siamese student learns from trained cross-encoder teachers with teacher annealing (Cheng 2021).

lambda = step / total steps; the target of each pair is lambda * onehot(gold) + (1 - lambda) * p_teacher.
Student objectives: "sbert" (the paper: Sentence-BERT softmax head on [u; v; |u-v|], cross-entropy against each
teacher's annealed target; one shared classifier, teachers' losses summed, temperature 1, binary tasks), "cosent"
(zoo's: CoSENT on cos(u, v) ranked by the annealed positive-class target averaged over teachers) and "cosent-gap"
(the same, each ordered pair weighted by its target gap, so pairs the teachers nearly tie barely count and the loss
slides into plain CoSENT as lambda -> 1). The teachers' probabilities on train are cached in the run folder.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from ..choices import DVBERT_OBJECTIVES as OBJECTIVES
from ..choices import POOLINGS, check_warmup
from ..config import DataOptions, TrainOptions, option, output_option
from ..data.tasks import load_splits
from ..errors import ConfigError
from ..paths import DEFAULT_PRESET
from . import common
from .common import check_checkpoint, check_tasks, training_precision


@dataclasses.dataclass
class DvBERTConfig(TrainOptions, DataOptions):
    """DvBERT: distil cross-encoder teachers into a siamese student."""

    tasks: tuple = option(("LCQMC",), "the task to train on (one, 0/1 labels)", aliases=("--task",))
    teachers: tuple = option((), "a trained cross-encoder (softmax head), e.g. runs/LCQMC_cross_softmax; repeat "
                                 "for several", flag="--teacher", append=True, required=True)
    objective: str = option("sbert", "student loss: the paper's softmax head, CoSENT ranked by the annealed "
                                     "targets, or that CoSENT with each pair weighted by its target gap",
                            choices=OBJECTIVES)
    pooling: str | None = option(None, "the student's sentence vector (default: the pooling of the SentenceEncoder "
                                       "--checkpoint holds, else mean)", choices=POOLINGS)
    epochs: int = option(4, "passes over the training data")
    batch_size: int = option(16, "pairs per step")
    lr: float = option(2e-5, "peak learning rate")
    warmup: float = option(0.1, "share of steps for linear warm-up (then linear decay)")
    output: str | None = output_option("runs/TASK_dvbert")

    def __post_init__(self):
        super().__post_init__()
        self.check_data()
        check_tasks(self.tasks, config=self)
        if len(self.tasks) != 1:
            raise ConfigError(f"--tasks: DvBERT trains on one task, got {','.join(self.tasks)}")
        check_checkpoint(self.checkpoint)
        for teacher in self.teachers:
            check_checkpoint(teacher, "--teacher")
        if not self.teachers:
            raise ConfigError("DvBERT needs at least one trained cross-encoder teacher (--teacher PATH)")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"--objective must be one of {OBJECTIVES}, got {self.objective!r}")
        check_warmup(self.warmup)

    @property
    def task(self):
        return self.tasks[0]


# ---------------------------------------------------------------------------------- the job's steps
# ``run`` calls them in this order, and so does the recipe (tasks/dvbert_distill.py).
STEPS = ("start", "data", "teachers", "model", "trainer", "evaluator", "train", "final_scores", "report")


def start(config):
    """The student's pooling (``--pooling``, or the checkpoint's own), the distribution (``--distribute``), the
    seed, the run folder -> (checkpoint, output)."""
    common.resolve_pooling(config, config.checkpoint or DEFAULT_PRESET, "mean")
    return common.start(config, f"{config.task}_dvbert")


def data(config):
    """{split: PairDataset} of the task; ConfigError unless its train labels are 0/1."""
    splits = load_splits(config.task, config.data_dir, config.limit_train, limit_eval=config.limit_eval,
                         **config.reading(config.task))
    if not np.all(np.isin(splits["train"].labels, (0, 1))):
        raise ConfigError(f"DvBERT here handles binary labels; {config.task} train has other values")
    return splits


def teachers(config, data, output):
    """The teachers' probabilities on every train pair [N, teachers, 2], cached in the run folder."""
    from ..models.cross_encoder import predict_teachers

    return predict_teachers(config.teachers, data["train"], os.path.join(output, "teacher_probs.npz"),
                            config.progress)


def model(config, checkpoint):
    """The student: a SentenceEncoder with ``--pooling`` (the seed is set again first, so the teachers' pass does
    not shift the student's random stream)."""
    import keras

    from ..models.bi_encoder import SentenceEncoder

    keras.utils.set_random_seed(config.seed)
    with training_precision(config):
        return SentenceEncoder.from_preset(checkpoint, pooling=config.pooling, maxlen=config.maxlen)


def trainer(config, student, data, teacher_probs):
    """(batches, compiled trainer): targets annealed from the teachers to the gold labels over the run, and the
    student's loss (``--objective``: the softmax head against the targets, CoSENT ranked by them, or that CoSENT
    weighted by each pair's target gap; ``zoo.train.distillation_trainer``)."""
    from ..train.steps import distillation_trainer

    return distillation_trainer(student, data["train"], teacher_probs, config.objective, batch_size=config.batch_size,
                                maxlen=config.maxlen, epochs=config.epochs, lr=config.lr, warmup=config.warmup,
                                jit_compile=config.jit_compile, optimizer_options=config.optimizer_options(),
                                adversarial_epsilon=config.adversarial_epsilon)


def evaluator(config, data):
    """Valid Spearman keeps the best student."""
    from ..evaluation import SpearmanEvaluator

    return SpearmanEvaluator(data["valid"])


def train(config, trainer, batches, evaluator, student, output):
    """Keras fit, resumable (``zoo.train.fit``), keeping the best student in OUTPUT/model -> the Run."""
    from ..train.loop import fit

    return fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, evaluator=evaluator, model=student,
               save_every=config.save_every, show_progress=config.progress,
               metadata={"job": "dvbert", "objective": config.objective, "teachers": list(config.teachers)})


def final_scores(config, run, data):
    """The best student's valid and test Spearman, and its test accuracy at the threshold fitted on valid."""
    from ..evaluation import evaluate_task
    from ..models.bi_encoder import SentenceEncoder

    return evaluate_task(SentenceEncoder.from_preset(run.model_dir), data, valid_scores=run.best_scores)


def run(config: DvBERTConfig):
    """The job: its steps in order; returns the results dict (also written to OUTPUT/results.json and
    results.md)."""
    t0 = time.time()
    checkpoint, output = start(config)
    splits = data(config)
    probs = teachers(config, splits, output)
    student = model(config, checkpoint)
    source, compiled = trainer(config, student, splits, probs)
    result = train(config, compiled, source, evaluator(config, splits), student, output)
    return report(config, checkpoint, output, result, splits, final_scores(config, result, splits), t0)


def report(config, checkpoint, output, run, data, scores, t0):
    """Write results.json and results.md of a DvBERT run (``scores`` from ``evaluate_task``)."""
    from ..train.results import accuracy_cell, data_files, history_table, run_record, table, write_results

    results = {**run_record(config, run, t0, checkpoint=checkpoint, output=output), "data_files": data_files(data),
               **scores}
    markdown = table(["task", "student", "teachers", "test Spearman", "test accuracy [95% CI]"],
                     [(config.task, f"DvBERT ({config.objective}, {config.pooling})", len(config.teachers),
                       scores["test_spearman"], accuracy_cell(scores))])
    return write_results(output, results,
                         markdown + "\n\n" + history_table(run.history, "valid_spearman", run.best_epoch))
