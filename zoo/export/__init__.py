"""Exports for serving: a TensorFlow SavedModel that takes raw strings (``saved_model``; its tokenizer is
``zoo.tokenizer.GraphTokenizer``), the fused ONNX Runtime graph alone or as a folder ``zoo serve`` serves
(``onnx``), and a transformers folder (``zoo.checkpoints.save_transformers``, the transformers format's writer);
``exportable``: what is exported, and TF Serving's version folders. Each module is imported on first use (the
SavedModel writer loads TensorFlow). The names below are ``zoo.export``'s public API."""

import importlib as _importlib

_NAMES = {
    "saved_model": ("SIGNATURES", "export_saved_model", "keras_precision", "quantized_copy"),
    "onnx": ("ONNX_FILE", "export_onnx", "export_onnx_folder"),
    "exportable": ("described", "load_exportable", "serving_spec", "version_path"),
}
_ELSEWHERE = {"GraphTokenizer": "zoo.tokenizer", "char_tables": "zoo.tokenizer", "tf_text": "zoo.tokenizer",
              "MAX_CODE_POINT": "zoo.tokenizer", "save_transformers": "zoo.checkpoints",
              "ID_INPUTS": "zoo.inference.sessions"}


def __getattr__(name):
    for module, names in _NAMES.items():
        if name in names:
            return getattr(_importlib.import_module(f".{module}", __name__), name)
    if name in _ELSEWHERE:
        return getattr(_importlib.import_module(_ELSEWHERE[name]), name)
    if name in _NAMES:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'zoo.export' has no attribute {name!r}")


__all__ = sorted({n for names in _NAMES.values() for n in names} | set(_ELSEWHERE))
