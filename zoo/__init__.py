"""zoo: Keras 3 model zoo for Chinese sentence similarity (SimBERT, CoSENT, cross-encoders, TaCL, ...).

One loading verb, ``Class.from_preset(path)`` (``BertBackbone``, ``Tokenizer``, ``SentenceEncoder``,
``CrossEncoder``, ``SimBERT``), or ``zoo.from_preset(path)`` for whatever task model a preset holds, and one saving
verb, ``model.save_to_preset(folder)``. ``path`` is a preset name, a zoo preset or run folder, a ``.keras`` file,
a TF1 folder or ckpt prefix, a transformers folder, a sentence-transformers folder or a keras-hub preset, of BERT or
a relative (RoFormer, ALBERT, ELECTRA, ERNIE: ``zoo.backbones``).

``import zoo`` is light: TensorFlow and Keras load when a model, a loss or a job is first used (``zoo --help``
answers without them). zoo's Keras classes are registered with Keras as soon as Keras is imported, so
``keras.saving.load_model("model.keras")`` works after ``import zoo`` with no ``custom_objects``.
"""

__version__ = "0.3.0"

import importlib as _importlib
import sys as _sys

from . import _import_hooks
from .errors import CheckpointError, ConfigError, DataError, ZooError

# public name -> the module that defines it (imported on first use)
_PUBLIC = {
    "BertBackbone": "backbones", "RoFormerBackbone": "backbones", "AlbertBackbone": "backbones",
    "ElectraBackbone": "backbones", "ErnieBackbone": "backbones", "Tokenizer": "tokenizer", "simplify_vocab": "tokenizer",
    "SentenceEncoder": "models", "CrossEncoder": "models", "SimBERT": "models", "Task": "models",
    "TextPreprocessor": "models",
    "from_preset": "models", "save_google_checkpoint": "checkpoints", "DEFAULT_ENCODER": "paths",
    "DEFAULT_PRESET": "paths", "available_presets": "paths", "job": "cli",
}
# deprecated name -> (replacement, module, attribute): removed in zoo 0.4
_DEPRECATED = {
    "load_backbone": ("zoo.BertBackbone.from_preset", "backbones", "BertBackbone.from_preset"),
    "load_tokenizer": ("zoo.Tokenizer.from_preset", "tokenizer", "Tokenizer.from_preset"),
    "load_model": ("zoo.from_preset", "presets", "load_saved"),
    "save_preset": ("model.save_to_preset(folder)", "presets", "save_preset"),
    "load_preset": ("zoo.from_preset", None, None),
}
_SUBMODULES = ("backbones", "checkpoints", "choices", "cli", "config", "data", "distribute", "errors", "evaluation", "export",
               "fingerprints", "generation", "hardware", "heads", "inference", "jobs", "logs", "losses", "models", "paths",
               "pooling", "presets", "retrieval", "serving", "tokenizer", "train", "vectors")
# modules that moved in zoo 0.3 (the house in folders) -> where they are now; the old names import the new modules
# with a deprecation warning (removed in zoo 0.4)
MOVED = {"zoo.backbone": "zoo.backbones.bert", "zoo.rotary": "zoo.backbones.rotary",
         "zoo.attention_masks": "zoo.backbones.masks", "zoo.pair_files": "zoo.data.pair_files",
         "zoo.corpus": "zoo.data.corpus", "zoo.pretraining_data": "zoo.data.pretraining", "zoo.augment": "zoo.data.augment",
         "zoo.autotune": "zoo.inference.autotune", "zoo.onnx_graphs": "zoo.inference", "zoo.encoding": "zoo.inference",
         "zoo.fused_onnx": "zoo.inference.fused_onnx", "zoo.standard_onnx": "zoo.inference.standard_onnx",
         "zoo.openvino_engine": "zoo.inference.openvino_engine", "zoo.vector_index": "zoo.retrieval.local",
         "zoo.milvus_index": "zoo.retrieval.milvus", "zoo.lexical": "zoo.retrieval.lexical"}


def __getattr__(name):
    if name in _PUBLIC:
        value = getattr(_importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    elif name in _DEPRECATED:
        from .logs import warn_deprecated

        replacement, module, attribute = _DEPRECATED[name]
        warn_deprecated(f"zoo.{name}", replacement)
        if module is None:
            return _load_preset
        value = _importlib.import_module(f".{module}", __name__)
        for part in attribute.split("."):
            value = getattr(value, part)
        return value
    elif name in _SUBMODULES:
        return _importlib.import_module(f".{name}", __name__)
    elif f"zoo.{name}" in MOVED:
        return _importlib.import_module(f"zoo.{name}")  # warns (the alias finder below)
    else:
        raise AttributeError(f"module 'zoo' has no attribute {name!r}")
    setattr(_sys.modules[__name__], name, value)
    if "keras" in _sys.modules:
        _keras_registration.register_when_ready()
    return value


def _load_preset(path):
    """(model, tokenizer) of a saved model (the deprecated alias of the name above)."""
    from .presets import load_saved
    from .tokenizer.wordpiece import Tokenizer

    model = load_saved(path)
    return model, getattr(model, "tokenizer", None) or Tokenizer.from_preset(path)


def _warn_moved(old, new):
    from .logs import warn_deprecated

    warn_deprecated(old, new)


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC) | set(_SUBMODULES))


__all__ = ["AlbertBackbone", "BertBackbone", "CheckpointError", "ConfigError", "CrossEncoder", "DEFAULT_ENCODER",
           "DEFAULT_PRESET", "DataError", "ElectraBackbone", "ErnieBackbone", "RoFormerBackbone", "SentenceEncoder",
           "SimBERT", "Task", "TextPreprocessor", "Tokenizer", "ZooError", "available_presets", "from_preset", "job",
           "save_google_checkpoint", "simplify_vocab"]

if not any(isinstance(f, _import_hooks.ModuleAliases) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _import_hooks.ModuleAliases(MOVED, _warn_moved))

from . import _keras_registration  # noqa: E402,F401  (last: registers zoo's Keras classes once Keras is imported)
