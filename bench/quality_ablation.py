"""What each ingredient of the general model's recipe adds, on valid: word-order negatives and in-batch ranking.

    bash bench/quality_ablation.sh RUNS               # the four runs (each resumes where it stopped; hours on 2 cores)
    python bench/quality_ablation.py RUNS/abl_base RUNS/abl_wo RUNS/abl_ib RUNS/abl_both

Reads each run's ``results.json`` and writes ``bench/results/quality_ablation.json`` with a table: valid Spearman
per task at the kept epoch, WORDORDER (LCQMC valid's paraphrase pairs against word-order rewrites of their first
text, ``zoo.data.augment.word_order_pairs``), the selection metric (their mean), PAWS-X valid (transfer: never trained
or selected on) and the training time. Test-split scores are listed too, for the record: nothing is chosen on them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

TASKS = ("ATEC", "BQ", "LCQMC", "STS-B")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "quality_ablation.json")


def typed(command):
    """A recorded command as a user types it: ``zoo`` for the entry point."""
    return re.sub(r"^\S*(__main__\.py|zoo)\s", "zoo ", command)


def portable(command, name):
    """The run's command as a user types it: ``zoo`` for the entry point, ``runs/NAME`` for its folder."""
    return re.sub(r"--output \S+", f"--output runs/{name}", typed(command))


def ingredients(config):
    parts = []
    if config.get("word_order_negatives"):
        parts.append(f"word-order negatives ({config['word_order_negatives']} per batch)")
    if config.get("in_batch_weight"):
        parts.append(f"in-batch ranking (weight {config['in_batch_weight']:g})")
    return " + ".join(parts) or "CoSENT only (today's recipe)"


def cpu_seconds(folder):
    """User + system CPU seconds from ``/usr/bin/time -v`` in FOLDER.log (as bench/quality_ablation.sh writes it),
    or None: no log, or the timed process resumed an interrupted run (it did only part of the work)."""
    try:
        with open(os.path.normpath(folder) + ".log", encoding="utf-8", errors="replace") as f:
            log = f.read()
    except FileNotFoundError:
        return None
    last = log[log.rfind("[zoo] run folder"):]
    if "holds a finished run" in last or "resuming" in last:
        return None
    times = re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", last)
    return sum(map(float, times)) if len(times) == 2 else None


def row(folder):
    name = os.path.basename(os.path.normpath(folder))
    path = os.path.join(folder, "results.json")
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
    except FileNotFoundError:
        sys.exit(f"quality_ablation: {path}: no results.json (the run has not finished; rerun its command)")
    best = run["epochs"][run["best_epoch"]]
    return {"run": name, "ingredients": ingredients(run["config"]), "command": portable(run["command"], name),
            "best_epoch": run["best_epoch"],
            "valid": {t: best[f"valid_{t}_spearman"] for t in TASKS},
            "valid_WORDORDER": best["valid_WORDORDER_spearman"], "selection": best["valid_spearman"],
            "valid_PAWSX": run["tasks"]["PAWSX"]["valid_spearman"],
            "test": {t: run["tasks"][t]["test_spearman"] for t in (*TASKS, "PAWSX")},
            "train_seconds": run["train_seconds"], "cpu_seconds": cpu_seconds(folder)}


def markdown(rows):
    head = ["run", "ingredients", *TASKS, "4-task mean", "WORDORDER", "selection (mean of 5)", "PAWS-X valid",
            "training (wall)", "CPU, whole run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        v = [r["valid"][t] for t in TASKS]
        lines.append("| " + " | ".join([r["run"], r["ingredients"], *(f"{x:.2f}" for x in v), f"{sum(v) / 4:.2f}",
                                        f"{r['valid_WORDORDER']:.2f}", f"{r['selection']:.2f}",
                                        f"{r['valid_PAWSX']:.2f}", f"{r['train_seconds'] / 60:.0f} min",
                                        "-" if r["cpu_seconds"] is None else f"{r['cpu_seconds'] / 60:.0f} min"])
                     + " |")
    lines += ["", "Valid Spearman x100 at the kept epoch. Training (wall) depends on what else ran on the 2 cores; CPU is "
              "user + system time of the whole run (training and every evaluation), '-' for a run that was resumed. "
              "For the record (nothing is chosen on it), test Spearman:", "",
              "| run | " + " | ".join((*TASKS, "PAWS-X")) + " |", "|---|" + "---|" * (len(TASKS) + 1)]
    for r in rows:
        lines.append(f"| {r['run']} | " + " | ".join(f"{r['test'][t]:.2f}" for t in (*TASKS, "PAWSX")) + " |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (each with its results.json)")
    parser.add_argument("--output", default=OUT, help="the results file (default: bench/results/quality_ablation.json)")
    args = parser.parse_args()
    rows = [row(folder) for folder in args.runs]
    table = markdown(rows)
    data = {"command": "python bench/quality_ablation.py " + " ".join(f"runs/{r['run']}" for r in rows),
            "what": "the general model's recipe at 10,000 train pairs per task (LCQMC, BQ, ATEC, STS-B), one epoch "
                    "from the L4/H256 reference checkpoint, seed 42: today's CoSENT recipe, then with word-order "
                    "negatives, in-batch ranking, and both", "rows": rows, "table": table}
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
    os.replace(tmp, args.output)
    print(table)


if __name__ == "__main__":
    main()
