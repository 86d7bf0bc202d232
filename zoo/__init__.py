"""zoo: Keras 3 model zoo for Chinese sentence similarity (SimBERT, CoSENT, cross-encoders, TaCL, ...).

One loading verb: ``Class.from_preset(path)`` (``BertBackbone``, ``Tokenizer``, ``SentenceEncoder``,
``CrossEncoder``, ``SimBERT``), or ``zoo.from_preset(path)`` for whatever task model a preset holds; ``path`` is a
preset name, a zoo preset or run folder, a ``.keras`` file, a Google TF1 folder or ckpt prefix, or a transformers
folder. Submodules (``zoo.data``, ``zoo.evaluation``, ``zoo.train``, ``zoo.retrieval``, ...) load on first use.
"""

__version__ = "0.2.0"

import importlib as _importlib

from .logs import quiet_backend_import as _quiet_backend_import

_quiet_backend_import()  # TF's C++ start-up lines (see zoo.logs); no environment variable is set

from .backbone import BertBackbone, load_backbone  # noqa: E402
from .checkpoints import save_google_checkpoint  # noqa: E402
from .errors import CheckpointError, ConfigError, DataError, ZooError  # noqa: E402
from .models import CrossEncoder, SentenceEncoder, SimBERT, Task, from_preset  # noqa: E402
from .paths import DEFAULT_ENCODER, DEFAULT_PRESET, available_presets  # noqa: E402
from .presets import load_saved as load_model  # noqa: E402  (alias kept for one release)
from .presets import save_preset  # noqa: E402
from .tokenizer import Tokenizer, load_tokenizer, simplify_vocab  # noqa: E402

_SUBMODULES = ("attention_masks", "backbone", "checkpoints", "cli", "config", "corpus", "data", "distribute",
               "evaluation", "export", "generation", "inference", "jobs", "losses", "models", "paths", "pooling",
               "presets", "pretraining_data", "retrieval", "serving", "tokenizer", "train", "vectors")


def __getattr__(name):
    if name in _SUBMODULES:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def load_preset(path):
    """(model, tokenizer) of a preset (alias kept for one release; use ``from_preset``)."""
    model = load_model(path)
    return model, getattr(model, "tokenizer", None) or Tokenizer.from_preset(path)


__all__ = ["BertBackbone", "CheckpointError", "ConfigError", "CrossEncoder", "DEFAULT_ENCODER", "DEFAULT_PRESET", "DataError",
           "SentenceEncoder", "SimBERT", "Task", "Tokenizer", "ZooError", "available_presets", "from_preset",
           "load_backbone", "load_model", "load_preset", "load_tokenizer", "save_google_checkpoint", "save_preset",
           "simplify_vocab"]
