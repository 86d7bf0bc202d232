"""Evaluate any saved model on any task: Spearman of its scores against the gold labels, and for 0/1 tasks the
accuracy on test at the threshold fitted on valid (with a bootstrap interval). ``zoo evaluate``."""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from ..config import option
from ..data import TASKS, load_splits
from ..errors import ConfigError
from ..evaluation import pearson, percent, spearman, threshold_accuracy
from ..models import from_preset
from ..train.results import accuracy_cell, data_files, table, write_results


def pair_scores(model, dataset, batch_size=128):
    """Similarity scores of a model on a PairDataset: cosine for an encoder (SentenceEncoder, SimBERT), the
    cross-encoder's score otherwise."""
    if hasattr(model, "similarity_pairwise"):
        return model.similarity_pairwise(dataset.texts_a, dataset.texts_b, batch_size=batch_size)
    return model.predict(list(zip(dataset.texts_a, dataset.texts_b)), batch_size=batch_size)


def evaluate_task(model, data, batch_size=128, valid_scores=None):
    """{valid,test}_spearman, test_pearson (x100) of ``model`` on {"valid": PairDataset, "test": ...}; for 0/1
    labels also threshold, valid_accuracy, test_accuracy and test_accuracy_ci95 (x100). ``valid_scores``: the
    model's valid scores when already computed (the training engine keeps those of the best epoch)."""
    scores = {"valid": pair_scores(model, data["valid"], batch_size) if valid_scores is None else valid_scores,
              "test": pair_scores(model, data["test"], batch_size)}
    out = {"valid_spearman": 100 * spearman(scores["valid"], data["valid"].labels),
           "test_spearman": 100 * spearman(scores["test"], data["test"].labels),
           "test_pearson": 100 * pearson(scores["test"], data["test"].labels)}
    if all(np.isin(data[s].labels, (0, 1)).all() for s in ("valid", "test")):
        out.update(percent(threshold_accuracy(scores["valid"], data["valid"].labels, scores["test"],
                                              data["test"].labels)))
    return out


def task_table(per_task, trained=()):
    """One row per task: valid and test Spearman, test accuracy [95% CI]."""
    rows = [(t if not trained or t in trained else f"{t} (not trained on)", r["valid_spearman"],
             r["test_spearman"], accuracy_cell(r)) for t, r in per_task.items()]
    return table(["task", "valid Spearman", "test Spearman", "test accuracy [95% CI]"], rows)


@dataclasses.dataclass
class EvaluateConfig:
    """Evaluate a saved model on the valid and test splits of one or more tasks."""

    model: str = option(None, "a run folder, zoo preset (folder or name), .keras file or checkpoint folder",
                        required=True)
    tasks: tuple = option(("LCQMC",), f"tasks to evaluate on: {', '.join(TASKS)}")
    data_dir: str | None = option(None, "folder with {TASK}/senteval_cn/{TASK}.{split}.data (default: the "
                                        "embedded data/, then ../shared/data)")
    pooling: str | None = option(None, "pooling when MODEL is a checkpoint, not a saved model (default: cls)",
                                 choices=("cls", "mean", "first-last-avg", "pooler"))
    maxlen: int | None = option(None, "tokens per text (default: the model's)")
    batch_size: int = option(128, "texts per model call")
    output: str | None = option(None, "folder for results.json and results.md (default: none written)")

    def __post_init__(self):
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown or not self.tasks:
            raise ConfigError(f"--tasks: unknown task(s) {unknown}; known: {', '.join(TASKS)}")


def run(config: EvaluateConfig):
    t0 = time.time()
    model = from_preset(config.model, pooling=config.pooling, maxlen=config.maxlen)
    per_task, files = {}, {}
    for task in config.tasks:
        data = load_splits(task, config.data_dir, splits=("valid", "test"))
        per_task[task] = evaluate_task(model, data, config.batch_size)
        files.update({f"{task}.{s}": f for s, f in data_files(data).items()})
    results = {"config": dataclasses.asdict(config), "model_class": type(model).__name__, "data_files": files,
               "tasks": per_task, "seconds": time.time() - t0}
    if config.output:
        os.makedirs(config.output, exist_ok=True)
        results = write_results(config.output, results, markdown(results))
    return results


def markdown(results):
    return f"{results['model_class']} from {results['config']['model']}\n\n" + task_table(results["tasks"])
