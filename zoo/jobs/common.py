"""What the training jobs share: the common settings (flags) and the start of a run."""

from __future__ import annotations

import dataclasses
import os

import keras

from .. import distribute
from ..distribute import ENV_COORDINATOR, ENV_PROCESS_ID, ENV_PROCESSES, MODES
from ..config import option
from ..data import TASKS, resolve_data_dir, task_file
from ..errors import ConfigError
from ..logs import log
from ..paths import DEFAULT_PRESET

POOLINGS = ("cls", "mean", "first-last-avg", "pooler")


@dataclasses.dataclass
class DistributeOptions:
    """Data-parallel training (``zoo.distribute``): every training job has these flags."""

    distribute: str = option("none", "data-parallel: split each (global) batch over every device (JAX: "
                                     "keras.distribution; TensorFlow: MirroredStrategy)", choices=MODES)
    coordinator: str | None = option(None, "HOST:PORT of process 0, to train in several processes/hosts (JAX; or "
                                           f"{ENV_COORDINATOR})")
    num_processes: int | None = option(None, f"processes in the run (or {ENV_PROCESSES})")
    process_id: int | None = option(None, f"this process, 0..N-1; 0 writes the files (or {ENV_PROCESS_ID})")


def setup_distribution(config):
    """Set the distribution of ``config`` (before any model is built); returns the ``zoo.distribute.Distribution``.
    On TensorFlow several replicas train without XLA (MirroredStrategy's steps cannot be jit-compiled on CPU)."""
    dist = distribute.setup(config.distribute, config.coordinator, config.num_processes, config.process_id,
                            batch_size=config.batch_size)
    if dist.backend == "tensorflow" and dist.devices > 1 and config.jit_compile:
        log.info("MirroredStrategy: training without XLA (--no-jit-compile)")
        config.jit_compile = False
    return dist


@dataclasses.dataclass
class TrainOptions(DistributeOptions):
    """Settings every training job has."""

    checkpoint: str | None = option(None, "starting checkpoint: a Google TF1 or transformers folder, a zoo preset "
                                          f"(folder or name), a run folder or a .keras file (default: {DEFAULT_PRESET})")
    data_dir: str | None = option(None, "folder with {TASK}/senteval_cn/{TASK}.{split}.data (default: the embedded "
                                        "data/, then ../shared/data)")
    epochs: int = option(1, "passes over the training data")
    batch_size: int = option(32, "pairs per step")
    maxlen: int = option(64, "tokens per text")
    lr: float = option(1e-4, "peak learning rate")
    limit_train: int | None = option(None, "train on the first N pairs only (per task)")
    limit_eval: int | None = option(None, "evaluate on the first N pairs of valid and test only (quick trials; not "
                                          "for reported numbers)")
    output: str | None = option(None, "run folder: best model, checkpoint, results (rerun to resume)")
    seed: int = option(42, "random seed (batch order, dropout, new heads)")
    save_every: int = option(500, "steps between mid-epoch checkpoints")
    jit_compile: bool = option(True, "train without XLA compilation")
    progress: bool = option(True, "no progress bars")

    def __post_init__(self):
        for name in ("epochs", "batch_size", "save_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("limit_train", "limit_eval"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.maxlen < 3:
            raise ConfigError(f"--maxlen must be >= 3, got {self.maxlen}")
        if self.lr <= 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}")


@dataclasses.dataclass
class StreamOptions:
    """Training pairs read lazily from files (``zoo.train.StreamingPairBatches``): the pair-training jobs' flags."""

    train_files: tuple = option((), "stream the training pairs from these files or folders (TAB-separated pairs, "
                                    "plain or .gz, any size) instead of the task's train split")
    stream: bool = option(False, "read the task's train split lazily (as --train-files): memory holds one shuffle "
                                 "buffer, not the split")

    @property
    def streamed(self):
        return bool(self.stream or self.train_files)

    @property
    def kept_splits(self):
        """The splits to load into memory: train too unless it is streamed."""
        return ("valid", "test") if self.streamed else ("train", "valid", "test")


def streamed_pairs(config, tokenizer, task, labels, **kwargs):
    """``StreamingPairBatches`` over ``--train-files`` (or the task's train file with ``--stream``); ``labels(y,
    graded)`` maps each batch's labels (``graded``: the files hold labels above 1, as STS-B's 0-5)."""
    from ..train import StreamingPairBatches

    paths = config.train_files or [task_file(task, "train", resolve_data_dir(task, config.data_dir))]
    source = StreamingPairBatches(tokenizer, paths, config.batch_size, config.maxlen, limit=config.limit_train,
                                  length_buckets=config.length_buckets, **kwargs)
    graded = source.max_label > 1
    source.label_fn = lambda y: labels(y, graded)
    return source


def streamed_files(batches):
    """The ``data_files["train"]`` record of a streamed run (None for batches held in memory)."""
    if not hasattr(batches, "paths"):
        return None
    return {"paths": [os.path.abspath(p) for p in batches.paths], "pairs": batches.n, "streamed": True}


def check_tasks(tasks, flag="--task"):
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ConfigError(f"{flag}: unknown task(s) {unknown or tasks}; known: {', '.join(TASKS)}")


def start(config, default_output):
    """Set the distribution, seed everything, make the run folder; returns (checkpoint, output) with defaults
    filled in."""
    setup_distribution(config)
    checkpoint = config.checkpoint or DEFAULT_PRESET
    output = config.output or os.path.join("runs", default_output)
    os.makedirs(output, exist_ok=True)
    log.info("run folder %s, starting from %s", output, checkpoint)
    keras.utils.set_random_seed(config.seed)
    return checkpoint, output


def limit_eval(data, n):
    """valid and test cut to their first ``n`` pairs (``--limit-eval``)."""
    return {s: d.head(n) if s != "train" and n else d for s, d in data.items()}
