"""Cached in-batch negatives (GradCache) against the uncached batch: peak memory and step time of the bi-encoder's
in-batch ranking step on this machine.

Each setting runs in a fresh process: the L4 reference checkpoint as a SentenceEncoder, the first PAIRS paraphrase
pairs of LCQMC train (maxlen 32) as one batch, CoSENT + in-batch ranking (``--in-batch-weight 1``), Adam, ``--steps``
steps. Measured: the process's peak resident memory above what it held before the first step (the step's
activations and workspace; on CPU, RSS is where they live) and the median step time after the first (which
traces). Settings run in interleaved rounds; medians of the rounds.

    python bench/bench_cached.py --rounds 2

Needs ../shared (the checkpoint and LCQMC). Writes bench/results/cached.json and .md.
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
SHARED = os.path.join(ROOT, "..", "shared")
CHECKPOINT = os.path.join(SHARED, "models", "chinese_L-4_H-256_A-4", "google")

CHILD = r"""
import json, os, resource, statistics, sys, time
import keras, numpy as np
sys.path.insert(0, sys.argv[1])
import zoo
from zoo.data.tasks import load_splits
from zoo.losses import CoSENTInBatchLoss
from zoo.models.bi_encoder import build_trainer
from zoo.train.cached import cached

checkpoint, data_dir, pairs, mini, steps, jit = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), sys.argv[7] == "1"
keras.utils.set_random_seed(0)
encoder = zoo.SentenceEncoder.from_preset(checkpoint, maxlen=32)
train = load_splits("LCQMC", data_dir, None, ("train",))["train"]
chosen = [i for i in range(len(train)) if train.labels[i] == 1][:pairs]
texts = [t for i in chosen for t in (train.texts_a[i], train.texts_b[i])]
x = {k: np.asarray(v) for k, v in encoder.preprocessor.tokenize(texts).items()}
y = np.ones((pairs, 2), dtype="float32")
trainer = cached(build_trainer(encoder, in_batch=True), None if mini == "none" else int(mini))
trainer.compile(keras.optimizers.Adam(2e-5), CoSENTInBatchLoss(1.0), jit_compile=jit)
trainer.optimizer.build(trainer.trainable_variables)
def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
before = rss_mib()
times = []
for _ in range(steps):
    start = time.perf_counter()
    loss = float(trainer.train_on_batch(x, y, return_dict=True)["loss"])
    times.append(time.perf_counter() - start)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"before_mib": before, "peak_mib": peak, "step_seconds": times, "loss": loss,
                  "rows": int(x["token_ids"].shape[0]), "tokens": int(x["token_ids"].size)}))
"""


def child(pairs, mini, steps, jit):
    done = subprocess.run([sys.executable, "-c", CHILD, ROOT, CHECKPOINT, os.path.join(SHARED, "data"), str(pairs),
                           str(mini), str(steps), "1" if jit else "0"], capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if done.returncode:
        raise SystemExit(f"pairs {pairs}, mini-batch {mini} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=512, help="pairs in the large batch (2x texts)")
    parser.add_argument("--mini-batch-size", type=int, default=64, help="texts per forward pass of the cached step")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jit-compile", action="store_true", help="XLA (default: off, faster on CPUs here)")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "cached"))
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from zoo.hardware import cpu_kind, cpu_model, usable_cpus

    settings = {f"uncached, {args.pairs} pairs": (args.pairs, "none"),
                f"cached, {args.pairs} pairs, {args.mini_batch_size} texts a pass": (args.pairs, args.mini_batch_size),
                f"uncached, {args.mini_batch_size // 2} pairs": (args.mini_batch_size // 2, "none")}
    runs = {name: [] for name in settings}
    for r in range(args.rounds):
        names = list(settings)[r % len(settings):] + list(settings)[:r % len(settings)]
        for name in names:
            out = child(*settings[name], args.steps, args.jit_compile)
            runs[name].append(out)
            print(f"round {r + 1}: {name}: +{out['peak_mib'] - out['before_mib']:.0f} MiB, "
                  f"{statistics.median(out['step_seconds'][1:]):.2f} s a step, loss {out['loss']:.4f}", flush=True)
    base = list(settings)[0]
    rows = []
    for name, outs in runs.items():
        rows.append({"setting": name, "rows": outs[0]["rows"],
                     "step_memory_mib": statistics.median(o["peak_mib"] - o["before_mib"] for o in outs),
                     "step_seconds": statistics.median(statistics.median(o["step_seconds"][1:]) for o in outs),
                     "losses": [o["loss"] for o in outs], "runs": outs})
    for row in rows:
        row["memory_ratio"] = row["step_memory_mib"] / rows[0]["step_memory_mib"]
        row["time_ratio"] = statistics.median(
            statistics.median(a["step_seconds"][1:]) / statistics.median(b["step_seconds"][1:])
            for a, b in zip(runs[row["setting"]], runs[base]))
    record = {"command": " ".join(["python", "bench/bench_cached.py", *sys.argv[1:]]),
              "machine": {"cpu": cpu_model(), "kind": cpu_kind(), "cpus": usable_cpus()},
              "checkpoint": "chinese_L-4_H-256_A-4 (reference)", "maxlen": 32, "steps": args.steps,
              "rounds": args.rounds, "jit_compile": args.jit_compile, "rows": rows}
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output + ".json", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    lines = [f"One in-batch ranking step (CoSENT + multiple negatives ranking, Adam) of the L4 reference on LCQMC train "
             f"paraphrase pairs, maxlen 32, {'with' if args.jit_compile else 'without'} XLA, on {cpu_model()} "
             f"({cpu_kind()}, {usable_cpus()} CPUs); fresh process per run, {args.rounds} interleaved rounds of "
             f"{args.steps} steps (the first, which traces, not timed); `{record['command']}`", "",
             "| setting | texts | step memory (MiB above the process before it) | x uncached | seconds a step | "
             "x uncached |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['rows']} | {r['step_memory_mib']:.0f} | {r['memory_ratio']:.2f} | "
              f"{r['step_seconds']:.2f} | {r['time_ratio']:.2f} |" for r in rows]
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
