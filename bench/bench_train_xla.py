"""Training with and without XLA on this machine: the 4,000-pair LCQMC regression run (``tasks/lcqmc_cosent.py``, the
L4 reference checkpoint, seed 42) with the default ``jit_compile`` and with ``--no-jit-compile``, in interleaved
rounds; each run's training seconds (results.json ``train_seconds``: the epoch, compilation included) and test
Spearman. Medians of the rounds, and the median of the per-round ratios.

    python bench/bench_train_xla.py --rounds 2
    python bench/bench_train_xla.py --limit-eval 0      # the full valid and test splits (the reported figures)

Needs ../shared (the checkpoint and LCQMC). Writes bench/results/train_xla.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHECKPOINT = os.path.join(ROOT, "..", "shared", "models", "chinese_L-4_H-256_A-4", "google")
SETTINGS = {"XLA (default)": [], "no XLA (--no-jit-compile)": ["--no-jit-compile"]}


def run(extra, limit_train, limit_eval, work):
    output = tempfile.mkdtemp(dir=work)
    command = [sys.executable, "tasks/lcqmc_cosent.py", "--limit-train", str(limit_train), "--checkpoint", CHECKPOINT,
               "--seed", "42", "--output", output, "--no-progress", *extra]
    if limit_eval:
        command += ["--limit-eval", str(limit_eval)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    with open(os.path.join(output, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    return results["train_seconds"], results["test_spearman"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--limit-train", type=int, default=4000)
    parser.add_argument("--limit-eval", type=int, default=256, help="valid/test pairs scored (0: all)")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "train_xla"))
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from zoo.hardware import cpu_kind, cpu_model, usable_cpus

    seconds = {name: [] for name in SETTINGS}
    spearman = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            names = list(SETTINGS)[r % 2:] + list(SETTINGS)[:r % 2]  # alternate which goes first
            for name in names:
                s, rho = run(SETTINGS[name], args.limit_train, args.limit_eval, work)
                seconds[name].append(s)
                spearman[name].append(rho)
                print(f"round {r + 1}: {name}: {s:.1f} s of training, test Spearman {rho:.2f}", flush=True)
    base = list(SETTINGS)[0]
    rows = [{"setting": name, "train_seconds": seconds[name], "median_seconds": statistics.median(seconds[name]),
             "ratio_to_xla": statistics.median(a / b for a, b in zip(seconds[name], seconds[base])),
             "test_spearman": spearman[name]} for name in SETTINGS]
    record = {"command": " ".join(["python", "bench/bench_train_xla.py", *sys.argv[1:]]),
              "machine": {"cpu": cpu_model(), "kind": cpu_kind(), "cpus": usable_cpus()},
              "limit_train": args.limit_train, "limit_eval": args.limit_eval or None, "rounds": args.rounds,
              "rows": rows}
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output + ".json", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    lines = [f"Training {args.limit_train} LCQMC pairs (L4 reference, seed 42) on {cpu_model()} ({cpu_kind()}, "
             f"{usable_cpus()} CPUs); {args.rounds} interleaved rounds; test Spearman on "
             f"{f'the first {args.limit_eval} test pairs' if args.limit_eval else 'the whole test split'}; "
             f"`{record['command']}`", "",
             "| setting | training seconds (median) | x XLA (median of per-round ratios) | test Spearman |",
             "|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['median_seconds']:.1f} | {r['ratio_to_xla']:.2f} | "
              f"{', '.join(f'{x:.2f}' for x in r['test_spearman'])} |" for r in rows]
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
