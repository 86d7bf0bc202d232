"""What the training jobs share: the common settings (flags) and the start of a run."""

from __future__ import annotations

import dataclasses
import os

import keras

from ..config import option
from ..data import TASKS
from ..errors import ConfigError
from ..logs import log
from ..paths import DEFAULT_PRESET

POOLINGS = ("cls", "mean", "first-last-avg", "pooler")


@dataclasses.dataclass
class TrainOptions:
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


def check_tasks(tasks, flag="--task"):
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ConfigError(f"{flag}: unknown task(s) {unknown or tasks}; known: {', '.join(TASKS)}")


def start(config, default_output):
    """Seed everything, make the run folder; returns (checkpoint, output) with defaults filled in."""
    checkpoint = config.checkpoint or DEFAULT_PRESET
    output = config.output or os.path.join("runs", default_output)
    os.makedirs(output, exist_ok=True)
    log.info("run folder %s, starting from %s", output, checkpoint)
    keras.utils.set_random_seed(config.seed)
    return checkpoint, output


def limit_eval(data, n):
    """valid and test cut to their first ``n`` pairs (``--limit-eval``)."""
    return {s: d.head(n) if s != "train" and n else d for s, d in data.items()}
