"""zoo: Keras 3 model zoo for Chinese sentence similarity (SimBERT, CoSENT, cross-encoders, TaCL, ...)."""

__version__ = "0.1.0"

import os as _os

_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's CUDA-stub chatter on CPU machines

from .backbone import BertBackbone  # noqa: E402
from .checkpoints import CheckpointError, load_backbone, save_google_checkpoint  # noqa: E402
from .presets import DEFAULT_PRESET, load_model, load_preset, save_preset  # noqa: E402
from .tokenizer import Tokenizer, load_tokenizer, simplify_vocab  # noqa: E402
from .models.bi_encoder import SentenceEncoder  # noqa: E402
from .models.simbert import SimBERT  # noqa: E402
from .models.cross_encoder import CrossEncoder  # noqa: E402

__all__ = ["BertBackbone", "CheckpointError", "CrossEncoder", "SentenceEncoder", "SimBERT", "DEFAULT_PRESET", "Tokenizer", "load_backbone", "load_model",
           "load_preset", "load_tokenizer", "save_google_checkpoint", "save_preset", "simplify_vocab"]
