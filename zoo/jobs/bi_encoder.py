"""Bi-encoder job: a SentenceEncoder trained on the sentence pairs of one task or several (CoSENT, Sentence-BERT
softmax or cosine MSE), kept by valid Spearman; test Spearman and accuracy at the valid-fitted threshold.

Several tasks ("LCQMC,BQ,ATEC,STS-B") train one model on the union of their train splits (``batching`` "task":
each batch from one task; "mixed": all tasks in a batch, graded labels scaled to [0, 1]), kept by the mean of
the valid Spearmans.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..choices import POOLINGS, check_warmup
from ..config import DataOptions, StreamOptions, TrainOptions, option, output_option
from ..data.augment import WORD_ORDER, word_order_pairs
from ..data.corpus import read_corpus
from ..data.tasks import load_splits
from ..errors import ConfigError
from ..paths import DEFAULT_PRESET
from . import common
from .common import check_checkpoint, check_tasks, streamed_files, training_precision

OBJECTIVES = ("cosent", "sbert", "cosine_mse")


@dataclasses.dataclass
class BiEncoderConfig(TrainOptions, DataOptions, StreamOptions):
    """Train a bi-encoder (SentenceEncoder) on sentence pairs."""

    reports_without_test = True  # --valid alone: the test columns stay empty

    tasks: tuple = option(("LCQMC",), "a task (LCQMC, ATEC, BQ, PAWSX, STS-B), or several: one model on their "
                                      "union, kept by the mean valid Spearman", aliases=("--task",))
    objective: str = option("cosent", "training loss", flag="--loss", choices=OBJECTIVES)
    pooling: str | None = option(None, "sentence vector (default: the pooling of the SentenceEncoder --checkpoint "
                                       "holds, else cls)", choices=POOLINGS)
    warmup: float | None = option(None, "linear warm-up over this share of the steps, then linear decay to 0 "
                                        "(default: constant lr)")
    eval_batch_size: int = option(128, "texts per model call when evaluating")
    output: str | None = output_option("runs/TASKS_LOSS_POOLING")
    length_buckets: bool = option(True, "plain random batches (default: batches of similar-length pairs, less "
                                        "padding)")
    batching: str = option("task", "several tasks: each batch from one task, or all mixed with graded labels "
                                   "scaled to [0, 1]", choices=("task", "mixed"))
    eval_tasks: tuple = option((), "more tasks to evaluate the best model on (not trained on), e.g. PAWSX")
    matryoshka_dims: tuple = option((), "Matryoshka training: the loss also on the first D dimensions, e.g. "
                                        "64,128 (cosent / cosine_mse; encode with truncate_dim=D)")
    word_order_negatives: int = option(0, "add N word-order rewrites of each batch's sentences to it as "
                                          "non-paraphrase pairs (label 0; the same words in another order: "
                                          "zoo.data.augment; tasks with 0/1 labels; cosent)")
    in_batch_weight: float = option(0.0, "add W x an in-batch ranking loss to CoSENT: each paraphrase pair's first "
                                         "text ranks its partner above the batch's other second texts, word-order "
                                         "negatives included (multiple negatives ranking; cosent)")
    cached_mini_batch_size: int | None = option(None, "cached in-batch negatives (GradCache, as sentence-"
                                                      "transformers' CachedMultipleNegativesRankingLoss): compute "
                                                      "each --in-batch-weight batch N texts at a time, so a large "
                                                      "batch fits in the memory of N (one more forward pass a step)")
    word_order_valid: bool = option(False, "also select on WORDORDER: LCQMC valid's paraphrase pairs plus each one's "
                                           "first text against its word-order rewrite (label 0)")
    ict_corpus: tuple = option((), "inverse cloze task: also train on (sentence, the passage around it) pairs of "
                                   "these corpus files or folders (documents held out for evaluation excluded), "
                                   "ranked in-batch; needs --in-batch-weight")
    ict_limit: int | None = option(None, "--ict-corpus: documents per epoch (a fixed sample; default all)")
    ict_maxlen: int = option(128, "--ict-corpus: tokens of a query or passage row (passages up to that many "
                                  "characters less 2)")
    query_prefix: str = option("", "--ict-corpus: text put before each query (e.g. 'query: '), saved with the model "
                                   "and put before search queries (SentenceEncoder.encode_queries)")

    def __post_init__(self):
        super().__post_init__()
        self.check_data()
        check_tasks(self.tasks, config=self)
        check_checkpoint(self.checkpoint)
        if self.eval_tasks:
            check_tasks(self.eval_tasks, "--eval-tasks", self)
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"--loss must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.pooling is not None and self.pooling not in POOLINGS:
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
        if self.cached_mini_batch_size is not None:
            if not self.in_batch_weight:
                raise ConfigError("--cached-mini-batch-size caches the in-batch ranking loss: it needs "
                                  "--in-batch-weight W (other losses split into independent parts: "
                                  "--gradient-accumulation-steps)")
            if self.cached_mini_batch_size < 2:
                raise ConfigError(f"--cached-mini-batch-size must be >= 2, got {self.cached_mini_batch_size}")
            if self.adversarial_epsilon is not None or self.distribute != "none" or self.mixed_precision:
                raise ConfigError("--cached-mini-batch-size with --adversarial-epsilon, --distribute or "
                                  "--mixed-precision: not supported (each has its own train step)")
        if self.ict_corpus and not self.in_batch_weight:
            raise ConfigError("--ict-corpus needs --in-batch-weight W: its pairs train through the in-batch ranking")
        if self.query_prefix and not self.ict_corpus:
            raise ConfigError("--query-prefix is for the queries of --ict-corpus")
        if self.ict_maxlen < 8 or (self.ict_limit is not None and self.ict_limit < 1):
            raise ConfigError("--ict-maxlen must be >= 8 and --ict-limit >= 1")

    @property
    def task(self):
        """The tasks as one name, "LCQMC+BQ" (run folders, results tables)."""
        return "+".join(self.tasks)


# ---------------------------------------------------------------------------------- the job's steps
# ``run`` calls them in this order, and so does the recipe (tasks/train_bi_encoder.py, tasks/lcqmc_cosent.py).
STEPS = ("start", "data", "model", "batches", "trainer", "evaluator", "train", "final_scores", "report")


def start(config):
    """The pooling (``--pooling``, or the checkpoint's own), the distribution (``--distribute``), the seed, the run
    folder -> (checkpoint, output)."""
    common.resolve_pooling(config, config.checkpoint or DEFAULT_PRESET, "cls")
    return common.start(config, f"{config.task}_{config.objective}_{config.pooling}")


def data(config):
    """{task: {split: PairDataset}}: each task's train / valid / test pairs, or your files (``--train``,
    ``--valid``, ``--test``, any format, ``--columns``); train is left out when streamed. Triplet train files turn
    the in-batch ranking loss on (``use_triplets``)."""
    splits = {t: load_splits(t, config.data_dir, config.limit_train, config.kept_splits, config.limit_eval,
                             **config.reading(t)) for t in config.tasks}
    use_triplets(config, splits)
    return splits


def model(config, checkpoint):
    """The SentenceEncoder to train: ``--checkpoint``'s backbone (any form) with ``--pooling``; ``--query-prefix``
    is saved with it."""
    from ..models.bi_encoder import SentenceEncoder

    with training_precision(config):
        encoder = SentenceEncoder.from_preset(checkpoint, pooling=config.pooling, maxlen=config.maxlen)
    encoder.query_prefix = config.query_prefix
    if any(d > encoder.dim for d in config.matryoshka_dims):
        raise ConfigError(f"--matryoshka-dims: the model has {encoder.dim} dimensions, got {config.matryoshka_dims}")
    return encoder


def batches(config, encoder, splits):
    """The batch source: the train pairs of ``--tasks`` (one task per batch, or mixed: ``--batching``), each batch
    with ``--word-order-negatives`` rewrites of its sentences (label 0), labels as ``--loss`` wants them
    (``zoo.train.pair_training_batches``); or one task's pairs read lazily (``--stream``); plus inverse cloze
    batches of ``--ict-corpus``."""
    from ..losses import objective_labels
    from ..train.batches import pair_training_batches
    from ..train.streaming import streamed_pairs
    from ..train.text_batches import InverseClozeBatches

    tokenizer = encoder.tokenizer
    if config.streamed:
        return streamed_pairs(tokenizer, config.tasks[0], config.batch_size, config.maxlen,
                              lambda y, graded: objective_labels(config.objective, y, graded),
                              config.data_dir, limit=config.limit_train, length_buckets=config.length_buckets,
                              **config.reading(config.tasks[0]))
    extra = []
    if config.ict_corpus:  # one more part: inverse cloze batches of the corpus
        extra.append(InverseClozeBatches(tokenizer, read_corpus(config.ict_corpus), config.batch_size,
                                         config.ict_maxlen, config.ict_maxlen - 2, config.query_prefix,
                                         limit=config.ict_limit, seed=config.seed))
    return pair_training_batches(tokenizer, {t: splits[t]["train"] for t in config.tasks}, config.batch_size,
                                 config.maxlen, objective=config.objective, batching=config.batching,
                                 length_buckets=config.length_buckets, in_batch=bool(config.in_batch_weight),
                                 word_order_negatives=config.word_order_negatives, seed=config.seed, extra=extra)


def trainer(config, encoder, batches):
    """The compiled training model: the cosine of each pair (at each ``--matryoshka-dims`` too), the SBERT softmax
    head, or the embeddings (``--in-batch-weight``; ``--cached-mini-batch-size``: GradCache's step), with ``--loss``
    and Adam at ``--lr`` (``--warmup``: linear warm-up, then linear decay)."""
    from ..losses import objective_loss
    from ..models.bi_encoder import build_trainer
    from ..train.adversarial import adversarial
    from ..train.cached import cached
    from ..train.optimizers import training_optimizer
    from ..train.schedules import learning_rate

    model = build_trainer(encoder, config.objective, config.matryoshka_dims, in_batch=bool(config.in_batch_weight))
    model = cached(adversarial(model, config.adversarial_epsilon), config.cached_mini_batch_size)
    model.compile(optimizer=training_optimizer("adam", learning_rate(config.lr, config.warmup,
                                                                     config.epochs * len(batches)),
                                               **config.optimizer_options()),
                  loss=objective_loss(config.objective, config.matryoshka_dims, config.in_batch_weight),
                  jit_compile=config.jit_compile)
    return model


def evaluator(config, splits):
    """What keeps the best epoch: valid Spearman of the task, or the mean over the tasks (and WORDORDER,
    ``--word-order-valid``)."""
    from ..evaluation import MeanEvaluator, SpearmanEvaluator

    evaluators = {t: SpearmanEvaluator(splits[t]["valid"], config.eval_batch_size, name=t) for t in config.tasks}
    if config.word_order_valid:
        evaluators[WORD_ORDER] = SpearmanEvaluator(word_order_valid(config), config.eval_batch_size, name=WORD_ORDER)
    chosen = evaluators[config.tasks[0]] if len(evaluators) == 1 else MeanEvaluator(evaluators)
    chosen.name = "valid"
    return chosen


def train(config, trainer, batches, evaluator, encoder, output):
    """Keras fit, resumable (``zoo.train.fit``): the evaluator before training and after each epoch keeps the best
    model in OUTPUT/model -> the Run."""
    from ..train.loop import fit

    return fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, evaluator=evaluator, model=encoder,
               save_every=config.save_every, show_progress=config.progress,
               metadata={"task": config.task, "objective": config.objective})


def final_scores(config, run, splits):
    """{task: scores} of the best model: each trained task's valid and test Spearman and its accuracy at the
    threshold fitted on valid (``zoo.evaluation.evaluate_task``), and ``--eval-tasks`` it was not trained on."""
    from ..evaluation import evaluate_task
    from ..models.bi_encoder import SentenceEncoder

    best = SentenceEncoder.from_preset(run.model_dir)
    single = len(config.tasks) == 1 and not config.word_order_valid
    reuse = run.best_scores if single else (run.best_scores or {})  # the valid scores of the best epoch
    per_task = {t: evaluate_task(best, splits[t], config.eval_batch_size, reuse if single else reuse.get(t))
                for t in config.tasks}
    for t in config.eval_tasks:
        if t not in config.tasks:
            per_task[t] = evaluate_task(best, load_splits(t, config.data_dir, splits=("valid", "test"),
                                                          limit_eval=config.limit_eval, **config.reading(t)),
                                        config.eval_batch_size)
    return per_task


def use_triplets(config, splits):
    """Train splits of (anchor, positive, negative) triplets train the in-batch ranking loss: ``--in-batch-weight``
    becomes 1 when it is not set (logged); ConfigError for a loss other than CoSENT."""
    from ..logs import log

    held = [t for t in config.tasks if "train" in splits[t] and splits[t]["train"].triplets]
    if not held or config.in_batch_weight:
        return
    if config.objective != "cosent" or config.matryoshka_dims:
        raise ConfigError(f"{', '.join(held)} train: triplets train the in-batch ranking loss of --loss cosent "
                          "(without --matryoshka-dims)")
    config.in_batch_weight = 1.0
    log.info("%s train: triplets (anchor, positive, negative), so each anchor ranks its positive above the batch's "
             "other texts, its hard negative included: --in-batch-weight 1.0", ", ".join(held))


def word_order_valid(config):
    """WORDORDER: LCQMC valid's paraphrase pairs (a, b, 1) plus (a, word-order rewrite of a, 0) for each a that
    has one (``zoo.data.augment.word_order_pairs``, seed 0: the same set for every run). Never built from test."""
    valid = load_splits("LCQMC", config.data_dir, splits=("valid",))["valid"]
    return word_order_pairs(valid.head(config.limit_eval) if config.limit_eval else valid)


def run(config: BiEncoderConfig):
    """The job: its steps in order; returns the results dict (also written to OUTPUT/results.json and
    results.md)."""
    t0 = time.time()
    checkpoint, output = start(config)
    splits = data(config)
    encoder = model(config, checkpoint)
    source = batches(config, encoder, splits)
    compiled = trainer(config, encoder, source)
    result = train(config, compiled, source, evaluator(config, splits), encoder, output)
    return report(config, checkpoint, output, result, splits, final_scores(config, result, splits), t0, source)


def report(config, checkpoint, output, run, splits, per_task, t0, batches=None):
    """Write results.json and results.md of a bi-encoder run: settings, data files, the per-epoch curve, and
    each task's valid/test Spearman and accuracy (``per_task``, from ``evaluate_task``)."""
    from ..train.results import accuracy_cell, data_files, history_table, run_record, table, task_table, write_results

    tasks = list(splits)
    files = {}
    for t in tasks:
        files.update({s if len(tasks) == 1 else f"{t}.{s}": f for s, f in data_files(splits[t]).items()})
    if streamed_files(batches):
        files["train"] = streamed_files(batches)
    results = {**run_record(config, run, t0, checkpoint=checkpoint, output=output), "data_files": files}
    if config.in_batch_weight and hasattr(batches, "duplicate_moves"):  # no text twice in an in-batch batch
        results["duplicate_free_batches"] = [batches.duplicate_moves(config.seed, e) for e in range(config.epochs)]
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
                      results["valid_spearman"], results.get("test_spearman"),
                      None if "tasks" in results else accuracy_cell(results))])
    markdown = summary + "\n\n" + history_table(run.history, "valid_spearman", run.best_epoch)
    if "tasks" in results:
        markdown += "\n\n" + task_table(per_task, tasks)
    return write_results(output, results, markdown)
