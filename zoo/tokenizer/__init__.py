"""Tokenizers: ``Tokenizer`` (``wordpiece``: BERT's WordPiece in Python, with the ``tokenizers`` library; the padding
policy) and ``GraphTokenizer`` (``graph``: the same ids from TensorFlow ops, inside SavedModels; imported on first
use, as it loads TensorFlow). The names below are ``zoo.tokenizer``'s public API."""

import importlib as _importlib

from .wordpiece import (
    BUCKET,
    SPECIAL_TOKENS,
    Tokenizer,
    batch_length,
    chunk_pieces,
    is_cjk,
    is_punctuation,
    read_vocab,
    simplify_vocab,
    verify_tokenizer_files,
    wordpiece_vocab,
)

_GRAPH = ("GraphTokenizer", "char_tables", "tf_text", "MAX_CODE_POINT")


def __getattr__(name):
    if name in _GRAPH:
        return getattr(_importlib.import_module(".graph", __name__), name)
    raise AttributeError(f"module 'zoo.tokenizer' has no attribute {name!r}")


__all__ = ["BUCKET", "SPECIAL_TOKENS", "Tokenizer", "batch_length", "chunk_pieces", "is_cjk", "is_punctuation",
           "read_vocab", "simplify_vocab", "verify_tokenizer_files", "wordpiece_vocab", *_GRAPH]
