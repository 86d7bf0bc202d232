"""Bi-encoder job: a SentenceEncoder trained on the sentence pairs of one task or several (CoSENT, Sentence-BERT
softmax or cosine MSE), kept by valid Spearman; test Spearman and accuracy at the valid-fitted threshold.

Several tasks ("LCQMC,BQ,ATEC,STS-B") train one model on the union of their train splits (``batching`` "task":
each batch from one task; "mixed": all tasks in a batch, graded labels scaled to [0, 1]), kept by the mean of
the valid Spearmans.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import keras
import numpy as np

from ..augment import word_order_pairs, word_order_rewrite
from ..backbone import backbone_inputs
from ..config import option
from ..data import PairDataset, load_splits
from ..errors import ConfigError
from ..evaluation import MeanEvaluator, SpearmanEvaluator, evaluate_task
from ..losses import CoSENTInBatchLoss, CoSENTLoss, CosineMSELoss, MatryoshkaLoss
from ..models.bi_encoder import SentenceEncoder, build_pair_trainer
from ..train import MultiTaskBatches, PairBatches, check_warmup, fit, learning_rate
from ..train.batches import HardNegativeBatches
from ..train.results import accuracy_cell, data_files, history_table, run_record, table, task_table, write_results
from .common import (POOLINGS, StreamOptions, TrainOptions, check_tasks, limit_eval, start, streamed_files,
                     streamed_pairs)

OBJECTIVES = ("cosent", "sbert", "cosine_mse")
WORD_ORDER = "WORDORDER"  # the word-order valid set's name (``word_order_valid``)


@dataclasses.dataclass
class BiEncoderConfig(TrainOptions, StreamOptions):
    """Train a bi-encoder (SentenceEncoder) on sentence pairs."""

    task: str = option("LCQMC", "a task (LCQMC, ATEC, BQ, PAWSX, STS-B), or several comma-separated: one model on "
                                "their union, kept by the mean valid Spearman")
    objective: str = option("cosent", "training loss", flag="--loss", choices=OBJECTIVES)
    pooling: str = option("cls", "sentence vector", choices=POOLINGS)
    warmup: float | None = option(None, "linear warm-up over this share of the steps, then linear decay to 0 "
                                        "(default: constant lr)")
    eval_batch_size: int = option(128, "texts per model call when evaluating")
    length_buckets: bool = option(True, "plain random batches (default: batches of similar-length pairs, less "
                                        "padding)")
    batching: str = option("task", "several tasks: each batch from one task, or all mixed with graded labels "
                                   "scaled to [0, 1]", choices=("task", "mixed"))
    eval_tasks: tuple = option((), "more tasks to evaluate the best model on (not trained on), e.g. PAWSX")
    matryoshka_dims: tuple = option((), "Matryoshka training: the loss also on the first D dimensions, e.g. "
                                        "64,128 (cosent / cosine_mse; encode with truncate_dim=D)")
    word_order_negatives: int = option(0, "add N word-order rewrites of each batch's sentences to it as "
                                          "non-paraphrase pairs (label 0; the same words in another order: "
                                          "zoo.augment; tasks with 0/1 labels; cosent)")
    in_batch_weight: float = option(0.0, "add W x an in-batch ranking loss to CoSENT: each paraphrase pair's first "
                                         "text ranks its partner above the batch's other second texts, word-order "
                                         "negatives included (multiple negatives ranking; cosent)")
    word_order_valid: bool = option(False, "also select on WORDORDER: LCQMC valid's paraphrase pairs plus each one's "
                                           "first text against its word-order rewrite (label 0)")

    def __post_init__(self):
        super().__post_init__()
        check_tasks(self.tasks)
        if self.eval_tasks:
            check_tasks(self.eval_tasks, "--eval-tasks")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"--loss must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.pooling not in POOLINGS:
            raise ConfigError(f"--pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.batching not in ("task", "mixed"):
            raise ConfigError(f"--batching must be 'task' or 'mixed', got {self.batching!r}")
        check_warmup(self.warmup)
        try:
            self.matryoshka_dims = tuple(int(d) for d in self.matryoshka_dims)
        except ValueError:
            raise ConfigError(f"--matryoshka-dims must be integers, got {','.join(self.matryoshka_dims)}") from None
        if self.matryoshka_dims and (self.objective == "sbert" or min(self.matryoshka_dims) < 1):
            raise ConfigError("--matryoshka-dims needs --loss cosent or cosine_mse and dimensions >= 1")
        if self.streamed and len(self.tasks) > 1:
            raise ConfigError("--stream / --train-files train one task (its valid split selects the model)")
        if self.word_order_negatives < 0 or self.in_batch_weight < 0:
            raise ConfigError("--word-order-negatives and --in-batch-weight must be >= 0")
        if (self.word_order_negatives or self.in_batch_weight) and (
                self.objective != "cosent" or self.matryoshka_dims or self.streamed):
            raise ConfigError("--word-order-negatives / --in-batch-weight need --loss cosent, without "
                              "--matryoshka-dims, --stream or --train-files")

    @property
    def tasks(self):
        return [t.strip() for t in self.task.split(",") if t.strip()]


def objective_labels(objective, labels, graded=None):
    """Labels as each objective wants them: CoSENT raw (0/1 or 0-5), SBERT classes (STS-B: > 2.5), MSE in [0, 1].
    ``graded`` (0-5 labels) defaults to ``labels.max() > 1``."""
    graded = labels.max() > 1 if graded is None else graded
    if objective == "cosent":
        return labels.astype("float32")
    if objective == "sbert":
        return (labels > 2.5).astype("int32") if graded else labels.astype("int32")
    return (labels / (5.0 if graded else 1.0)).astype("float32")


def objective_loss(objective, matryoshka_dims=(), in_batch_weight=0.0):
    """The objective's Keras loss; with ``matryoshka_dims``, summed over the nested dimensions; with
    ``in_batch_weight``, CoSENT plus that much in-batch ranking (on embeddings: ``build_trainer``)."""
    if in_batch_weight:
        return CoSENTInBatchLoss(in_batch_weight)
    loss = {"cosent": CoSENTLoss(), "cosine_mse": CosineMSELoss(),
            "sbert": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}[objective]
    return MatryoshkaLoss(loss) if matryoshka_dims else loss


def build_trainer(config, encoder):
    """The model that trains ``encoder``: pair cosines (or the SBERT head) for the objective's loss, or, with
    ``--in-batch-weight``, the [2B, d] embeddings of the interleaved pairs."""
    if config.in_batch_weight:
        inputs = backbone_inputs()
        return keras.Model(inputs, encoder(inputs), name="cosent_in_batch_trainer")
    return build_pair_trainer(encoder, config.objective, matryoshka_dims=config.matryoshka_dims)


def anchor_labels(labels):
    """[N, 2]: each pair's label and its anchor flag for the in-batch loss (1: a paraphrase, label 1 of 0/1, or
    4 and up of STS-B's 0-5)."""
    top = 5.0 if labels.max() > 1 else 1.0
    return np.stack([labels, labels >= 0.8 * top], axis=1).astype("float32")


def train_batches(config, tokenizer, splits):
    """The batch source: one task's pairs (in memory, or streamed from files), or several tasks' (per-task
    batches, or mixed); with ``--word-order-negatives``, each 0/1 task's batches get word-order rewrites of their
    sentences as pairs labelled 0; with ``--in-batch-weight``, labels carry the anchor flag (``anchor_labels``)."""
    tasks = config.tasks
    if config.streamed:
        return streamed_pairs(config, tokenizer, tasks[0], lambda y, graded: objective_labels(config.objective, y,
                                                                                                graded))
    labels = {t: objective_labels(config.objective, splits[t]["train"].labels) for t in tasks}

    def pairs(dataset, y):
        batches = PairBatches(tokenizer, dataset, config.batch_size, config.maxlen,
                              anchor_labels(y) if config.in_batch_weight else y, config.length_buckets)
        if config.word_order_negatives and y.max() <= 1:
            rewrite = functools.partial(word_order_rewrite, seed=config.seed)
            batches = HardNegativeBatches(batches, dataset, rewrite, config.word_order_negatives)
        return batches

    if len(tasks) == 1:
        return pairs(splits[tasks[0]]["train"], labels[tasks[0]])
    if config.batching == "task":
        return MultiTaskBatches([pairs(splits[t]["train"], labels[t]) for t in tasks])
    scaled = [labels[t] / (5.0 if labels[t].max() > 1 else 1.0) for t in tasks]
    union = PairDataset(sum((splits[t]["train"].texts_a for t in tasks), []),
                        sum((splits[t]["train"].texts_b for t in tasks), []), np.concatenate(scaled).astype("float32"))
    return pairs(union, union.labels)


def word_order_valid(config):
    """WORDORDER: LCQMC valid's paraphrase pairs (a, b, 1) plus (a, word-order rewrite of a, 0) for each a that
    has one (``zoo.augment.word_order_pairs``, seed 0: the same set for every run). Never built from test."""
    valid = load_splits("LCQMC", config.data_dir, splits=("valid",))["valid"]
    return word_order_pairs(valid.head(config.limit_eval) if config.limit_eval else valid)


def run(config: BiEncoderConfig):
    """The job; returns the results dict (also written to OUTPUT/results.json and results.md)."""
    t0 = time.time()
    tasks = config.tasks
    checkpoint, output = start(config, f"{'+'.join(tasks)}_{config.objective}_{config.pooling}")
    splits = {t: limit_eval(load_splits(t, config.data_dir, config.limit_train, config.kept_splits),
                            config.limit_eval) for t in tasks}

    encoder = SentenceEncoder.from_preset(checkpoint, pooling=config.pooling, maxlen=config.maxlen)
    batches = train_batches(config, encoder.tokenizer, splits)
    if any(d > encoder.dim for d in config.matryoshka_dims):
        raise ConfigError(f"--matryoshka-dims: the model has {encoder.dim} dimensions, got {config.matryoshka_dims}")
    trainer = build_trainer(config, encoder)
    trainer.compile(optimizer=keras.optimizers.Adam(learning_rate(config.lr, config.warmup,
                                                                  config.epochs * len(batches))),
                    loss=objective_loss(config.objective, config.matryoshka_dims, config.in_batch_weight),
                    jit_compile=config.jit_compile)
    evaluators = {t: SpearmanEvaluator(splits[t]["valid"], config.eval_batch_size, name=t) for t in tasks}
    if config.word_order_valid:
        evaluators[WORD_ORDER] = SpearmanEvaluator(word_order_valid(config), config.eval_batch_size, name=WORD_ORDER)
    evaluator = evaluators[tasks[0]] if len(evaluators) == 1 else MeanEvaluator(evaluators)
    evaluator.name = "valid"
    run = fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, evaluator=evaluator, model=encoder,
              save_every=config.save_every, show_progress=config.progress,
              metadata={"task": config.task, "objective": config.objective})

    best = SentenceEncoder.from_preset(run.model_dir)
    reuse = run.best_scores if len(evaluators) == 1 else (run.best_scores or {})  # valid scores of the best epoch
    per_task = {t: evaluate_task(best, splits[t], config.eval_batch_size,
                                 reuse if len(evaluators) == 1 else reuse.get(t)) for t in tasks}
    for t in config.eval_tasks:
        if t not in tasks:
            per_task[t] = evaluate_task(best, limit_eval(load_splits(t, config.data_dir, splits=("valid", "test")),
                                                         config.limit_eval), config.eval_batch_size)
    return report(config, checkpoint, output, run, splits, per_task, t0, batches)


def report(config, checkpoint, output, run, splits, per_task, t0, batches=None):
    """Write results.json and results.md of a bi-encoder run: settings, data files, the per-epoch curve, and
    each task's valid/test Spearman and accuracy (``per_task``, from ``evaluate_task``)."""
    tasks = list(splits)
    files = {}
    for t in tasks:
        files.update({s if len(tasks) == 1 else f"{t}.{s}": f for s, f in data_files(splits[t]).items()})
    if streamed_files(batches):
        files["train"] = streamed_files(batches)
    results = {**run_record(config, run, t0, checkpoint=checkpoint, output=output), "data_files": files}
    if config.word_order_valid and run.best:
        results["word_order_valid_spearman"] = run.best[f"valid_{WORD_ORDER}_spearman"]
    if len(per_task) == 1:
        results.update(per_task[tasks[0]])
    else:
        results.update(tasks=per_task, valid_spearman=run.best["valid_spearman"],
                       test_spearman=float(np.mean([per_task[t]["test_spearman"] for t in tasks])))
    summary = table(["task", "objective", "pooling", "checkpoint", "epochs", "best epoch", "valid Spearman",
                     "test Spearman", "test accuracy [95% CI]"],
                    [(config.task, config.objective, config.pooling, checkpoint, config.epochs, run.best_epoch,
                      results["valid_spearman"], results["test_spearman"],
                      None if "tasks" in results else accuracy_cell(results))])
    markdown = summary + "\n\n" + history_table(run.history, "valid_spearman")
    if "tasks" in results:
        markdown += "\n\n" + task_table(per_task, tasks)
    return write_results(output, results, markdown)
