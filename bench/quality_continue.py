"""Word order on top of the shipped zoo-embed-zh-L4: which dose of word-order negatives, at which epoch, on valid.

    bash bench/quality_continue.sh RUNS               # the continuation runs (each resumes where it stopped)
    python bench/quality_continue.py RUNS/cont_*      # the table; writes bench/results/quality_continue.json

Every run continues the shipped model (its epoch 0 is the shipped model itself) at a constant learning rate, so
epoch E of a run is what a run of E epochs would keep. The choice is made on valid only: among the epochs whose
four-task valid mean (ATEC, BQ, LCQMC, STS-B) is at most 0.3 below the shipped model's, the one with the best
WORDORDER valid Spearman. Test Spearman (PAWS-X included, never trained or selected on) is reported for each run's
kept model, beside bge-small-zh-v1.5's published figures (../shared/docs/public-baselines.md).
"""

from __future__ import annotations

import argparse
import json
import os

from quality_ablation import cpu_seconds, portable

from zoo.paths import write_json_atomic

TASKS = ("ATEC", "BQ", "LCQMC", "STS-B")
TEST_TASKS = (*TASKS, "PAWSX")
MAX_DROP = 0.3
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "quality_continue.json")
# bge-small-zh-v1.5 on the same five test sets: ../shared/docs/public-baselines.md (C-MTEB results)
BGE_SMALL = {"ATEC": 43.01, "BQ": 55.22, "LCQMC": 72.19, "PAWSX": 9.26, "STS-B": 76.73}


def read_run(folder):
    name = os.path.basename(os.path.normpath(folder))
    with open(os.path.join(folder, "results.json"), encoding="utf-8") as f:
        run = json.load(f)
    epochs = [{"epoch": e["epoch"], "valid": {t: e[f"valid_{t}_spearman"] for t in TASKS},
               "mean4": sum(e[f"valid_{t}_spearman"] for t in TASKS) / 4,
               "WORDORDER": e["valid_WORDORDER_spearman"]} for e in run["epochs"]]
    config = run["config"]
    return {"run": name, "command": portable(run["command"], name),
            "word_order_negatives": config.get("word_order_negatives", 0),
            "in_batch_weight": config.get("in_batch_weight", 0.0), "epochs": epochs,
            "kept_epoch": run["best_epoch"],
            "test": {t: run["tasks"][t]["test_spearman"] for t in TEST_TASKS},
            "valid_PAWSX": run["tasks"]["PAWSX"]["valid_spearman"],
            "train_seconds": run["train_seconds"], "cpu_seconds": cpu_seconds(folder)}


def choose(runs):
    """(run, epoch) chosen on valid: the best WORDORDER among epochs >= 1 within MAX_DROP of the shipped four-task
    mean (epoch 0, the same model in every run); None when no epoch qualifies."""
    shipped = runs[0]["epochs"][0]["mean4"]
    allowed = [(r, e) for r in runs for e in r["epochs"][1:] if e["mean4"] >= shipped - MAX_DROP]
    return shipped, max(allowed, key=lambda p: p[1]["WORDORDER"], default=None)


def markdown(runs, shipped, chosen):
    head = ["run", "word-order negatives", "in-batch weight", "epoch", *TASKS, "4-task mean", "vs shipped",
            "WORDORDER"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    first = runs[0]["epochs"][0]
    lines.append("| shipped zoo-embed-zh-L4 | - | - | 0 | " + " | ".join(f"{first['valid'][t]:.2f}" for t in TASKS)
                 + f" | {first['mean4']:.2f} | 0.00 | {first['WORDORDER']:.2f} |")
    for r in runs:
        for e in r["epochs"][1:]:
            mark = " (chosen)" if chosen and chosen[0] is r and chosen[1] is e else ""
            lines.append(f"| {r['run']}{mark} | {r['word_order_negatives']} | {r['in_batch_weight']:g} | {e['epoch']} | "
                         + " | ".join(f"{e['valid'][t]:.2f}" for t in TASKS)
                         + f" | {e['mean4']:.2f} | {e['mean4'] - shipped:+.2f} | {e['WORDORDER']:.2f} |")
    lines += ["", f"Valid Spearman x100 at each epoch (4,000 train pairs per task and epoch, lr 2e-5 constant). Chosen: "
              f"the best WORDORDER among epochs whose four-task mean is at most {MAX_DROP} below the shipped model's.",
              "", "Test Spearman x100 of each run's kept model (the job keeps the epoch with the best mean of the four "
              "tasks and WORDORDER), for the record; bge-small-zh-v1.5 from public-baselines.md:", "",
              "| model | kept epoch | " + " | ".join(TEST_TASKS) + " | mean | tasks above bge-small | PAWS-X valid | "
              "training (wall) | CPU, whole run |", "|---|---|" + "---|" * (len(TEST_TASKS) + 5)]
    lines.append("| bge-small-zh-v1.5 | - | " + " | ".join(f"{BGE_SMALL[t]:.2f}" for t in TEST_TASKS)
                 + f" | {sum(BGE_SMALL.values()) / 5:.2f} | - | - | - | - |")
    for r in runs:
        above = sum(r["test"][t] > BGE_SMALL[t] for t in TEST_TASKS)
        cpu = "-" if r["cpu_seconds"] is None else f"{r['cpu_seconds'] / 60:.0f} min"
        lines.append(f"| {r['run']} | {r['kept_epoch']} | " + " | ".join(f"{r['test'][t]:.2f}" for t in TEST_TASKS)
                     + f" | {sum(r['test'].values()) / 5:.2f} | {above} of 5 | {r['valid_PAWSX']:.2f} | "
                     f"{r['train_seconds'] / 60:.0f} min | {cpu} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (each with its results.json)")
    parser.add_argument("--output", default=OUT, help="the results file (default: bench/results/quality_continue.json)")
    args = parser.parse_args()
    runs = [read_run(folder) for folder in args.runs]
    shipped, chosen = choose(runs)
    table = markdown(runs, shipped, chosen)
    data = {"command": "python bench/quality_continue.py " + " ".join(f"runs/{r['run']}" for r in runs),
            "what": "zoo-embed-zh-L4 trained further on its four tasks with word-order negatives at several doses; "
                    "dose and epoch chosen on valid", "shipped_valid_mean4": shipped,
            "chosen": chosen and {"run": chosen[0]["run"], "epoch": chosen[1]["epoch"]}, "runs": runs,
            "bge_small_zh_v1_5_test": BGE_SMALL, "table": table}
    write_json_atomic(args.output, data)
    print(table)


if __name__ == "__main__":
    main()
