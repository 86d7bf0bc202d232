"""The training techniques measured on one run: the 4,000-pair LCQMC regression (L4 reference checkpoint) plain,
with EMA, with FGM, with both, with layer-wise decay, in mixed precision (bf16); the in-batch ranking run with a
batch of 64 pairs against a cached batch of 512; and hard negatives for the in-batch run, mined
(``zoo mine-negatives`` with the shipped encoder, from the same 4,000 train pairs) against word-order rewrites, on
WORDORDER and PAWS-X valid. Each over several seeds (mean and spread), with its training seconds.

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
# the negatives' comparison: also measured on WORDORDER (LCQMC valid's paraphrases against word-order rewrites) and
# PAWS-X valid, neither trained on
NEGATIVES = IN_BATCH + ["--word-order-valid", "--eval-tasks", "PAWSX"]
MINED = "lcqmc_4000_mined.tsv"  # written under --work by ``mine`` before the runs that train on it
VARIANTS = {  # name: (command after python, the technique's flags)
    "plain": (REGRESSION, []),
    "ema": (REGRESSION, ["--ema-momentum", "0.999"]),
    # 125 optimizer steps: 0.999 averages over ~1,000 steps, mostly the starting weights; 0.99 over ~100
    "ema 0.99": (REGRESSION, ["--ema-momentum", "0.99"]),
    "fgm": (REGRESSION, ["--adversarial-epsilon", "1.0"]),
    "ema 0.99+fgm": (REGRESSION, ["--ema-momentum", "0.99", "--adversarial-epsilon", "1.0"]),
    "layer-decay": (REGRESSION, ["--layer-decay", "0.9"]),
    "bf16": (REGRESSION, ["--mixed-precision", "bf16"]),  # CPUs with bfloat16 instructions (AMX, AVX512-BF16)
    "in-batch 64": (IN_BATCH, ["--batch-size", "64"]),
    "in-batch 512 cached": (IN_BATCH, ["--batch-size", "512", "--cached-mini-batch-size", "64"]),
    "in-batch without hard negatives": (NEGATIVES, []),
    "in-batch + word-order negatives": (NEGATIVES, ["--word-order-negatives", "1"]),
    "in-batch + mined negatives": (NEGATIVES, ["--train", MINED]),
}


def mine(work):
    """The mined variant's triplets: the first 4,000 LCQMC train pairs, their paraphrase pairs' hard negatives
    mined from those pairs' own texts with the shipped encoder (ranks 3 to 30: the closest are often unlabelled
    paraphrases); written once under ``work``."""
    out = os.path.join(work, MINED)
    if os.path.exists(out):
        return
    os.makedirs(work, exist_ok=True)
    pairs = os.path.join(work, "lcqmc_train_4000.tsv")
    with open(os.path.join(ROOT, "..", "shared", "data", "LCQMC", "senteval_cn", "LCQMC.train.data"),
              encoding="utf-8") as f, open(pairs, "w", encoding="utf-8") as w:
        w.writelines(line for _, line in zip(range(4000), f))
    command = [sys.executable, "-m", "zoo", "mine-negatives", "--input", pairs, "--output", out, "--range-min", "3",
               "--range-max", "30"]
    print(" ".join(command[1:]), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def run(name, seed, work):
    base, flags = VARIANTS[name]
    if MINED in flags:
        mine(work)
        flags = [os.path.join(work, f) if f == MINED else f for f in flags]
    output = os.path.join(work, f"{name.replace(' ', '_').replace(',', '').replace('+', 'plus')}_seed{seed}")
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
    shown_flags = [MINED if f.endswith(MINED) else f for f in flags]
    measured = {"seed": seed, "valid_spearman": scores["valid_spearman"], "test_spearman": scores["test_spearman"],
                "train_seconds": record["train_seconds"],
                "command": " ".join(["python", *base, *shown_flags, "--seed", str(seed)])}
    if "word_order_valid_spearman" in record:
        measured["word_order_valid_spearman"] = record["word_order_valid_spearman"]
        measured["pawsx_valid_spearman"] = record["tasks"]["PAWSX"]["valid_spearman"]
    return measured


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
        keys = ["valid_spearman", "test_spearman", "train_seconds"]
        keys += [k for k in ("word_order_valid_spearman", "pawsx_valid_spearman") if k in runs[0]]
        rows.append({"variant": name, "flags": " ".join(VARIANTS[name][1]), "runs": runs,
                     **{key: spread([r[key] for r in runs]) for key in keys}})
    record = {"command": " ".join(["python", "bench/bench_techniques.py", *sys.argv[1:]]),
              "machine": {"cpu": cpu_model(), "kind": cpu_kind(), "cpus": usable_cpus()},
              "checkpoint": "chinese_L-4_H-256_A-4 (reference)", "seeds": seeds, "rows": rows}
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    spread_note = " (mean +- sd)" if len(seeds) > 1 else ""
    lines = [f"LCQMC, the first 4,000 train pairs, L4 reference checkpoint, seeds {args.seeds}{spread_note}, on "
             f"{cpu_model()} ({cpu_kind()}, {usable_cpus()} CPUs); `{record['command']}`. Valid and test: LCQMC's "
             "Spearman x100; WORDORDER / PAWS-X valid: the negatives' runs only (neither trained on).", "",
             "| variant | flags | valid Spearman | test Spearman | WORDORDER / PAWS-X valid | training seconds |",
             "|---|---|---|---|---|---|"]

    def shown(value):  # the mean, and its spread where there are several seeds
        return f"{value['mean']:.2f}" + (f" +- {value['sd']:.2f}" if len(seeds) > 1 else "")

    def negatives(r):  # the negatives' comparison only
        if "word_order_valid_spearman" not in r:
            return "-"
        return f"{shown(r['word_order_valid_spearman'])} / {shown(r['pawsx_valid_spearman'])}"

    lines += [f"| {r['variant']} | `{r['flags'] or '-'}` | {shown(r['valid_spearman'])} | {shown(r['test_spearman'])} "
              f"| {negatives(r)} | {r['train_seconds']['mean']:.0f} |" for r in rows]
    record["table"] = lines  # the manual shows it (tools/results_pages.py: bench-table)
    with open(args.output + ".json", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
