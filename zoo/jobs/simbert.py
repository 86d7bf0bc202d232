"""SimBERT job: one UniLM-masked BERT learns to generate a similar sentence (seq2seq cross-entropy on the target
tokens) and to retrieve it (in-batch similarity of the [CLS] vectors), jointly, on groups of similar sentences:
JSON lines ``{"text": ..., "synonyms": [...]}``, or by default the connected components of the positive pairs of
the tasks' train splits. Kept by LCQMC valid Spearman of the retrieval head, or by the joint loss on groups of
LCQMC valid positives; reports the retrieval head's test Spearman and ``gen_synonyms`` samples."""

from __future__ import annotations

import collections
import dataclasses
import time

from ..config import DataOptions, TrainOptions, option, output_option
from ..data.tasks import groups_from_positive_pairs, load_splits, positive_pair_groups, training_groups
from ..errors import ConfigError
from ..logs import log
from ..paths import sha256_of
from . import common
from .common import check_checkpoint, check_tasks, training_precision


@dataclasses.dataclass
class SimBERTConfig(TrainOptions, DataOptions):
    """Train SimBERT (UniLM seq2seq + in-batch similarity)."""

    groups: str | None = option(None, 'JSON lines {"text": ..., "synonyms": [...]}, as --train (default: groups of '
                                      "the train positives of --tasks)")
    tasks: tuple = option(("LCQMC", "BQ"), "tasks whose train positives form the default groups")
    batch_size: int = option(64, "groups (pairs) per step; each pair gives two rows")
    maxlen: int = option(32, "tokens per sentence")
    lr: float = option(5e-5, "learning rate (AdamW)")
    weight_decay: float = option(0.01, "AdamW weight decay")
    simplified_vocab: bool = option(True, "keep the checkpoint's whole vocabulary (default: slim it as SimBERT "
                                          "did)", flag="--full-vocab")
    limit_train: int | None = option(None, "train on the first N groups only", aliases=("--limit-groups",))
    select: str = option("retrieval", "keep the epoch with the best LCQMC valid Spearman (retrieval), or the "
                                      "lowest joint loss on LCQMC valid positives (loss)", choices=("retrieval", "loss"))
    eval_tasks: tuple = option(("LCQMC", "BQ", "STS-B"), "tasks whose test split the retrieval head is scored on")
    samples: tuple = option(("微信和支付宝哪个好", "怎么开通花呗", "今天天气怎么样", "我想买一部手机"),
                            "texts to show gen_synonyms samples for")
    output: str | None = output_option("runs/simbert")

    def __post_init__(self):
        super().__post_init__()
        if self.groups and self.train:
            raise ConfigError("--groups and --train: give one (--train takes groups as JSON lines, or pairs)")
        self.check_data()
        check_tasks(self.tasks, "--tasks", self)
        if self.valid:  # a data set of yours: scored on its own test split
            self.eval_tasks = self.tasks
        check_tasks(self.eval_tasks, "--eval-tasks", self)
        check_checkpoint(self.checkpoint)
        if self.select not in ("retrieval", "loss"):
            raise ConfigError(f"--select must be 'retrieval' or 'loss', got {self.select!r}")


# ---------------------------------------------------------------------------------- the job's steps
# ``run`` calls them in this order, and so does the recipe (tasks/simbert_train.py).
STEPS = ("start", "data", "model", "trainer", "batches", "evaluator", "train", "report")


def start(config):
    """The distribution (``--distribute``), the seed, the run folder -> (checkpoint, output)."""
    return common.start(config, "simbert")


def data(config):
    """(groups of similar sentences, {name: file read}, the valid split that keeps an epoch): ``--groups`` /
    ``--train`` (JSON lines of groups, or pairs whose positives are joined), by default the connected components of
    the tasks' train positives; LCQMC valid, or your ``--valid``."""
    own = config.groups or config.train
    reading = config.reading(config.tasks[0])
    if own:
        groups = training_groups(own, **{k: v for k, v in reading.items() if k != "files"})
        files = {"groups" if config.groups else f"{config.tasks[0]}.train": own}
    else:
        groups, files = positive_pair_groups(config.tasks, config.data_dir)
    if config.limit_train and config.limit_train < len(groups):
        log.info("training on the first %d of %d groups (--limit-train)", config.limit_train, len(groups))
        groups = groups[: config.limit_train]
    if not groups:
        raise ConfigError("no groups of similar sentences to train on")
    log.info("%d groups of similar sentences (%d texts; sizes %s)", len(groups), sum(map(len, groups)),
             dict(sorted(collections.Counter(map(len, groups)).items())[:8]))
    selector = config.tasks[0] if config.valid else "LCQMC"
    valid = load_splits(selector, config.data_dir, splits=("valid",), limit_eval=config.limit_eval,
                        **config.reading(selector))["valid"]
    files[f"{selector}.valid"] = valid.path
    return groups, files, valid


def model(config, checkpoint):
    """SimBERT: BERT with its MLM head, a linear pooler, and (by default) SimBERT's slimmed vocabulary."""
    from ..models.simbert import SimBERT

    with training_precision(config):
        return SimBERT.from_preset(checkpoint, maxlen=config.maxlen, simplified=config.simplified_vocab)


def trainer(config, model):
    """The compiled loss model: seq2seq cross-entropy on the target sentence + in-batch similarity of the two [CLS]
    vectors of each pair; AdamW at ``--lr``."""
    from ..losses import passthrough_loss
    from ..train.adversarial import adversarial
    from ..train.optimizers import training_optimizer

    compiled = adversarial(model.loss_model(), config.adversarial_epsilon)
    compiled.compile(optimizer=training_optimizer("adamw", config.lr, weight_decay=config.weight_decay,
                                                  **config.optimizer_options()),
                     loss=passthrough_loss, jit_compile=config.jit_compile)
    return compiled


def batches(config, model, groups):
    """Rows ``[CLS] a [SEP] b [SEP]`` and ``[CLS] b [SEP] a [SEP]`` side by side, a pair of each group per row."""
    from ..train.text_batches import SimBERTBatches

    return SimBERTBatches(model.tokenizer, groups, config.batch_size, config.maxlen)


def evaluator(config, model, trainer, valid):
    """What keeps the best epoch: valid Spearman of the retrieval head, or (``--select loss``) the joint loss on
    groups of valid positives."""
    from ..evaluation import LossEvaluator, SpearmanEvaluator
    from ..train.text_batches import SimBERTBatches

    if config.select == "retrieval":
        return SpearmanEvaluator(valid)
    return LossEvaluator(trainer, SimBERTBatches(model.tokenizer, groups_from_positive_pairs(valid),
                                                 config.batch_size, config.maxlen))


def train(config, trainer, batches, evaluator, model, output):
    """Keras fit, resumable (``zoo.train.fit``), keeping the best model in OUTPUT/model -> the Run."""
    from ..train.loop import fit

    return fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, evaluator=evaluator, model=model,
               save_every=config.save_every, show_progress=config.progress, metadata={"job": "simbert"})


def run(config: SimBERTConfig):
    """The job: its steps in order; returns the results dict (also written to OUTPUT/results.json and
    results.md)."""
    t0 = time.time()
    checkpoint, output = start(config)
    groups, files, valid = data(config)
    simbert = model(config, checkpoint)
    compiled = trainer(config, simbert)
    source = batches(config, simbert, groups)
    result = train(config, compiled, source, evaluator(config, simbert, compiled, valid), simbert, output)
    return report(config, checkpoint, output, result, groups, files, t0)


def report(config, checkpoint, output, run, groups, files, t0):
    """Score the best model's retrieval head on the test splits of ``eval_tasks``, sample ``gen_synonyms``, and
    write results.json and results.md (``--limit-eval``: the first N pairs of each test split)."""
    from ..evaluation import SpearmanEvaluator
    from ..models.simbert import SimBERT
    from ..train.results import history_table, run_record, table, write_results

    best = SimBERT.from_preset(run.model_dir)
    zero_shot = {}
    for task in config.eval_tasks:
        try:
            test = load_splits(task, config.data_dir, splits=("test",), limit_eval=config.limit_eval,
                               **config.reading(task))["test"]
        except FileNotFoundError:
            continue
        files[f"{task}.test"] = test.path
        zero_shot[task] = SpearmanEvaluator(test)(best)["spearman"]
    samples = {text: best.gen_synonyms(text, n=100, k=5, seed=config.seed) for text in config.samples}
    sizes = collections.Counter(map(len, groups))
    results = {**run_record(config, run, t0, checkpoint=checkpoint, output=output),
               "data_files": {k: {"path": v, "sha256": sha256_of(v)} for k, v in files.items()},
               "groups": len(groups), "group_sizes": dict(sorted(sizes.items())), "test_spearman_zero_shot": zero_shot,
               "gen_synonyms": samples}
    markdown = table(["task", "zero-shot test Spearman (retrieval head)"], list(zero_shot.items()))
    markdown += "\n\n" + table(["input", "top gen_synonyms (cosine)"],
                                [(text, "; ".join(f"{t} ({s:.2f})" for t, s in out)) for text, out in samples.items()])
    return write_results(output, results, markdown + "\n\n" + history_table(run.history, run.metric,
                                                                              run.best_epoch))
