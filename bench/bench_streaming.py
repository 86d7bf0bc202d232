"""Streaming input vs in-memory: training steps/s and peak RSS of the CoSENT bi-encoder input path.

    python bench/bench_streaming.py                       # writes bench/results/streaming.{json,md}
    python bench/bench_streaming.py --pairs 10000000 --steps 200 --rounds 2
    python bench/bench_streaming.py --backend jax --kinds memory,stream-10m --output bench/results/streaming_jax

Three inputs, each in its own process (peak RSS is the process's), interleaved over ``--rounds``:
* ``memory``: ``PairBatches`` over the LCQMC train split (tokenised into memory first, the default path);
* ``stream-lcqmc``: ``StreamingPairBatches`` over the same file;
* ``stream-10m``: ``StreamingPairBatches`` over a generated gzipped file of ``--pairs`` pairs (sentences of the
  LCQMC train split paired at random; cached in ``--cache``, outside git).
Each trains the embedded L4 reference (CoSENT, Adam, XLA, batch 64, maxlen 64) through the engine's own input
(``zoo.train.loop.epoch_input``: a background producer overlapping the step) for ``--warmup`` steps, then times
``--steps`` steps: steps/s is one over the median step time (XLA compiles each new padded length once, a
several-second outlier). Reported: steps/s (median over rounds), its ratio to the in-memory path (per round, then
median), set-up seconds (reading/tokenising or counting the file), and the process's resident memory: after the
imports, after the set-up (model loaded, input ready), and its peak (``ru_maxrss``). ``--backend`` runs the workers
on TensorFlow (default) or JAX; ``--no-jit-compile`` trains TensorFlow without XLA.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("memory", "stream-lcqmc", "stream-10m")
sys.path.insert(0, os.path.dirname(HERE))


def generate(path, pairs, seed=0):
    """``pairs`` random pairs of LCQMC train sentences with random 0/1 labels, gzipped (level 1)."""
    import numpy as np

    from zoo.data.tasks import load_task

    train = load_task("LCQMC", "train")
    texts = np.array(sorted(set(train.texts_a) | set(train.texts_b)), dtype=object)
    rng = np.random.default_rng(seed)
    tmp = path + ".partial"
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=1) as f:
        for start in range(0, pairs, 100_000):
            n = min(100_000, pairs - start)
            a, b = texts[rng.integers(len(texts), size=n)], texts[rng.integers(len(texts), size=n)]
            y = rng.integers(2, size=n)
            f.write("".join(f"{x}\t{z}\t{label}\n" for x, z, label in zip(a, b, y)))
    os.replace(tmp, path)


def steps_per_second(trainer, batches, steps, warmup):
    """Train ``warmup`` + ``steps`` steps of the first epoch of ``batches`` through the engine's own input
    (``zoo.train.loop.epoch_input``); (steps/s of the median of the last ``steps``, their mean padded length)."""
    import keras
    import numpy as np

    from zoo.train.loop import epoch_input

    times, lengths, real_epoch = [], {}, batches.epoch

    def epoch(*args, **kwargs):  # records each batch's padded length
        for step, x, y in real_epoch(*args, **kwargs):
            lengths[step] = x["token_ids"].shape[1]
            yield step, x, y

    batches.epoch = epoch

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter())

    trainer.fit(epoch_input(batches, 42, 0, 0, {}), steps_per_epoch=warmup + steps, epochs=1, verbose=0,
                callbacks=[Clock()])
    durations = np.diff(times[warmup - 1:])
    # the median step: a step that compiles a new padded length is an outlier
    return 1.0 / float(np.median(durations)), float(np.mean([lengths[s] for s in range(warmup, warmup + steps)]))


def rss_mib():
    """This process's resident memory now (VmRSS), MiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def worker(kind, path, steps, warmup, batch_size, jit_compile):
    """One measurement in this process; prints a JSON line."""
    import keras

    import zoo
    from zoo.data.tasks import load_task, task_file
    from zoo.losses import CoSENTLoss
    from zoo.models import build_pair_trainer
    from zoo.train import PairBatches, StreamingPairBatches

    rss_imported = rss_mib()
    t0 = time.time()
    encoder = zoo.SentenceEncoder.from_preset(zoo.DEFAULT_PRESET, maxlen=64)
    if kind == "memory":
        batches = PairBatches(encoder.tokenizer, load_task("LCQMC", "train"), batch_size, 64)
    else:
        batches = StreamingPairBatches(encoder.tokenizer, path if kind == "stream-10m" else task_file(
            "LCQMC", "train", zoo.data.default_data_dir()), batch_size, 64)
    setup_seconds, rss_setup = time.time() - t0, rss_mib()
    trainer = build_pair_trainer(encoder, "cosent")
    trainer.compile(optimizer=keras.optimizers.Adam(2e-5), loss=CoSENTLoss(), jit_compile=jit_compile)
    rate, padded = steps_per_second(trainer, batches, steps, warmup)
    print("RESULT" + json.dumps({"kind": kind, "pairs": batches.n, "steps_per_s": rate, "mean_padded_length": padded,
                                 "pairs_per_s": rate * batch_size, "setup_seconds": setup_seconds,
                                 "backend": keras.backend.backend(), "jit_compile": jit_compile,
                                 "rss_after_imports_mib": rss_imported, "rss_after_setup_mib": rss_setup,
                                 "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=10_000_000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backend", choices=("tensorflow", "jax"), default="tensorflow")
    parser.add_argument("--no-jit-compile", dest="jit_compile", action="store_false",
                        help="TensorFlow without XLA (JAX always compiles)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated inputs to measure (memory first)")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/zoo-bench"))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "streaming"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.path, args.steps, args.warmup, args.batch_size, args.jit_compile)
    if args.backend == "jax" and not args.jit_compile:
        parser.error("--no-jit-compile is for TensorFlow (JAX always compiles the step)")
    kinds = args.kinds.split(",")
    if kinds[0] != "memory" or set(kinds) - set(KINDS):
        parser.error(f"--kinds: 'memory' first (the reference), then any of {KINDS[1:]}, got {args.kinds!r}")

    os.makedirs(args.cache, exist_ok=True)
    path = os.path.join(args.cache, f"pairs{args.pairs}.data.gz")
    if "stream-10m" in kinds and not os.path.exists(path):
        t0 = time.time()
        generate(path, args.pairs)
        print(f"generated {path} ({os.path.getsize(path) / 2**20:.0f} MiB) in {time.time() - t0:.0f} s", flush=True)
    runs = []
    for r in range(args.rounds):
        for kind in kinds:
            done = subprocess.run([sys.executable, __file__, "--worker", kind, "--path", path, "--steps",
                                   str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size),
                                   *([] if args.jit_compile else ["--no-jit-compile"])],
                                  capture_output=True, text=True, env={**os.environ, "KERAS_BACKEND": args.backend})
            if done.returncode != 0:
                sys.exit(f"{kind} failed:\n{done.stderr[-3000:]}")
            result = {**json.loads(done.stdout.split("RESULT", 1)[1]), "round": r}
            runs.append(result)
            print(json.dumps(result), flush=True)
    import numpy as np

    summary = {}
    for kind in kinds:
        mine = [x for x in runs if x["kind"] == kind]
        ratios = [x["steps_per_s"] / next(m for m in runs if m["kind"] == "memory" and m["round"] == x["round"])
                  ["steps_per_s"] for x in mine]
        summary[kind] = {"pairs": mine[0]["pairs"], "steps_per_s": float(np.median([x["steps_per_s"] for x in mine])),
                         "ratio_to_memory": float(np.median(ratios)),
                         "setup_seconds": float(np.median([x["setup_seconds"] for x in mine])),
                         "mean_padded_length": float(np.mean([x["mean_padded_length"] for x in mine])),
                         **{key: float(max(x[key] for x in mine)) for key in
                            ("rss_after_imports_mib", "rss_after_setup_mib", "peak_rss_mib")}}
    lines = [f"backend {args.backend}, {'XLA' if args.jit_compile or args.backend == 'jax' else 'no XLA'}", "",
             "| input | pairs | steps/s | x in-memory | padded length | set-up s | RSS MiB: imports | set-up | peak |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {k} | {v['pairs']:,} | {v['steps_per_s']:.2f} | {v['ratio_to_memory']:.2f} | "
              f"{v['mean_padded_length']:.1f} | {v['setup_seconds']:.0f} | {v['rss_after_imports_mib']:.0f} | "
              f"{v['rss_after_setup_mib']:.0f} | {v['peak_rss_mib']:.0f} |" for k, v in summary.items()]
    save(args, "\n".join(lines), summary, runs)


def save(args, table, summary, runs):
    """``args.output``.json (command, settings, summary, every run) and .md (the table and the command)."""
    command = f"python bench/{os.path.basename(sys.argv[0])} " + " ".join(sys.argv[1:])
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output + ".json", "w", encoding="utf-8") as f:
        json.dump({"command": command, "settings": vars(args), "summary": summary, "runs": runs}, f, indent=1)
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write(table + f"\n\ncommand: `{command}`\n")
    print(table)


if __name__ == "__main__":
    main()
