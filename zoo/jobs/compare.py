"""Compare job, representation vs interaction (CoSENT 二): train or load a CoSENT bi-encoder, a Sentence-BERT bi-encoder and a
cross-encoder per task on one backbone, fit each threshold on valid, report test accuracy (bootstrap 95% interval)
and Spearman, and draw score histograms and accuracy-vs-threshold curves."""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from .._plots import score_plot_record
from ..config import DataOptions, option
from ..data.tasks import load_splits
from ..evaluation import accuracy, best_threshold, percent, spearman, threshold_accuracy
from ..logs import log
from . import bi_encoder, cross_encoder
from .common import check_checkpoint, check_tasks

MODELS = ("cosent", "sbert", "interact")
TRANSFER_FROM = {"PAWSX": "LCQMC"}  # no train split here: evaluate models trained on LCQMC


@dataclasses.dataclass
class CompareConfig(DataOptions):
    """Representation vs interaction: CoSENT, Sentence-BERT and a cross-encoder per task, accuracy at the
    valid-fitted threshold."""

    tasks: tuple = option(("LCQMC", "BQ", "ATEC", "PAWSX"), "tasks (PAWSX: the LCQMC models, transfer)")
    checkpoint: str | None = option(None, "the backbone every model starts from (default: the embedded preset)")
    output: str = option("runs/compare", "run folder; each model trains (or reloads) in OUTPUT/TASK/MODEL")
    epochs: int = option(1, "epochs per model")
    bi_lr: float = option(1e-4, "learning rate of the bi-encoders")
    cross_lr: float = option(5e-5, "learning rate of the cross-encoder")
    limit_train: int | None = option(None, "train on the first N pairs only (per task)")
    limit_eval: int | None = option(None, "score the first N pairs of each valid and test split only (quick trials)")
    seed: int = option(42, "random seed")
    progress: bool = option(True, "no progress bars")
    jit_compile: bool = option(True, "train without XLA compilation")

    def __post_init__(self):
        self.check_data()
        check_tasks(self.tasks, "--tasks", self)
        check_checkpoint(self.checkpoint)


def _train(task, model, config):
    """Train (or, when its run folder is complete, reload) one model; returns a callable pairs -> scores."""
    from ..models.bi_encoder import SentenceEncoder
    from ..models.cross_encoder import CrossEncoder

    folder = os.path.join(config.output, task, model)
    data = {f.name: getattr(config, f.name) for f in dataclasses.fields(DataOptions)} if task == config.tasks[0] \
        else {"data_dir": config.data_dir}
    common = dict(tasks=(task,), checkpoint=config.checkpoint, **data, epochs=config.epochs,
                  limit_train=config.limit_train, limit_eval=config.limit_eval, output=folder, seed=config.seed,
                  progress=config.progress, jit_compile=config.jit_compile)
    if model == "interact":
        cross_encoder.run(cross_encoder.CrossEncoderConfig(lr=config.cross_lr, **common))
        ce = CrossEncoder.from_preset(folder)
        return lambda a, b: ce.score(list(zip(a, b)), batch_size=128)
    bi_encoder.run(bi_encoder.BiEncoderConfig(objective=model, lr=config.bi_lr, **common))
    enc = SentenceEncoder.from_preset(folder)
    return lambda a, b: enc.similarity_pairwise(a, b, batch_size=128)


def run(config: CompareConfig):
    """The job; returns the results dict (also written to OUTPUT/results.json and results.md)."""
    from ..train.results import data_files, write_results

    t0 = time.time()
    os.makedirs(config.output, exist_ok=True)
    rows, files, scorers, baselines = [], {}, {}, {}
    for task in config.tasks:
        source = TRANSFER_FROM.get(task, task)
        data = load_splits(task, config.data_dir, splits=("valid", "test"), limit_eval=config.limit_eval,
                           **config.reading(task))
        valid, test = data["valid"], data["test"]
        files[task] = data_files(data)
        majority = int(np.mean(valid.labels) >= 0.5)  # the trivial predictor: valid's majority class
        baselines[task] = {"majority_class": majority, "test_accuracy": 100 * float(np.mean(test.labels == majority))}
        for model in MODELS:
            key = (source, model)
            if key not in scorers:
                scorers[key] = _train(source, model, config)
            v = scorers[key](valid.texts_a, valid.texts_b)
            s = scorers[key](test.texts_a, test.texts_b)
            powell_t, _ = best_threshold(v, valid.labels, "powell")
            row = {"task": task, "model": model, "trained_on": source,
                   **percent(threshold_accuracy(v, valid.labels, s, test.labels)),
                   "test_accuracy_powell_threshold": 100 * accuracy(s, test.labels, powell_t),
                   "test_spearman": 100 * spearman(s, test.labels)}
            row["plot"] = score_plot_record(v, valid.labels, s, test.labels, row["threshold"])
            rows.append(row)
            log.info("%s %s: test acc %.2f [%.2f, %.2f]", task, model, row["test_accuracy"],
                     *row["test_accuracy_ci95"])
        plot_task(task, {r["model"]: r["plot"] for r in rows if r["task"] == task}, config.output)
    results = {"config": dataclasses.asdict(config), "data_files": files, "rows": rows, "baselines": baselines,
               "seconds": time.time() - t0}
    return write_results(config.output, results, comparison_table(rows, config.tasks, baselines))


def comparison_table(rows, tasks, baselines):
    """Test accuracy (95% CI) per model and task after the majority-class baseline, then Spearman, in the shape
    of the CoSENT comparison (docs/methods.md)."""
    names = {"cosent": "CoSENT", "sbert": "Sentence-BERT", "interact": "Interact (cross-encoder)"}
    head = "| model | " + " | ".join(f"{t}{' (transfer from LCQMC)' if t in TRANSFER_FROM else ''}" for t in tasks)
    lines = [head + " | avg |", "|---" * (len(tasks) + 2) + "|"]
    trivial = [baselines[t]["test_accuracy"] for t in tasks]
    lines.append("| Baseline: valid's majority class predicted for every test pair, accuracy | "
                 + " | ".join(f"{v:.2f}" for v in trivial) + f" | {np.mean(trivial):.2f} |")
    for metric in ("test_accuracy", "test_spearman"):
        for model in MODELS:
            cells, values = [], []
            for task in tasks:
                r = next(r for r in rows if r["task"] == task and r["model"] == model)
                values.append(r[metric])
                ci = r["test_accuracy_ci95"]
                cells.append(f"{r[metric]:.2f} [{ci[0]:.1f}, {ci[1]:.1f}]" if metric == "test_accuracy"
                             else f"{r[metric]:.2f}")
            label = names[model] + (" accuracy" if metric == "test_accuracy" else " Spearman")
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {np.mean(values):.2f} |")
    return "\n".join(lines) + ("\n\nAccuracy: threshold fitted on valid (exact sweep), applied to test; [95% bootstrap]. "
                               "The baseline predicts, for every test pair, the label most frequent in valid: it "
                               "falls below 50 where test's majority label differs from valid's.\n")


def plot_task(task, plots, output):
    """{task}_scores.png (test score histograms by label, threshold marked) and {task}_threshold.png (accuracy
    vs threshold on valid and test), drawn from the rows' ``plot`` records ({model: record})."""
    from .._plots import draw_scores, draw_thresholds
    from ..logs import pyplot

    plt = pyplot()
    if plt is None:
        return
    draw_scores(plt, task, plots, os.path.join(output, f"{task}_scores.png"))
    draw_thresholds(plt, task, plots, os.path.join(output, f"{task}_threshold.png"))
