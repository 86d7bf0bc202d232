"""Results of a job: ``results.json`` (the command, package versions, data files with sha256, settings, numbers)
and ``results.md`` (the same as readable tables), written atomically."""

from __future__ import annotations

import dataclasses
import os
import sys
import time

from .. import distribute
from ..logs import log, rerun_command
from ..paths import RESULTS_JSON, RESULTS_MD, sha256_of, write_json_atomic, write_text_atomic


def versions():
    """Versions of the packages that decide a result."""
    import importlib.metadata as md

    import keras

    out = {"python": sys.version.split()[0], "keras_backend": keras.backend.backend()}
    for name in ("zoo", "keras", "keras-hub", "tensorflow", "jax", "numpy", "tokenizers", "scipy", "torch",
                 "onnxruntime", "openvino"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def machine():
    """The hardware a run's seconds were measured on: CPU model, the cores this process may use, its vector kind."""
    from ..hardware import cpu_kind, cpu_model, usable_cpus

    return {"cpu": cpu_model() or None, "cores": usable_cpus(), "cpu_kind": cpu_kind()}


def data_files(datasets):
    """{name: path, format, sha256, pairs (and the file's total when cut), triplets, label kind, duplicates, bad
    lines} of PairDatasets, for results.json: what each split was read from."""
    return {name: {"path": os.path.abspath(d.path), "format": d.format, "sha256": sha256_of(d.path), "pairs": len(d),
                   **({"pairs_in_file": d.total} if d.total is not None else {}),
                   **({"triplets": d.triplets} if d.triplets else {}), "labels": d.label_kind,
                   "duplicates": d.duplicates, "bad_lines": d.bad_lines} for name, d in datasets.items()}


def run_record(config, run, t0, **settings):
    """What every training job's results.json starts with: the settings (the config's fields, plus resolved ones
    such as the checkpoint), the per-epoch history, the best epoch and the seconds (training; in all since ``t0``)."""
    return {"config": {**dataclasses.asdict(config), **settings},
            "distribution": distribute.current().record(config.batch_size), "epochs": run.history,
            "best_epoch": run.best_epoch, "train_seconds": run.train_seconds, "seconds": time.time() - t0}


def table(header, rows):
    """A markdown table; numbers are written with 2 decimals, None as an empty cell."""
    def cell(v):
        return "" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def accuracy_cell(metrics):
    """'83.51 [82.8, 84.1]' from test_accuracy and its interval (x100), or None."""
    if "test_accuracy" not in metrics:
        return None
    low, high = metrics["test_accuracy_ci95"]
    return f"{metrics['test_accuracy']:.2f} [{low:.1f}, {high:.1f}]"


def task_table(per_task, trained=()):
    """One row per task: valid and test Spearman, test accuracy [95% CI] (``per_task``: ``evaluate_task``'s dicts;
    tasks not in ``trained`` are marked as such)."""
    rows = [(t if not trained or t in trained else f"{t} (not trained on)", r.get("valid_spearman"),
             r.get("test_spearman"), accuracy_cell(r)) for t, r in per_task.items()]
    return table(["task", "valid Spearman", "test Spearman", "test accuracy [95% CI]"], rows)


def history_table(history, metric, best_epoch=None):
    """Per epoch: the selection metric and the mean training loss; with ``best_epoch``, a line naming the epoch whose
    model was kept and the valid score that chose it (epoch 0: the starting model was never beaten)."""
    text = table(["epoch", metric.replace("_", " "), "train loss (epoch mean)"],
                 [(h["epoch"], h.get(metric), h.get("train_loss")) for h in history])
    if best_epoch is None:
        return text
    best = next((h for h in history if h["epoch"] == best_epoch), {})
    kept = f"the model kept in OUTPUT/model: epoch {best_epoch}"
    if best.get(metric) is not None:
        kept += f", chosen by {metric.replace('_', ' ')} {best[metric]:.2f}"
    if best_epoch == 0:
        kept += " (no epoch of training beat the starting model)"
    return text + "\n\n" + kept


def write_results(output, results, markdown):
    """Write ``output/results.json`` (the command line and package versions first) and ``output/results.md``,
    log the markdown, and return the full results dict. Under distribution only process 0 writes."""
    results = {"command": rerun_command(), "versions": versions(),
               "machine": machine(), **results}
    markdown = markdown.rstrip() + f"\n\ncommand: `{results['command']}`"
    if "seconds" in results:
        markdown += f"  ({results['seconds']:.0f} s)"
    if distribute.current().is_writer:
        write_json_atomic(os.path.join(output, RESULTS_JSON), results)
        write_text_atomic(os.path.join(output, RESULTS_MD), markdown + "\n")
    log.info("results in %s\n%s", output, markdown)
    return results
