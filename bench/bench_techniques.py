"""The training techniques measured on one run: the 4,000-pair LCQMC regression (L4 reference checkpoint) plain,
with EMA, with FGM, with both, with layer-wise decay, in mixed precision (bf16), and the in-batch ranking run with a batch of 64 pairs against a
cached batch of 512; each over several seeds (mean and spread), with its training seconds.

    python bench/bench_techniques.py                        # 3 seeds, every variant (hours on 2 CPU cores)
    python bench/bench_techniques.py --seeds 42 --variants plain,ema

Each run is a subprocess writing its own run folder under --work (default runs/techniques): a finished run is read
back, a killed one resumes (the jobs resume exactly), so the command can be rerun until the table is complete.
Needs ../shared. Writes bench/results/techniques.json and .md; valid decides, test is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHECKPOINT = "../shared/models/chinese_L-4_H-256_A-4/google"  # the runs start in the repository's folder
REGRESSION = ["tasks/lcqmc_cosent.py", "--limit-train", "4000", "--checkpoint", CHECKPOINT]
IN_BATCH = ["-m", "zoo", "train", "bi-encoder", "--tasks", "LCQMC", "--limit-train", "4000", "--checkpoint",
            CHECKPOINT, "--in-batch-weight", "1"]
VARIANTS = {  # name: (command after python, the technique's flags)
    "plain": (REGRESSION, []),
    "ema": (REGRESSION, ["--ema-momentum", "0.999"]),
    "fgm": (REGRESSION, ["--adversarial-epsilon", "1.0"]),
    "ema+fgm": (REGRESSION, ["--ema-momentum", "0.999", "--adversarial-epsilon", "1.0"]),
    "layer-decay": (REGRESSION, ["--layer-decay", "0.9"]),
    "bf16": (REGRESSION, ["--mixed-precision", "bf16"]),  # CPUs with bfloat16 instructions (AMX, AVX512-BF16)
    "in-batch 64": (IN_BATCH, ["--batch-size", "64"]),
    "in-batch 512 cached": (IN_BATCH, ["--batch-size", "512", "--cached-mini-batch-size", "64"]),
}


def run(name, seed, work):
    base, flags = VARIANTS[name]
    output = os.path.join(work, f"{name.replace(' ', '_')}_seed{seed}")
    results = os.path.join(output, "results.json")
    if not os.path.exists(results):
        command = [sys.executable, *base, *flags, "--seed", str(seed), "--output", output, "--no-progress"]
        print(f"{name}, seed {seed}: {' '.join(command[1:])}", flush=True)
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{name}, seed {seed} failed:\n{done.stderr[-3000:]}")
    with open(results, encoding="utf-8") as f:
        record = json.load(f)
    scores = record.get("tasks", {}).get("LCQMC", record)
    return {"seed": seed, "valid_spearman": scores["valid_spearman"], "test_spearman": scores["test_spearman"],
            "train_seconds": record["train_seconds"], "command": " ".join(["python", *base, *flags, "--seed",
                                                                             str(seed)])}


def spread(values):
    return {"mean": statistics.mean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": values}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="42,43,44")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--work", default=os.path.join(ROOT, "runs", "techniques"))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "techniques"))
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from zoo.hardware import cpu_kind, cpu_model, usable_cpus

    seeds = [int(s) for s in args.seeds.split(",")]
    names = args.variants.split(",")
    unknown = set(names) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {list(VARIANTS)}")
    rows = []
    for name in names:
        runs = [run(name, seed, args.work) for seed in seeds]
        rows.append({"variant": name, "flags": " ".join(VARIANTS[name][1]), "runs": runs,
                     **{key: spread([r[key] for r in runs]) for key in ("valid_spearman", "test_spearman",
                                                                       "train_seconds")}})
    record = {"command": " ".join(["python", "bench/bench_techniques.py", *sys.argv[1:]]),
              "machine": {"cpu": cpu_model(), "kind": cpu_kind(), "cpus": usable_cpus()},
              "checkpoint": "chinese_L-4_H-256_A-4 (reference)", "seeds": seeds, "rows": rows}
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    spread_note = " (mean +- sd)" if len(seeds) > 1 else ""
    lines = [f"LCQMC, the first 4,000 train pairs, L4 reference checkpoint, seeds {args.seeds}{spread_note}, on "
             f"{cpu_model()} ({cpu_kind()}, {usable_cpus()} CPUs); `{record['command']}`", "",
             "| variant | flags | valid Spearman | test Spearman | training seconds |", "|---|---|---|---|---|"]

    def shown(value):  # the mean, and its spread where there are several seeds
        return f"{value['mean']:.2f}" + (f" +- {value['sd']:.2f}" if len(seeds) > 1 else "")

    lines += [f"| {r['variant']} | `{r['flags'] or '-'}` | {shown(r['valid_spearman'])} | {shown(r['test_spearman'])} "
              f"| {r['train_seconds']['mean']:.0f} |" for r in rows]
    record["table"] = lines  # the manual shows it (tools/results_pages.py: bench-table)
    with open(args.output + ".json", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
