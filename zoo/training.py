"""Training bi-encoders on sentence pairs (CoSENT, Sentence-BERT softmax, cosine MSE), with resume.

``train_bi_encoder(TrainConfig(...))`` is the whole job behind ``tasks/lcqmc_cosent.py`` and
``tasks/train_bi_encoder.py``: read data, build a SentenceEncoder from a checkpoint, train with a
progress bar, evaluate valid Spearman after every epoch, keep the best model (``OUTPUT/model``, a zoo preset
written atomically), checkpoint the training state (``OUTPUT/checkpoint``) so a killed run resumes, then
evaluate test and write ``results.json`` and ``results.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shutil
import sys
import time

import keras
import numpy as np

from .data import TASKS, load_task, sha256_of, task_file
from .utils import batch_length, progress, save_results, write_json_atomic

OBJECTIVES = ("cosent", "sbert", "cosine_mse")


@dataclasses.dataclass
class TrainConfig:
    task: str = "LCQMC"
    objective: str = "cosent"
    checkpoint: str | None = None  # None: zoo.DEFAULT_PRESET
    data_dir: str | None = None
    epochs: int = 1
    batch_size: int = 32
    maxlen: int = 64
    lr: float = 1e-4  # Su's 2e-5 is for BERT-base; the small default model learns faster with 1e-4 (LCQMC valid)
    warmup: float | None = None  # None: constant lr; else linear warm-up over this share of steps, linear decay
    pooling: str = "cls"
    limit_train: int | None = None
    output: str | None = None
    seed: int = 42
    eval_batch_size: int = 128
    save_every: int = 500  # training steps between mid-epoch checkpoints
    jit_compile: bool = True
    length_buckets: bool = True
    progress: bool = True
    batching: str = "task"  # several tasks: "task" (each batch from one task) or "mixed" (labels scaled to [0, 1])
    eval_tasks: tuple = ()  # extra tasks evaluated on test only (transfer), e.g. ("PAWSX",)


# ---------------------------------------------------------------------------------- batches
class PairBatches:
    """Interleaved pair rows [a1, b1, a2, b2, ...] -> (inputs [2B, T], labels [B]), shuffled per epoch; with
    ``joint=True`` one row ``[CLS] a [SEP] b [SEP]`` per pair (cross-encoders) -> (inputs [B, T], labels [B]).

    Texts are tokenised once; each batch is padded to a multiple of 8 tokens. The order of epoch ``e`` is a
    fixed function of (seed, e), so a resumed run sees the same batches.
    """

    def __init__(self, tokenizer, dataset, batch_size, maxlen, labels=None, length_buckets=True, joint=False,
                 zero_segments=False):
        self.tokenizer, self.batch_size, self.maxlen = tokenizer, batch_size, maxlen
        self.length_buckets, self.joint, self.zero_segments = length_buckets, joint, zero_segments
        self.pieces_a = tokenizer.piece_ids(dataset.texts_a)
        self.pieces_b = tokenizer.piece_ids(dataset.texts_b)
        self.labels = dataset.labels if labels is None else labels
        self.n = len(self.labels)
        self.lengths = np.array([len(a) + len(b) if joint else max(len(a), len(b))
                                 for a, b in zip(self.pieces_a, self.pieces_b)])

    def __len__(self):
        return math.ceil(self.n / self.batch_size)

    def epoch_batches(self, seed, epoch):
        """The pair indices of every batch of an epoch, fixed by (seed, epoch).

        With ``length_buckets``, a shuffled window of 50 batches is sorted by pair length before it is cut into
        batches (then the batches are shuffled): far less padding, the same pairs.
        """
        rng = np.random.default_rng([seed, epoch])
        order = rng.permutation(self.n)
        if self.length_buckets:
            window = 50 * self.batch_size
            for start in range(0, self.n, window):
                chunk = order[start:start + window]
                order[start:start + window] = chunk[np.argsort(self.lengths[chunk], kind="stable")]
        batches = [order[i:i + self.batch_size] for i in range(0, self.n, self.batch_size)]
        if self.length_buckets:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def epoch(self, seed, epoch, start_step=0):
        batches = self.epoch_batches(seed, epoch)
        for step in range(start_step, len(batches)):
            yield step, *self.make_batch(batches[step])

    def make_batch(self, index):
        """(inputs, labels) of the pairs ``index``."""
        rows = []
        for i in index:
            if self.joint:  # cross-encoder: one row [CLS] a [SEP] b [SEP]
                ids, segments = self.tokenizer._assemble(self.pieces_a[i], self.pieces_b[i], self.maxlen)
                rows.append((ids, [0] * len(ids) if self.zero_segments else segments))
            else:  # bi-encoder: rows a_i, b_i interleaved
                rows.append(self.tokenizer._assemble(self.pieces_a[i], None, self.maxlen))
                rows.append(self.tokenizer._assemble(self.pieces_b[i], None, self.maxlen))
        return self.tokenizer.pad(rows, pad_to=batch_length(rows, self.maxlen)), self.labels[index]


class MultiTaskBatches:
    """One PairBatches per task; an epoch runs every batch of every task once, in an order fixed by (seed, epoch).
    Each batch holds the pairs of one task, so labels of different scales (0/1, STS-B 0-5) never share a batch."""

    def __init__(self, parts):
        self.parts = parts
        self.n = sum(p.n for p in parts)

    def __len__(self):
        return sum(len(p) for p in self.parts)

    def epoch(self, seed, epoch, start_step=0):
        plan = [(k, i) for k, p in enumerate(self.parts) for i in range(len(p))]
        plan = [plan[j] for j in np.random.default_rng([seed, epoch, 1]).permutation(len(plan))]
        batches = [p.epoch_batches(seed + k, epoch) for k, p in enumerate(self.parts)]
        for step in range(start_step, len(plan)):
            k, i = plan[step]
            yield step, *self.parts[k].make_batch(batches[k][i])


def objective_labels(objective, labels, task):
    """Labels as each objective wants them: CoSENT raw (0/1 or 0-5), SBERT classes (STS-B: > 2.5), MSE in [0, 1]."""
    graded = labels.max() > 1
    if objective == "cosent":
        return labels.astype("float32")
    if objective == "sbert":
        return (labels > 2.5).astype("int32") if graded else labels.astype("int32")
    return (labels / (5.0 if graded else 1.0)).astype("float32")


@keras.saving.register_keras_serializable(package="zoo")
class WarmupLinear(keras.optimizers.schedules.LearningRateSchedule):
    """Learning rate: linear warm-up to ``peak`` over ``warmup`` steps, then linear decay to 0 at ``total``."""

    def __init__(self, peak, warmup, total):
        self.peak, self.warmup, self.total = peak, warmup, total

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        up = step / max(self.warmup, 1)
        down = (self.total - step) / max(self.total - self.warmup, 1)
        return self.peak * keras.ops.maximum(keras.ops.minimum(up, down), 0.0)

    def get_config(self):
        return {"peak": self.peak, "warmup": self.warmup, "total": self.total}


def learning_rate(peak, warmup, total_steps):
    """A constant ``peak`` when ``warmup`` is None (bojone's CoSENT), else WarmupLinear over that share of steps."""
    if warmup is not None and not 0 <= warmup < 1:
        raise ValueError(f"--warmup is a share of the training steps in [0, 1), got {warmup}")
    return peak if warmup is None else WarmupLinear(peak, int(warmup * total_steps), total_steps)


def build_trainer(encoder, objective, lr, jit_compile=True):
    import keras

    from .losses import CoSENTLoss, CosineMSELoss
    from .models.bi_encoder import build_pair_trainer

    trainer = build_pair_trainer(encoder, objective)
    loss = {"cosent": CoSENTLoss(), "cosine_mse": CosineMSELoss(),
            "sbert": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}[objective]
    trainer.compile(optimizer=keras.optimizers.Adam(lr), loss=loss, jit_compile=jit_compile)
    return trainer


# ---------------------------------------------------------------------------------- checkpoints
def save_state(directory, trainer, state):
    """Trainer weights + optimizer variables + progress, written to a temp folder then moved into place."""
    from keras import ops

    from .presets import replace_dir

    tmp = f"{directory}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    arrays = {f"w{i}": w for i, w in enumerate(trainer.get_weights())}
    arrays.update({f"o{i}": ops.convert_to_numpy(v) for i, v in enumerate(trainer.optimizer.variables)})
    np.savez(os.path.join(tmp, "state.npz"), **arrays)
    write_json_atomic(os.path.join(tmp, "state.json"), state)
    replace_dir(tmp, directory)


def load_state(directory, trainer):
    """Restore what save_state wrote; returns the progress dict, or None when there is no checkpoint."""
    import json

    from .presets import resolve

    try:
        directory = resolve(directory)
    except FileNotFoundError:
        return None
    with open(os.path.join(directory, "state.json"), encoding="utf-8") as f:
        state = json.load(f)
    with np.load(os.path.join(directory, "state.npz")) as data:
        trainer.set_weights([data[f"w{i}"] for i in range(len(trainer.get_weights()))])
        trainer.optimizer.build(trainer.trainable_variables)
        for i, v in enumerate(trainer.optimizer.variables):
            v.assign(data[f"o{i}"])
    return state


# ---------------------------------------------------------------------------------- the job
def resolve_data_dir(task, data_dir):
    """--data-dir, else zoo's embedded data/ (LCQMC), else ../shared/data next to the repository."""
    from .data import default_data_dir

    if data_dir:
        return data_dir
    candidates = [default_data_dir(), os.path.join(os.path.dirname(default_data_dir()), "..", "shared", "data")]
    for candidate in candidates:
        try:
            task_file(task, "valid", candidate)
            return candidate
        except FileNotFoundError:
            continue
    raise FileNotFoundError(f"no {task} data in {candidates}; pass --data-dir")


def run_epochs(trainer, batches, state_dir, epochs, seed, evaluate, save_best, save_every=500,
               show_progress=True, metric="valid_spearman", unit="pair", mode="max"):
    """The resumable training loop shared by zoo's jobs.

    ``batches.epoch(seed, epoch, start_step)`` yields (step, x, y); ``len(batches)`` steps and ``batches.n``
    examples (``unit``, one per label in y) per epoch. ``evaluate()`` returns the selection metric (higher is better; measured before training
    as epoch 0 and after each epoch); ``save_best(epoch, value)`` writes the best model. The trainer's weights,
    optimizer state and progress go to ``state_dir`` every ``save_every`` steps and at each epoch end, so a
    killed run resumes where it stopped. Returns the state: ``history``, ``best``, ``train_seconds``.
    """
    state = load_state(state_dir, trainer)
    if state is None:
        state = {"epoch": 0, "step": 0, "history": [], "best": None, "train_seconds": 0.0}
        value = evaluate()
        state["history"].append({"epoch": 0, metric: value, "train_loss_ema": None})
        print(f"[zoo] before training: {metric} {value:.2f}", file=sys.stderr)
    else:
        print(f"[zoo] resuming from {state_dir}: epoch {state['epoch'] + 1}, step {state['step']}", file=sys.stderr)
    per_step = batches.n / max(len(batches), 1)
    for epoch in range(state["epoch"], epochs):
        t_epoch = time.time()
        bar = progress(None, f"epoch {epoch + 1}/{epochs}", show_progress, total=batches.n,
                       unit=unit, initial=min(int(state["step"] * per_step), batches.n))
        ema = state.get("loss_ema") if state["step"] else None
        for step, x, y in batches.epoch(seed, epoch, state["step"]):
            loss = float(np.asarray(trainer.train_on_batch(x, y)).reshape(-1)[0])
            if not np.isfinite(loss):
                raise FloatingPointError(f"loss became {loss} at epoch {epoch + 1}, step {step}")
            ema = loss if ema is None else 0.98 * ema + 0.02 * loss
            if bar is not None:
                bar.update(len(y))
                bar.set_postfix(loss=f"{ema:.4f}", refresh=False)
            if (step + 1) % save_every == 0 and step + 1 < len(batches):
                state.update(step=step + 1, loss_ema=ema,
                             train_seconds=state["train_seconds"] + time.time() - t_epoch)
                t_epoch = time.time()
                save_state(state_dir, trainer, state)
        if bar is not None:
            bar.close()
        state["train_seconds"] += time.time() - t_epoch
        value = evaluate()
        record = {"epoch": epoch + 1, metric: value, "train_loss_ema": ema}
        state["history"].append(record)
        print(f"[zoo] epoch {epoch + 1}: {metric} {value:.2f}", file=sys.stderr)
        best = state["best"]
        if best is None or (value > best[metric] if mode == "max" else value < best[metric]):  # trained epochs
            state["best"] = record
            save_best(epoch + 1, value)
        state.update(epoch=epoch + 1, step=0, loss_ema=None)
        save_state(state_dir, trainer, state)
    return state


def load_splits(task, data_dir, limit_train=None):
    """train / valid / test of a task (train cut to ``limit_train`` pairs), with a summary line per split."""
    data = {split: load_task(task, split, data_dir) for split in ("train", "valid", "test")}
    data["train"] = data["train"].head(limit_train)
    for split, d in data.items():
        print(f"[zoo] {split}: {d.summary()}", file=sys.stderr)
    return data


def data_files(data):
    """{split: path, sha256, pairs, duplicates, bad lines} for results.json."""
    return {split: {"path": os.path.abspath(d.path), "sha256": sha256_of(d.path), "pairs": len(d),
                    "duplicates": d.duplicates, "bad_lines": d.bad_lines} for split, d in data.items()}


def job_results(config, state, data, t0, **resolved):
    """The fields every pair job's results.json shares: its config (with ``resolved`` defaults such as the
    checkpoint and output folder), data files, per-epoch history, best epoch and times."""
    return {"config": {**dataclasses.asdict(config), **resolved}, "data_files": data_files(data),
            "epochs": state["history"], "best_epoch": state["best"]["epoch"],
            "train_seconds": state["train_seconds"], "seconds": time.time() - t0}


def add_job_flags(p, defaults):
    """Flags the cross-encoder and DvBERT jobs share: --checkpoint, --data-dir, integer settings, --lr,
    --output, --no-progress (defaults from the job's config dataclass)."""
    p.add_argument("--checkpoint", help="starting checkpoint (default: the embedded preset)")
    p.add_argument("--data-dir")
    for name in ("epochs", "batch_size", "maxlen", "limit_train", "seed", "save_every"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    p.add_argument("--lr", type=float, default=defaults.lr)
    p.add_argument("--output")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def train_bi_encoder(config: TrainConfig):
    """Run the job described by ``config``; returns the results dict (also written to OUTPUT/results.json).

    ``config.task`` may name several tasks ("LCQMC,BQ,ATEC,STS-B"): one model trains on the union of their
    train splits (``batching`` "task": each batch from one task; "mixed": pairs of all tasks in one batch with
    graded labels scaled to [0, 1]) and is selected by the mean of the valid Spearmans."""
    import keras

    from .evaluation import evaluate_encoder, threshold_accuracy
    from .models.bi_encoder import SentenceEncoder
    from .presets import DEFAULT_PRESET

    if config.objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {config.objective!r}")
    if config.batching not in ("task", "mixed"):
        raise ValueError(f"batching must be 'task' or 'mixed', got {config.batching!r}")
    tasks = [t.strip() for t in config.task.split(",") if t.strip()]
    t0 = time.time()
    checkpoint = config.checkpoint or DEFAULT_PRESET
    output = config.output or os.path.join("runs", f"{'+'.join(tasks)}_{config.objective}_{config.pooling}")
    os.makedirs(output, exist_ok=True)
    data_dirs = {task: resolve_data_dir(task, config.data_dir) for task in tasks}
    splits = {task: load_splits(task, data_dirs[task], config.limit_train) for task in tasks}

    keras.utils.set_random_seed(config.seed)
    encoder = SentenceEncoder.from_checkpoint(checkpoint, pooling=config.pooling, maxlen=config.maxlen)
    labels = {task: objective_labels(config.objective, d["train"].labels, task) for task, d in splits.items()}
    if len(tasks) == 1:
        batches = PairBatches(encoder.tokenizer, splits[tasks[0]]["train"], config.batch_size, config.maxlen,
                              labels[tasks[0]], config.length_buckets)
    elif config.batching == "task":
        batches = MultiTaskBatches([PairBatches(encoder.tokenizer, splits[t]["train"], config.batch_size,
                                                config.maxlen, labels[t], config.length_buckets) for t in tasks])
    else:
        from .data import PairDataset

        scaled = [labels[t] / (5.0 if labels[t].max() > 1 else 1.0) for t in tasks]
        union = PairDataset(sum((splits[t]["train"].texts_a for t in tasks), []),
                            sum((splits[t]["train"].texts_b for t in tasks), []),
                            np.concatenate(scaled).astype("float32"))
        batches = PairBatches(encoder.tokenizer, union, config.batch_size, config.maxlen,
                              length_buckets=config.length_buckets)
    lr = learning_rate(config.lr, config.warmup, config.epochs * len(batches))
    trainer = build_trainer(encoder, config.objective, lr, config.jit_compile)

    model_dir = os.path.join(output, "model")

    def evaluate():
        return float(np.mean([evaluate_encoder(encoder, splits[t]["valid"], config.eval_batch_size)[0]["spearman"]
                              for t in tasks]))

    def save_best(epoch, metric):
        encoder.save(model_dir, metadata={"task": config.task, "objective": config.objective, "epoch": epoch,
                                          "valid_spearman": metric})

    state = run_epochs(trainer, batches, os.path.join(output, "checkpoint"), config.epochs, config.seed,
                       evaluate, save_best, save_every=config.save_every, show_progress=config.progress)

    best = SentenceEncoder.load(model_dir)
    per_task = {}
    for task in tasks + [t for t in config.eval_tasks if t not in tasks]:
        data = splits.get(task) or {s: load_task(task, s, resolve_data_dir(task, config.data_dir))
                                    for s in ("valid", "test")}
        valid, valid_scores = evaluate_encoder(best, data["valid"], config.eval_batch_size)
        test, test_scores = evaluate_encoder(best, data["test"], config.eval_batch_size)
        per_task[task] = {"valid_spearman": valid["spearman"], "test_spearman": test["spearman"],
                          "test_pearson": test["pearson"], "trained": task in tasks}
        if all(np.isin(data[split].labels, (0, 1)).all() for split in ("valid", "test")):  # binary: accuracy too
            per_task[task].update(threshold_accuracy(valid_scores, data["valid"].labels, test_scores,
                                                     data["test"].labels))
    files = {}
    for task, data in splits.items():
        files.update({split if len(tasks) == 1 else f"{task}.{split}": f for split, f in data_files(data).items()})
    results = {**job_results(config, state, {}, t0, checkpoint=checkpoint, output=output,
                             data_dir=data_dirs[tasks[0]]), "data_files": files}
    if len(tasks) == 1 and not config.eval_tasks:
        results.update({k: v for k, v in per_task[tasks[0]].items() if k != "trained"})
    else:
        results.update(tasks=per_task, valid_spearman=state["best"]["valid_spearman"],
                       test_spearman=float(np.mean([per_task[t]["test_spearman"] for t in tasks])))
    results["command"] = " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])  # for the table
    return save_results(output, results, results_table(results))


def results_table(results):
    c = results["config"]
    lines = [
        "| task | objective | pooling | checkpoint | epochs | best epoch | valid Spearman | test Spearman |",
        "|---|---|---|---|---|---|---|---|",
        f"| {c['task']} | {c['objective']} | {c['pooling']} | {c['checkpoint']} | {c['epochs']} | "
        f"{results['best_epoch']} | {results['valid_spearman']:.2f} | {results['test_spearman']:.2f} |",
    ]
    if "test_accuracy" in results:
        low, high = results["test_accuracy_ci95"]
        lines[0] += " test accuracy [95% CI] |"
        lines[1] += "---|"
        lines[2] += f" {results['test_accuracy']:.2f} [{low:.1f}, {high:.1f}] |"
    lines += [
        "",
        "| epoch | valid Spearman | train loss (EMA) |",
        "|---|---|---|",
    ]
    for h in results["epochs"]:
        loss = "" if h["train_loss_ema"] is None else f"{h['train_loss_ema']:.4f}"
        lines.append(f"| {h['epoch']} | {h['valid_spearman']:.2f} | {loss} |")
    if "tasks" in results:
        lines += ["", "| task | valid Spearman | test Spearman | test accuracy [95% CI] |", "|---|---|---|---|"]
        for task, r in results["tasks"].items():
            acc = (f"{r['test_accuracy']:.2f} [{r['test_accuracy_ci95'][0]:.1f}, {r['test_accuracy_ci95'][1]:.1f}]"
                   if "test_accuracy" in r else "")
            name = task if r["trained"] else f"{task} (not trained on)"
            lines.append(f"| {name} | {r['valid_spearman']:.2f} | {r['test_spearman']:.2f} | {acc} |")
    lines.append(f"\ncommand: `{results['command']}`  ({results['seconds']:.0f} s)\n")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- command line
def parse_args(argv=None, task=None, objective=None):
    """Flags shared by the bi-encoder task scripts; ``task``/``objective`` fix those for thin wrappers."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = TrainConfig()
    if task is None:
        p.add_argument("--task", required=True, help=f"one of {TASKS}, or several comma-separated (one model "
                       "trained on their union, selected by the mean valid Spearman)")
    if objective is None:
        p.add_argument("--loss", dest="objective", choices=OBJECTIVES, default="cosent")
    p.add_argument("--checkpoint", help="Google TF1 / transformers folder, zoo preset or .keras "
                   "(default: the embedded zoo preset)")
    p.add_argument("--data-dir", help="folder with {TASK}/senteval_cn/{TASK}.{split}.data (default: embedded data/, "
                   "then ../shared/data)")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="pairs per step")
    p.add_argument("--maxlen", type=int, default=d.maxlen)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--warmup", type=float, help="linear warm-up over this share of the steps, then linear decay "
                   "to 0 (default: constant lr)")
    p.add_argument("--pooling", choices=("cls", "mean", "first-last-avg", "pooler"), default=d.pooling)
    p.add_argument("--limit-train", type=int, help="use only the first N training pairs")
    p.add_argument("--output", help="run folder (default runs/TASK_LOSS_POOLING); rerun to resume")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--save-every", type=int, default=d.save_every, help="steps between mid-epoch checkpoints")
    p.add_argument("--no-length-buckets", dest="length_buckets", action="store_false",
                   help="plain random batches (default: batches of similar-length pairs, less padding)")
    p.add_argument("--batching", choices=("task", "mixed"), default=d.batching,
                   help="several tasks: each batch from one task (default), or all tasks mixed with graded "
                        "labels scaled to [0, 1]")
    p.add_argument("--eval-tasks", default="", help="extra tasks evaluated on valid/test only (e.g. PAWSX)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    args = p.parse_args(argv)
    args.eval_tasks = tuple(t for t in args.eval_tasks.split(",") if t)
    for t in (args.task.split(",") if task is None else []) + list(args.eval_tasks):
        if t not in TASKS:
            p.error(f"unknown task {t!r}; known: {', '.join(TASKS)}")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    if task is not None:
        values["task"] = task
    if objective is not None:
        values["objective"] = objective
    return TrainConfig(**values)


def main(argv=None, task=None, objective=None):
    train_bi_encoder(parse_args(argv, task, objective))


# ---------------------------------------------------------------------------------- SimBERT
@dataclasses.dataclass
class SimBERTConfig:
    checkpoint: str | None = None  # None: zoo.DEFAULT_PRESET
    groups: str | None = None  # JSON lines {"text", "synonyms"}; None: LCQMC + BQ train positives
    data_dir: str | None = None
    epochs: int = 1
    batch_size: int = 64  # groups (pairs) per step = 2x rows
    maxlen: int = 32
    lr: float = 5e-5
    weight_decay: float = 0.01
    simplified_vocab: bool = True  # slim the vocabulary as the original SimBERT (a cheaper generation head)
    limit_groups: int | None = None
    output: str | None = None
    seed: int = 42
    save_every: int = 500
    jit_compile: bool = True
    progress: bool = True
    eval_tasks: tuple = ("LCQMC", "BQ", "STS-B")
    tasks: tuple = ("LCQMC", "BQ")  # default groups: connected components of these tasks' train positives
    select: str = "retrieval"  # best epoch by LCQMC valid Spearman ("retrieval") or by the joint loss on
    # groups of LCQMC valid positives ("loss": generation + retrieval, lower is better)
    samples: tuple = ("微信和支付宝哪个好", "怎么开通花呗", "今天天气怎么样", "我想买一部手机")


def train_simbert(config: SimBERTConfig):
    """Joint SimBERT training (seq2seq + in-batch similarity) with the resumable loop; the best model by LCQMC
    valid Spearman of the retrieval head goes to OUTPUT/model; results.json has zero-shot test Spearman on
    ``eval_tasks`` and gen_synonyms samples."""
    import keras

    from .data import groups_from_positive_pairs, read_synonym_groups
    from .evaluation import evaluate_encoder
    from .models.simbert import SimBERT, SimBERTBatches, build_simbert_trainer
    from .presets import DEFAULT_PRESET

    t0 = time.time()
    checkpoint = config.checkpoint or DEFAULT_PRESET
    output = config.output or os.path.join("runs", "simbert")
    os.makedirs(output, exist_ok=True)
    data_files = {}
    if config.groups:
        groups = read_synonym_groups(config.groups)
        data_files["groups"] = config.groups
    else:
        sources = []
        for task in config.tasks:
            try:
                d = load_task(task, "train", resolve_data_dir(task, config.data_dir))
            except FileNotFoundError:
                continue
            sources.append(d)
            data_files[f"{task}.train"] = d.path
        groups = groups_from_positive_pairs(*sources)
    groups = groups[: config.limit_groups] if config.limit_groups else groups
    if not groups:
        raise ValueError("no groups of similar sentences to train on")
    print(f"[zoo] {len(groups)} groups of similar sentences ({sum(map(len, groups))} texts)", file=sys.stderr)
    valid = load_task("LCQMC", "valid", resolve_data_dir("LCQMC", config.data_dir))
    data_files["LCQMC.valid"] = valid.path

    keras.utils.set_random_seed(config.seed)
    model = SimBERT.from_checkpoint(checkpoint, maxlen=config.maxlen, simplified=config.simplified_vocab)
    trainer = build_simbert_trainer(model, config.lr, config.weight_decay, config.jit_compile)
    batches = SimBERTBatches(model.tokenizer, groups, config.batch_size, config.maxlen)
    model_dir = os.path.join(output, "model")

    valid_groups = groups_from_positive_pairs(valid)
    valid_batches = SimBERTBatches(model.tokenizer, valid_groups, config.batch_size, config.maxlen)
    if config.select not in ("retrieval", "loss"):
        raise ValueError(f"select must be 'retrieval' or 'loss', got {config.select!r}")
    metric = "valid_spearman" if config.select == "retrieval" else "valid_loss"

    def evaluate():
        if config.select == "retrieval":
            return evaluate_encoder(model.encoder, valid, 128)[0]["spearman"]
        losses = [float(np.asarray(trainer.predict_on_batch(x)).reshape(-1)[0]) for _, x, _ in
                  valid_batches.epoch(12345, 0)]
        return float(np.mean(losses))

    def save_best(epoch, value):
        model.save(model_dir, metadata={"job": "simbert", "epoch": epoch, metric: value})

    state = run_epochs(trainer, batches, os.path.join(output, "checkpoint"), config.epochs, config.seed, evaluate,
                       save_best, save_every=config.save_every, show_progress=config.progress, unit="pair",
                       metric=metric, mode="max" if config.select == "retrieval" else "min")
    best = SimBERT.load(model_dir)
    zero_shot = {}
    for task in config.eval_tasks:
        try:
            test = load_task(task, "test", resolve_data_dir(task, config.data_dir))
        except FileNotFoundError:
            continue
        data_files[f"{task}.test"] = test.path
        zero_shot[task] = evaluate_encoder(best.encoder, test, 128)[0]["spearman"]
    samples = {text: best.gen_synonyms(text, n=100, k=5, seed=config.seed) for text in config.samples}
    results = {
        "config": {**dataclasses.asdict(config), "checkpoint": checkpoint, "output": output},
        "data_files": {k: {"path": os.path.abspath(v), "sha256": sha256_of(v)} for k, v in data_files.items()},
        "groups": len(groups),
        "epochs": state["history"],
        "best_epoch": state["best"]["epoch"],
        "test_spearman_zero_shot": zero_shot,
        "gen_synonyms": samples,
        "train_seconds": state["train_seconds"],
        "seconds": time.time() - t0,
    }
    lines = ["| task | zero-shot test Spearman (retrieval head) |", "|---|---|"]
    lines += [f"| {task} | {value:.2f} |" for task, value in zero_shot.items()]
    lines += ["", "| input | top gen_synonyms (cosine) |", "|---|---|"]
    lines += [f"| {text} | " + "; ".join(f"{t} ({s:.2f})" for t, s in out) + " |" for text, out in samples.items()]
    return save_results(output, results, "\n".join(lines) + "\n")


def simbert_main(argv=None):
    p = argparse.ArgumentParser(description="Train SimBERT (UniLM seq2seq + in-batch similarity).")
    d = SimBERTConfig()
    p.add_argument("--checkpoint", help="any checkpoint zoo loads (default: the embedded preset)")
    p.add_argument("--groups", help='JSON lines {"text": ..., "synonyms": [...]} (default: groups of LCQMC + BQ '
                   "train positives)")
    p.add_argument("--data-dir")
    for name in ("epochs", "batch_size", "maxlen", "limit_groups", "seed", "save_every"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--output")
    p.add_argument("--full-vocab", dest="simplified_vocab", action="store_false",
                   help="keep the checkpoint's whole vocabulary (default: slim it as SimBERT did)")
    p.add_argument("--tasks", default=",".join(d.tasks), help="tasks whose train positives form the default groups")
    p.add_argument("--select", choices=("retrieval", "loss"), default=d.select,
                   help="keep the epoch with the best LCQMC valid Spearman, or the lowest joint loss on "
                        "LCQMC valid positives")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    args = vars(p.parse_args(argv))
    args["tasks"] = tuple(t for t in args["tasks"].split(",") if t)
    train_simbert(SimBERTConfig(**args))


# ---------------------------------------------------------------------------------- cross-encoders
@dataclasses.dataclass
class CrossConfig:
    task: str = "LCQMC"
    head: str = "softmax"  # softmax (CE) | cosent (Dense(1) + CoSENT ranking loss, CoSENT 三)
    checkpoint: str | None = None
    data_dir: str | None = None
    epochs: int = 1
    batch_size: int = 32
    maxlen: int = 128
    lr: float = 2e-5
    zero_segments: bool = False  # bojone's interact.py sets every segment id to 0
    limit_train: int | None = None
    output: str | None = None
    seed: int = 42
    save_every: int = 500
    jit_compile: bool = True
    length_buckets: bool = True
    progress: bool = True


def train_cross_encoder(config: CrossConfig):
    """Train a CrossEncoder; the best epoch by valid accuracy (threshold fitted on valid by exact sweep) is kept
    in OUTPUT/model; results.json has valid/test accuracy at that threshold and test Spearman of the scores."""
    import keras

    from .evaluation import best_threshold, spearman, threshold_accuracy
    from .losses import CoSENTLoss
    from .models.cross_encoder import CrossEncoder
    from .presets import DEFAULT_PRESET

    t0 = time.time()
    checkpoint = config.checkpoint or DEFAULT_PRESET
    output = config.output or os.path.join("runs", f"{config.task}_cross_{config.head}")
    os.makedirs(output, exist_ok=True)
    data_dir = resolve_data_dir(config.task, config.data_dir)
    data = load_splits(config.task, data_dir, config.limit_train)
    keras.utils.set_random_seed(config.seed)
    model = CrossEncoder.from_checkpoint(checkpoint, head=config.head, maxlen=config.maxlen,
                                         zero_segments=config.zero_segments)
    loss = (keras.losses.SparseCategoricalCrossentropy(from_logits=True) if config.head == "softmax"
            else CoSENTLoss(scale=1.0))
    from .models.bi_encoder import backbone_inputs

    inputs = backbone_inputs()
    trainer = keras.Model(inputs, model(inputs), name="cross_encoder_trainer")  # the model itself stays uncompiled
    trainer.compile(optimizer=keras.optimizers.Adam(config.lr), loss=loss, jit_compile=config.jit_compile)
    labels = data["train"].labels.astype("int32" if config.head == "softmax" else "float32")
    batches = PairBatches(model.tokenizer, data["train"], config.batch_size, config.maxlen, labels,
                          config.length_buckets, joint=True, zero_segments=config.zero_segments)
    model_dir = os.path.join(output, "model")

    def scores(split):
        return model.predict(list(zip(data[split].texts_a, data[split].texts_b)), batch_size=128)

    def evaluate():
        return 100 * best_threshold(scores("valid"), data["valid"].labels)[1]

    def save_best(epoch, value):
        model.save(model_dir, metadata={"task": config.task, "head": config.head, "epoch": epoch,
                                        "valid_accuracy": value})

    state = run_epochs(trainer, batches, os.path.join(output, "checkpoint"), config.epochs, config.seed, evaluate,
                       save_best, save_every=config.save_every, show_progress=config.progress,
                       metric="valid_accuracy")
    model = CrossEncoder.load(model_dir)
    valid_scores, test_scores = scores("valid"), scores("test")
    results = {
        **job_results(config, state, data, t0, checkpoint=checkpoint, output=output, data_dir=data_dir),
        **threshold_accuracy(valid_scores, data["valid"].labels, test_scores, data["test"].labels),
        "test_spearman": 100 * spearman(test_scores, data["test"].labels),
    }
    low, high = results["test_accuracy_ci95"]
    table = ("| task | head | valid acc | threshold | test acc [95% CI] | test Spearman |\n|---|---|---|---|---|---|\n"
             f"| {config.task} | {config.head} | {results['valid_accuracy']:.2f} | {results['threshold']:.4f} | "
             f"{results['test_accuracy']:.2f} [{low:.1f}, {high:.1f}] | {results['test_spearman']:.2f} |\n")
    return save_results(output, results, table)


def cross_main(argv=None):
    p = argparse.ArgumentParser(description="Train a cross-encoder (interaction-based matcher).")
    d = CrossConfig()
    p.add_argument("--task", choices=TASKS, default=d.task)
    p.add_argument("--head", choices=("softmax", "cosent"), default=d.head)
    add_job_flags(p, d)
    p.add_argument("--zero-segments", action="store_true", help="all segment ids 0, as bojone's interact.py")
    train_cross_encoder(CrossConfig(**vars(p.parse_args(argv))))


# ---------------------------------------------------------------------------------- DvBERT distillation
class DistillBatches:
    """PairBatches whose labels are teacher-annealed targets: lambda = global step / total steps,
    target_t = lambda * onehot(gold) + (1 - lambda) * p_teacher_t, shape [B, teachers, 2] (Clark et al. 2019).
    With ``as_score`` the label is the positive-class target averaged over teachers, shape [B] (for CoSENT)."""

    def __init__(self, pairs, gold, teacher_probs, epochs, as_score=False):
        self.pairs, self.gold, self.teacher_probs = pairs, gold.astype("int64"), teacher_probs
        self.n, self.total, self.as_score = pairs.n, epochs * len(pairs), as_score

    def __len__(self):
        return len(self.pairs)

    def epoch(self, seed, epoch, start_step=0):
        onehot = np.eye(2, dtype="float32")
        for step, x, index in self.pairs.epoch(seed, epoch, start_step):
            lam = (epoch * len(self.pairs) + step) / max(self.total - 1, 1)
            index = index.astype("int64")
            targets = lam * onehot[self.gold[index]][:, None, :] + (1 - lam) * self.teacher_probs[index]
            if self.as_score:
                targets = targets[:, :, 1].mean(axis=1)
            yield step, x, targets.astype("float32")


DVBERT_OBJECTIVES = ("sbert", "cosent", "cosent-gap")


def predict_teachers(teachers, train, cache_path, progress=True):
    """Positive/negative probabilities of each trained softmax CrossEncoder on the train pairs -> [N, T, 2].

    Cached at ``cache_path`` (written atomically), keyed by the sha256 of each teacher's files and of the train
    pairs, so a retrained teacher or other data is predicted afresh."""
    import hashlib

    from .data import sha256_of
    from .models.cross_encoder import CrossEncoder

    def fingerprint(path):
        files = [path] if not os.path.isdir(path) else sorted(os.path.join(r, f) for r, _, fs in os.walk(path)
                                                             for f in fs)
        return hashlib.sha256("".join(sha256_of(f) for f in files).encode()).hexdigest()

    data = hashlib.sha256("\n".join(f"{a}\t{b}\t{y}" for a, b, y in zip(train.texts_a, train.texts_b, train.labels))
                          .encode()).hexdigest()
    key = np.array([fingerprint(path) for path in teachers] + [data])
    if os.path.exists(cache_path):
        with np.load(cache_path) as cached:
            if list(cached["key"]) == list(key):
                return cached["probs"]
    pairs = list(zip(train.texts_a, train.texts_b))
    probs = []
    for path in teachers:
        teacher = CrossEncoder.load(path)
        if teacher.head != "softmax":
            raise ValueError(f"{path}: the teacher must have a softmax head (got {teacher.head})")
        p1 = teacher.predict(pairs, batch_size=128, show_progress_bar=progress)
        probs.append(np.stack([1 - p1, p1], axis=1))
        print(f"[zoo] teacher {path}: train accuracy {100 * np.mean((p1 > 0.5) == train.labels):.2f}",
              file=sys.stderr)
    probs = np.stack(probs, axis=1).astype("float32")
    tmp = cache_path + ".tmp.npz"
    np.savez(tmp, key=key, probs=probs)
    os.replace(tmp, cache_path)
    return probs


@dataclasses.dataclass
class DvBERTConfig:
    task: str = "LCQMC"
    teachers: tuple = ()  # trained CrossEncoder presets (softmax head)
    checkpoint: str | None = None  # the student's starting checkpoint
    data_dir: str | None = None
    objective: str = "sbert"  # the student's loss: "sbert" (the paper's softmax head), "cosent" or "cosent-gap"
    pooling: str = "mean"
    epochs: int = 4
    batch_size: int = 16
    maxlen: int = 64
    lr: float = 2e-5
    warmup: float = 0.1
    limit_train: int | None = None
    output: str | None = None
    seed: int = 42
    save_every: int = 500
    jit_compile: bool = True
    progress: bool = True


def train_dvbert(config: DvBERTConfig):
    """DvBERT: a siamese student learns from cross-encoder teachers with teacher annealing.

    objective "sbert" (the paper): SBERT softmax head on [u; v; |u-v|], cross-entropy against each teacher's
    annealed target. Choices (methods.md §7.2, open there): one shared classifier for all teachers; the losses
    of the teachers are summed; distillation temperature 1; binary tasks only.
    objective "cosent" (zoo's variant): the CoSENT loss on cos(u, v), ranked by the annealed positive-class
    target averaged over teachers, so early pairs are ordered by the teachers' confidence and the last ones by
    the gold label (plain CoSENT). objective "cosent-gap": the same, each ordered pair weighted by its target
    gap, so pairs the teachers nearly tie barely count and the loss moves smoothly to plain CoSENT as lambda -> 1.
    Teacher probabilities on train are cached in the output folder, so a resumed run does not recompute them.
    The student is a SentenceEncoder either way."""
    import keras

    from .evaluation import evaluate_encoder, threshold_accuracy
    from .losses import CoSENTLoss, SoftTargetLoss
    from .models.bi_encoder import SentenceEncoder, build_pair_trainer
    from .presets import DEFAULT_PRESET

    if not config.teachers:
        raise ValueError("DvBERT needs at least one trained cross-encoder teacher (--teacher PATH)")
    if config.objective not in DVBERT_OBJECTIVES:
        raise ValueError(f"unknown DvBERT objective {config.objective!r}; use one of {DVBERT_OBJECTIVES}")
    t0 = time.time()
    checkpoint = config.checkpoint or DEFAULT_PRESET
    output = config.output or os.path.join("runs", f"{config.task}_dvbert")
    os.makedirs(output, exist_ok=True)
    data_dir = resolve_data_dir(config.task, config.data_dir)
    data = load_splits(config.task, data_dir, config.limit_train)
    if not np.all(np.isin(data["train"].labels, (0, 1))):
        raise ValueError(f"DvBERT here handles binary labels; {config.task} train has other values")
    teacher_probs = predict_teachers(config.teachers, data["train"], os.path.join(output, "teacher_probs.npz"),
                                     config.progress)

    keras.utils.set_random_seed(config.seed)
    student = SentenceEncoder.from_checkpoint(checkpoint, pooling=config.pooling, maxlen=config.maxlen)
    pairs = PairBatches(student.tokenizer, data["train"], config.batch_size, config.maxlen,
                        np.arange(len(data["train"]), dtype="float32"))
    cosent = config.objective.startswith("cosent")
    batches = DistillBatches(pairs, data["train"].labels, teacher_probs, config.epochs, as_score=cosent)
    trainer = build_pair_trainer(student, "cosent" if cosent else "sbert")
    loss = CoSENTLoss(gap_weighted=config.objective == "cosent-gap") if cosent else SoftTargetLoss()
    schedule = learning_rate(config.lr, config.warmup, batches.total)
    trainer.compile(optimizer=keras.optimizers.Adam(schedule), loss=loss,
                    jit_compile=config.jit_compile)
    model_dir = os.path.join(output, "model")

    def evaluate():
        return evaluate_encoder(student, data["valid"], 128)[0]["spearman"]

    def save_best(epoch, value):
        student.save(model_dir, metadata={"job": "dvbert", "objective": config.objective,
                                          "teachers": list(config.teachers), "epoch": epoch})

    state = run_epochs(trainer, batches, os.path.join(output, "checkpoint"), config.epochs, config.seed, evaluate,
                       save_best, save_every=config.save_every, show_progress=config.progress)
    best = SentenceEncoder.load(model_dir)
    valid, valid_scores = evaluate_encoder(best, data["valid"], 128)
    test, test_scores = evaluate_encoder(best, data["test"], 128)
    results = {
        **job_results(config, state, data, t0, checkpoint=checkpoint, output=output, data_dir=data_dir),
        "valid_spearman": valid["spearman"], "test_spearman": test["spearman"],
        **threshold_accuracy(valid_scores, data["valid"].labels, test_scores, data["test"].labels),
    }
    low, high = results["test_accuracy_ci95"]
    table = ("| task | student | teachers | test Spearman | test accuracy [95% CI] |\n|---|---|---|---|---|\n"
             f"| {config.task} | DvBERT ({config.objective}, {config.pooling}) | {len(config.teachers)} | "
             f"{results['test_spearman']:.2f} | {results['test_accuracy']:.2f} [{low:.1f}, {high:.1f}] |\n")
    return save_results(output, results, table)


def dvbert_main(argv=None):
    p = argparse.ArgumentParser(description="DvBERT: distil cross-encoder teachers into a siamese student.")
    d = DvBERTConfig()
    p.add_argument("--task", choices=TASKS, default=d.task)
    p.add_argument("--teacher", dest="teachers", action="append", required=True,
                   help="a trained cross-encoder (zoo preset folder, e.g. runs/LCQMC_cross_softmax/model); repeat")
    p.add_argument("--objective", default=d.objective, choices=DVBERT_OBJECTIVES,
                   help="student loss: the paper's SBERT softmax head, CoSENT ranked by the annealed targets, "
                        "or that CoSENT with each pair weighted by its target gap")
    p.add_argument("--pooling", default=d.pooling, choices=("cls", "mean", "first-last-avg", "pooler"))
    add_job_flags(p, d)
    p.add_argument("--warmup", type=float, default=d.warmup, help="share of steps for linear warm-up")
    args = vars(p.parse_args(argv))
    args["teachers"] = tuple(args["teachers"])
    train_dvbert(DvBERTConfig(**args))
