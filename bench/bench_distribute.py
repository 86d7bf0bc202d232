"""Data-parallel training on CPU: steps/s and pairs/s of 1 vs 2 devices, JAX (simulated devices) and TensorFlow
(logical CPUs), same model, data, global batch and seed.

    python bench/bench_distribute.py                      # writes bench/results/distribute.{json,md}

This measures that the distributed path runs and what it costs here; it is not a speed-up measurement: the
"devices" are the same 2 cores split in two, so 2 devices do the work of 1 plus the collectives. Each run is its own
process (the device count is fixed at start-up), interleaved over ``--rounds``: the embedded L4 reference, CoSENT,
Adam, batch 64 (global), maxlen 64, the first ``--pairs`` LCQMC train pairs; ``--warmup`` steps (compilation),
then ``--steps`` timed steps (``bench_streaming.steps_per_second``). TensorFlow with 2 replicas runs without XLA
(MirroredStrategy), so its 1-device row is measured without XLA too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_streaming import save, steps_per_second  # noqa: E402
CASES = [("jax", 1), ("jax", 2), ("tensorflow", 1), ("tensorflow", 2)]


def worker(devices, steps, warmup, batch_size, pairs):
    backend = os.environ["KERAS_BACKEND"]
    if backend == "tensorflow" and devices > 1:
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
    import keras

    import zoo
    from zoo.data.tasks import load_task
    from zoo.losses import CoSENTLoss
    from zoo.models import build_pair_trainer
    from zoo.train import PairBatches

    dist = zoo.distribute.setup("data-parallel" if devices > 1 else "none", batch_size=batch_size)
    keras.utils.set_random_seed(42)
    encoder = zoo.SentenceEncoder.from_preset(zoo.DEFAULT_PRESET, maxlen=64)
    batches = PairBatches(encoder.tokenizer, load_task("LCQMC", "train").head(pairs), batch_size, 64)
    trainer = build_pair_trainer(encoder, "cosent")
    trainer.compile(optimizer=keras.optimizers.Adam(2e-5), loss=CoSENTLoss(), jit_compile=backend == "jax")
    rate, _ = steps_per_second(trainer, batches, steps, warmup)
    print("RESULT" + json.dumps({"backend": backend, "devices": dist.devices, "steps_per_s": rate,
                                 "pairs_per_s": rate * batch_size, "distribution": dist.record(batch_size)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", default=os.path.join(HERE, "results", "distribute"))
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.steps, args.warmup, args.batch_size, args.pairs)
    runs = []
    for r in range(args.rounds):
        for backend, devices in CASES:
            env = {**os.environ, "KERAS_BACKEND": backend}
            if backend == "jax":
                env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
            done = subprocess.run([sys.executable, __file__, "--worker", str(devices), "--steps", str(args.steps),
                                   "--warmup", str(args.warmup), "--batch-size", str(args.batch_size), "--pairs",
                                   str(args.pairs)], capture_output=True, text=True, env=env)
            if done.returncode != 0:
                sys.exit(f"{backend} x{devices} failed:\n{done.stderr[-3000:]}")
            runs.append({**json.loads(done.stdout.split("RESULT", 1)[1]), "round": r})
            print(json.dumps(runs[-1]), flush=True)
    import numpy as np

    rows = []
    for backend, devices in CASES:
        mine = [x for x in runs if (x["backend"], x["devices"]) == (backend, devices)]
        base = {x["round"]: x["steps_per_s"] for x in runs if (x["backend"], x["devices"]) == (backend, 1)}
        rows.append({"backend": backend, "devices": devices,
                     "steps_per_s": float(np.median([x["steps_per_s"] for x in mine])),
                     "pairs_per_s": float(np.median([x["pairs_per_s"] for x in mine])),
                     "ratio_to_one_device": float(np.median([x["steps_per_s"] / base[x["round"]] for x in mine]))})
    table = "\n".join(["| backend | devices | steps/s | pairs/s | x 1 device |", "|---|---|---|---|---|"] + [
        f"| {r['backend']} | {r['devices']} | {r['steps_per_s']:.2f} | {r['pairs_per_s']:.0f} | "
        f"{r['ratio_to_one_device']:.2f} |" for r in rows])
    save(args, table, rows, runs)


if __name__ == "__main__":
    main()
