"""Embedding arrays in numpy (a leaf): L2 normalisation, the one place for it outside the graph
(``zoo.losses.l2_normalize`` is the keras.ops one)."""

from __future__ import annotations

import numpy as np


def normalize_rows(x, eps=1e-12):
    """Rows of ``x`` (any shape [..., d]) divided by their L2 norm (at least ``eps``), as float32."""
    x = np.asarray(x, dtype="float32")
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")  # sentence-transformers' similarity_fn_name


def similarity(a, b, function="cosine", pairwise=False):
    """Scores between embeddings ``a`` [n, d] and ``b`` [m, d] (a matrix [n, m], or with ``pairwise`` the [n] scores
    of a[i] with b[i]), as sentence-transformers' ``similarity_fn_name``: cosine, dot, euclidean (minus the L2
    distance) or manhattan (minus the L1 distance): higher is more similar for all four."""
    a, b = np.atleast_2d(np.asarray(a, "float32")), np.atleast_2d(np.asarray(b, "float32"))
    if function == "cosine":
        a, b = normalize_rows(a), normalize_rows(b)
    if function in ("cosine", "dot"):
        return np.sum(a * b, axis=-1) if pairwise else a @ b.T
    if function not in SIMILARITY_FUNCTIONS:
        raise ValueError(f"similarity function must be one of {SIMILARITY_FUNCTIONS}, got {function!r}")
    difference = a - b if pairwise else a[:, None, :] - b[None, :, :]
    return -(np.linalg.norm(difference, axis=-1) if function == "euclidean" else np.abs(difference).sum(-1))


EMBEDDING_DTYPES = ("float32", "float16", "int8", "binary")


def int8_scales(sample):
    """Per-dimension symmetric int8 scales from a sample of (normalised) embeddings: 127 / max |x_d|."""
    return (127.0 / np.maximum(np.abs(np.asarray(sample, dtype="float32")).max(axis=0), 1e-6)).astype("float32")


def quantize_embeddings(x, dtype, scales=None):
    """Store embeddings as ``dtype``: float32, float16, int8 (``round(x * scales)``, clipped to +-127; scales from
    ``int8_scales``) or binary (the signs packed 8 per byte, uint8 [n, ceil(d / 8)])."""
    x = np.asarray(x, dtype="float32")
    if dtype in ("float32", "float16"):
        return x.astype(dtype)
    if dtype == "int8":
        if scales is None:
            raise ValueError("int8 embeddings need per-dimension scales (int8_scales of a sample)")
        return np.clip(np.rint(x * scales), -127, 127).astype("int8")
    if dtype == "binary":
        return np.packbits(x > 0, axis=-1)
    raise ValueError(f"embedding dtype must be one of {EMBEDDING_DTYPES}, got {dtype!r}")


def stored_width(dim, dtype):
    """Columns of a stored [n, dim] embedding array: dim, or ceil(dim / 8) bytes for binary."""
    return -(-dim // 8) if dtype == "binary" else dim


def dequantize_int8(q, scales):
    """Float approximations of int8 embeddings (``q / scales``)."""
    return np.asarray(q, dtype="float32") / scales


def mean_of_windows(vectors, owner, weights, n):
    """Vectors of a text's windows [W, d] -> [n, d]: each text's token-weighted mean of its L2-normalised windows
    (``owner``: the text of each window, ``weights``: its token count); ``encode(long_text="chunk")``."""
    vectors = normalize_rows(np.asarray(vectors, dtype="float32")).astype("float64")
    sums = np.zeros((n, vectors.shape[1]), dtype="float64")
    np.add.at(sums, owner, vectors * weights[:, None])
    return (sums / np.bincount(owner, weights, minlength=n)[:, None]).astype("float32")
