"""One GPU run: continued pretraining, the general embedding model, five tasks, a preset with its card.

    KERAS_BACKEND=jax python tools/gpu_run.py --output runs/gpu       # from the repository's root

Sized by its flags to finish in under 10 minutes on one H200 (the defaults); every stage is a zoo job and resumes
when the same command runs again after a kill:

1. ``pretrain``: MLM + NSP with whole-word masking (jieba) from ``--checkpoint`` (the L6/H384 reference) on the
   corpus (``../shared/data/corpus``, without the documents held out for the question -> passage sets) and the
   LCQMC, BQ and STS-B train texts; AdamW with warm-up; the best backbone by held-out masked-token accuracy.
2. ``train bi-encoder`` from that backbone: CoSENT (first-last-avg pooling, one task per batch) on **all** train
   pairs of LCQMC, BQ, ATEC (substitute) and STS-B, kept by the mean valid Spearman; ``--bi-encoder-flags`` adds
   any flag of the job (e.g. ``"--in-batch-weight 1 --word-order-negatives 8"``).
3. The best model as float32 scored on valid and test of ATEC, BQ, LCQMC, PAWS-X (transfer) and STS-B, written as
   a preset in ``OUTPUT/preset`` with its card (README.md) and ``gpu_run.json`` (every figure).

Both training stages run in bfloat16 mixed precision (``--precision``; float32 variables) on JAX. For each the run
prints steps/s (one over the median time between the ends of consecutive steps, after ``--warmup-steps``) and the
model FLOPs utilisation: model FLOPs per step (counted per layer from the shapes of the batches actually fed:
rows x padded length; forward = layers x (8 H^2 + 4 H I + 4 T H) per token, the MLM head 2 (H^2 + H V) per
masked position; training = 3 x forward) over the median step time, over the device's peak (``--peak-tflops``;
by default the dense bfloat16 tensor-core peak of a known GPU, from NVIDIA's datasheets).
"""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import argparse  # noqa: E402  (the backend is chosen before anything imports keras)
import shlex  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import zoo  # noqa: E402

if __name__ == "__main__":
    zoo.logs.setup_cli()  # before the backend loads: its start-up lines stay out of the terminal

import keras  # noqa: E402
import numpy as np  # noqa: E402

from zoo.config import parse  # noqa: E402
from zoo.data.tasks import load_splits  # noqa: E402
from zoo.evaluation import evaluate_task  # noqa: E402
from zoo.jobs import bi_encoder, pretrain  # noqa: E402
from zoo.logs import log  # noqa: E402
from zoo.paths import write_json_atomic, write_text_atomic  # noqa: E402
from zoo.train.loop import watching  # noqa: E402
from zoo.train.results import table, versions  # noqa: E402

SHARED = os.path.join("..", "shared")  # beside the repository; the script runs from the repository's root
TASKS = ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B")
TRAIN_TASKS = ("LCQMC", "BQ", "ATEC", "STS-B")
# dense bfloat16 tensor-core peaks, TFLOP/s (NVIDIA's H200 / H100 SXM and A100 datasheets list 1,979 / 1,979 / 624
# "with sparsity"; dense is half)
PEAK_TFLOPS = {"H200": 989.5, "H100": 989.5, "A100": 312.0}


def encoder_flops(rows, length, dims):
    """Forward FLOPs of the transformer layers over ``rows`` sequences of ``length`` tokens (matrix products:
    Q, K, V and output projections 8 H^2, feed-forward 4 H I, attention scores and weighted sum 4 T H per token)."""
    h, i = dims["hidden"], dims["intermediate"]
    return dims["layers"] * rows * length * (8 * h * h + 4 * h * i + 4 * length * h)


def training_flops(inputs, dims):
    """Model FLOPs of one training step on ``inputs`` (3 x forward): the layers on every padded position, and for
    pretraining the MLM head (transform and tied vocabulary projection) on the masked positions."""
    rows, length = np.shape(inputs["token_ids"])
    forward = encoder_flops(rows, length, dims)
    if "mlm_positions" in inputs:
        positions = int(np.prod(np.shape(inputs["mlm_positions"])))
        forward += 2 * positions * (dims["hidden"] ** 2 + dims["hidden"] * dims["vocab"])
    return 3 * forward


class StepMeter(keras.callbacks.Callback):
    """Times every training step (end to end of consecutive steps, the first ``warmup`` of each fit call left out:
    compilation) and the model FLOPs of the batch it trained on (``on_batch_data``, in production order)."""

    def __init__(self, dims, warmup):
        super().__init__()
        self.dims, self.warmup = dims, warmup
        self.flops, self.intervals, self.step_flops = [], [], []
        self.last, self.seen = None, 0

    def on_batch_data(self, step, inputs):
        self.flops.append(training_flops(inputs, self.dims))

    def on_train_begin(self, logs=None):
        self.last, self.seen = None, 0

    def on_train_batch_end(self, batch, logs=None):
        now, flops = time.perf_counter(), self.flops.pop(0) if self.flops else None
        self.seen += 1
        if self.last is not None and self.seen > self.warmup and flops is not None:
            self.intervals.append(now - self.last)
            self.step_flops.append(flops)
        self.last = now

    def summary(self, peak_tflops):
        if not self.intervals:
            return {"steps_measured": 0}
        median = statistics.median(self.intervals)
        flops = float(np.mean(self.step_flops))
        out = {"steps_measured": len(self.intervals), "steps_per_second": 1.0 / median,
               "median_step_seconds": median, "model_tflops_per_step": flops / 1e12,
               "model_tflops_per_second": flops / median / 1e12}
        if peak_tflops:
            out.update(peak_tflops=peak_tflops, mfu=flops / median / 1e12 / peak_tflops)
        return out


def device_peak(requested):
    """(device description, peak TFLOP/s or None)."""
    import jax

    device = jax.devices()[0]
    kind = getattr(device, "device_kind", device.platform)
    if requested:
        return kind, requested
    return kind, next((v for k, v in PEAK_TFLOPS.items() if k in kind), None)


def dims_of(checkpoint):
    bb = zoo.BertBackbone.from_preset(checkpoint)
    return {"layers": bb.num_layers, "hidden": bb.hidden_dim, "intermediate": bb.intermediate_dim,
            "vocab": bb.vocabulary_size, "params": int(bb.count_params())}


def stage(name, run, config_class, argv, dims, args, peak):
    """Run one job (``run`` on the ``config_class`` parsed from ``argv``) with a StepMeter; returns (results, the
    meter's summary)."""
    config = parse(config_class, argv)
    meter = StepMeter(dims, args.warmup_steps)
    t0 = time.time()
    with watching(meter):
        results = run(config)
    summary = {**meter.summary(peak), "seconds": time.time() - t0, "command": " ".join(map(shlex.quote, argv))}
    mfu = f", MFU {100 * summary['mfu']:.1f}%" if "mfu" in summary else " (MFU: no peak known; give --peak-tflops)"
    log.info("%s: %.2f steps/s, %.3f model TFLOP/s%s; %.0f s", name, summary.get("steps_per_second", 0.0),
             summary.get("model_tflops_per_second", 0.0), mfu, summary["seconds"])
    return results, summary


def float32_copy(model):
    """``model`` rebuilt with the float32 dtype policy (trained in mixed precision: its variables are float32)."""
    from zoo.inference.precisions import copy_with_dtype

    return copy_with_dtype(model, "float32")


def card(record):
    scores = record["scores"]
    rows = [[t if t in TRAIN_TASKS else f"{t} (transfer: not trained on)", scores[t]["valid_spearman"],
             scores[t]["test_spearman"]] for t in TASKS]
    stages = [[name, s.get("steps_per_second"), s.get("model_tflops_per_second"),
               None if "mfu" not in s else 100 * s["mfu"], s["seconds"]] for name, s in record["stages"].items()]
    pairs = ", ".join(f"{k} {v:,}" for k, v in record["train_pairs"].items())
    dims, pre = record["dims"], record["pretrain"]
    base = f"{dims['layers']} layers, hidden {dims['hidden']}, {dims['params']:,} parameters"
    pretraining = (f"MLM + NSP, whole-word masking, {pre['steps']} steps of {pre['batch_size']} sequences of up to "
                   f"{pre['maxlen']} tokens, on the corpus (held-out documents excluded) and the LCQMC, BQ and "
                   "STS-B train texts")
    return f"""# {record['name']}

A zoo preset (`zoo.SentenceEncoder.from_preset(path)`) written by `tools/gpu_run.py` on {record['device']}.

| | |
|---|---|
| base checkpoint | `{record['checkpoint']}` ({base}) |
| continued pretraining | {pretraining} |
| training data | train splits only: {pairs} pairs |
| objective | CoSENT, first-last-avg pooling, one task per batch; `{record['bi_encoder_flags'] or 'no extra flags'}` |
| precision | {record['precision']} (float32 variables); shipped as float32 |
| wall time | {record['seconds'] / 60:.1f} min in all |

Reproduce: `{record['command']}`

## Scores (Spearman x100 of the cosine, float32)

{table(['task', 'valid Spearman', 'test Spearman'], rows)}

## Speed

{table(['stage', 'steps/s', 'model TFLOP/s', 'MFU %', 'seconds'], stages)}

Data terms: LCQMC and BQ are for research only (see ../shared/data/README.md): use this model for research only.
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", default="runs/gpu", help="run folder (rerun the command to resume)")
    p.add_argument("--data-dir", default=os.path.join(SHARED, "data"))
    p.add_argument("--corpus", default=None, help="pretraining text (default: DATA_DIR/corpus)")
    p.add_argument("--checkpoint", default=os.path.join(SHARED, "models", "chinese_L-6_H-384_A-6", "google"))
    p.add_argument("--precision", default="mixed_bfloat16", choices=("mixed_bfloat16", "float32"))
    p.add_argument("--pretrain-steps", type=int, default=3000)
    p.add_argument("--pretrain-batch-size", type=int, default=256)
    p.add_argument("--pretrain-maxlen", type=int, default=128)
    p.add_argument("--pretrain-lr", type=float, default=2e-4)
    p.add_argument("--pretrain-flags", default="", help="more flags of `zoo pretrain` (e.g. '--limit-train 2000')")
    p.add_argument("--epochs", type=int, default=2, help="bi-encoder epochs over all train pairs")
    p.add_argument("--batch-size", type=int, default=128, help="bi-encoder pairs per step")
    p.add_argument("--maxlen", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--bi-encoder-flags", default="", help="more flags of `zoo train bi-encoder` (e.g. "
                                                          "'--in-batch-weight 1' or '--limit-train 500')")
    p.add_argument("--warmup-steps", type=int, default=20, help="steps of each fit call left out of the timing")
    p.add_argument("--peak-tflops", type=float, default=None, help="the device's peak, for MFU (default: known GPUs)")
    p.add_argument("--name", default="zoo-embed-zh-gpu", help="the preset's name (its card's title)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if keras.backend.backend() != "jax":
        log.warning("tools/gpu_run.py is meant for KERAS_BACKEND=jax; running on %s", keras.backend.backend())
    t0 = time.time()
    device, peak = device_peak(args.peak_tflops)
    log.info("device: %s; peak %s TFLOP/s; precision %s", device, peak, args.precision)
    keras.config.set_dtype_policy(args.precision)
    dims = dims_of(args.checkpoint)
    quiet = ["--no-progress"] if args.no_progress else []
    corpus = args.corpus or os.path.join(args.data_dir, "corpus")
    out = os.path.abspath(args.output)

    pre_argv = ["--objective", "mlm", "--wwm", "--checkpoint", args.checkpoint, "--corpus", corpus, "--data-dir",
                args.data_dir, "--steps", str(args.pretrain_steps),
                "--eval-every", str(max(1, args.pretrain_steps // 5)), "--batch-size", str(args.pretrain_batch_size),
                "--maxlen", str(args.pretrain_maxlen), "--lr", str(args.pretrain_lr), "--save-every",
                str(max(1, args.pretrain_steps // 5)), "--output", os.path.join(out, "pretrain"), *quiet,
                *shlex.split(args.pretrain_flags)]
    pre, pre_speed = stage("pretraining", pretrain.run, pretrain.PretrainConfig, pre_argv, dims, args, peak)

    bi_argv = ["--tasks", ",".join(TRAIN_TASKS), "--eval-tasks", "PAWSX", "--batching", "task", "--pooling",
               "first-last-avg", "--warmup", "0.1", "--checkpoint", os.path.join(out, "pretrain", "model"),
               "--data-dir", args.data_dir, "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
               "--maxlen", str(args.maxlen), "--lr", str(args.lr), "--save-every", "1000", "--output",
               os.path.join(out, "general"), *quiet, *shlex.split(args.bi_encoder_flags)]
    general, general_speed = stage("bi-encoder", bi_encoder.run, bi_encoder.BiEncoderConfig, bi_argv, dims, args,
                                   peak)

    keras.config.set_dtype_policy("float32")
    model = float32_copy(zoo.SentenceEncoder.from_preset(os.path.join(out, "general", "model")))
    limit = parse(bi_encoder.BiEncoderConfig, bi_argv).limit_eval
    scores = {t: evaluate_task(model, load_splits(t, args.data_dir, splits=("valid", "test"), limit_eval=limit))
              for t in TASKS}
    preset = os.path.join(out, "preset")
    model.save_to_preset(preset, metadata={"source_run": os.path.join(args.output, "general")})
    record = {"name": args.name, "device": device, "precision": args.precision, "checkpoint": args.checkpoint,
              "dims": dims, "command": "python tools/gpu_run.py " + " ".join(map(shlex.quote, argv or sys.argv[1:])),
              "pretrain": {"steps": args.pretrain_steps, "batch_size": args.pretrain_batch_size,
                           "maxlen": args.pretrain_maxlen, "best": pre.get("best")},
              "bi_encoder_flags": args.bi_encoder_flags,
              "train_pairs": {k: v["pairs"] for k, v in general.get("data_files", {}).items() if k.endswith("train")},
              "stages": {"pretraining": pre_speed, "bi-encoder": general_speed}, "scores": scores,
              "bi_encoder_scores_mixed_precision": general.get("tasks"), "seconds": time.time() - t0,
              "versions": versions()}
    write_json_atomic(os.path.join(preset, "gpu_run.json"), record)
    write_text_atomic(os.path.join(preset, "README.md"), card(record))
    print(table(["task", "valid Spearman", "test Spearman"],
                [[t, scores[t]["valid_spearman"], scores[t]["test_spearman"]] for t in TASKS]))
    for name, speed in record["stages"].items():
        mfu = "n/a" if "mfu" not in speed else f"{100 * speed['mfu']:.1f}%"
        print(f"{name}: {speed.get('steps_per_second', 0):.2f} steps/s, MFU {mfu}")
    print(f"wrote {preset} ({record['seconds'] / 60:.1f} min)")
    return record


if __name__ == "__main__":
    main()
