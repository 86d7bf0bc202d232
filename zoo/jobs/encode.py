"""Encode job: a file of texts (one per line, plain or .gz) -> an .npy array of L2-normalised embeddings, in
line order. ``zoo encode``."""

from __future__ import annotations

import dataclasses
import gzip
import os

import numpy as np

from ..config import option
from ..errors import ConfigError, DataError
from ..logs import log
from ..paths import DEFAULT_ENCODER, atomic_file
from .common import POOLINGS
from ..models import from_preset


@dataclasses.dataclass
class EncodeConfig:
    """Embed the lines of a text file with any model zoo loads."""

    model: str = option(DEFAULT_ENCODER, "a run folder, zoo preset (folder or name), .keras file or checkpoint "
                                         "folder (default: the shipped general sentence-embedding model)")
    input: str = option(None, "text file, one text per line (UTF-8; .gz allowed)", required=True)
    output: str = option(None, "the .npy file to write (float32 [lines, dim])", required=True)
    batch_size: int = option(64, "texts per model call")
    maxlen: int | None = option(None, "tokens per text (default: the model's)")
    pooling: str | None = option(None, "pooling when MODEL is a checkpoint, not a saved encoder (default: cls)",
                                 choices=POOLINGS)
    long_text: str = option("truncate", "texts over maxlen tokens: cut, or averaged over overlapping windows",
                            choices=("truncate", "chunk"))
    truncate_dim: int | None = option(None, "keep the first D dimensions of each vector (then L2-normalise)")

    def __post_init__(self):
        if not str(self.output).endswith(".npy"):
            raise ConfigError(f"--output must end in .npy, got {self.output!r}")
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {self.batch_size}")


def read_lines(path):
    """The lines of a UTF-8 text file (plain or .gz), without their line ends; DataError names a bad line."""
    opener = gzip.open if str(path).endswith(".gz") else open
    lines = []
    with opener(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as e:
                raise DataError(f"{path}, line {number}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
    if not lines:
        raise DataError(f"{path}: no lines to encode")
    return lines


def run(config: EncodeConfig):
    if not os.path.exists(config.input):
        raise FileNotFoundError(f"{config.input}: no such input file")
    model = from_preset(config.model, pooling=config.pooling, maxlen=config.maxlen)
    if not hasattr(model, "encode"):
        raise ConfigError(f"{config.model} holds a {type(model).__name__}, which has no sentence vectors to encode")
    texts = read_lines(config.input)
    vectors = model.encode(texts, batch_size=config.batch_size, show_progress_bar=True, long_text=config.long_text,
                           truncate_dim=config.truncate_dim)
    os.makedirs(os.path.dirname(os.path.abspath(config.output)), exist_ok=True)
    with atomic_file(config.output, "wb") as f:
        np.save(f, vectors.astype("float32"))
    log.info("wrote %s: %d x %d float32 (%s)", config.output, *vectors.shape, type(model).__name__)
    return {"output": config.output, "shape": list(vectors.shape)}
