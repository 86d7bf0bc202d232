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
    distance) or manhattan (minus the L1 distance): higher is more similar for all four.

    :param a: embeddings [n, d].
    :param b: embeddings [m, d].
    :param function: "cosine", "dot", "euclidean" or "manhattan".
    :param pairwise: score a[i] with b[i] only (n == m).
    """
    a, b = np.atleast_2d(np.asarray(a, "float32")), np.atleast_2d(np.asarray(b, "float32"))
    if function == "cosine":
        a, b = normalize_rows(a), normalize_rows(b)
    if function in ("cosine", "dot"):
        return np.sum(a * b, axis=-1) if pairwise else a @ b.T
    if function not in SIMILARITY_FUNCTIONS:
        raise ValueError(f"similarity function must be one of {SIMILARITY_FUNCTIONS}, got {function!r}")
    difference = a - b if pairwise else a[:, None, :] - b[None, :, :]
    return -(np.linalg.norm(difference, axis=-1) if function == "euclidean" else np.abs(difference).sum(-1))


OUTPUT_PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")  # sentence-transformers' encode(precision=)
EMBEDDING_DTYPES = ("float32", "float16") + OUTPUT_PRECISIONS[1:]  # ``zoo encode --dtype``: the same names, and float16
STORED_DTYPES = {"float32": "float32", "float16": "float16", "int8": "int8", "uint8": "uint8", "binary": "int8",
                 "ubinary": "uint8"}  # the numpy dtype each is stored as


def embedding_ranges(sample):
    """[2, d]: the per-dimension minimum and maximum of a sample of embeddings [n, d] (sentence-transformers'
    ``ranges``, the buckets of int8 and uint8)."""
    sample = np.atleast_2d(np.asarray(sample, dtype="float32"))
    return np.stack([sample.min(axis=0), sample.max(axis=0)]).astype("float32")


def quantize_embeddings(x, precision, ranges=None):
    """Embeddings [n, d] as ``precision``, with sentence-transformers' ``quantize_embeddings`` meanings: float32,
    float16; uint8 (each dimension's [min, max] of ``ranges`` cut into 256 buckets) and int8 (the same minus 128);
    ubinary (the signs, 8 per byte, uint8 [n, ceil(d / 8)]) and binary (ubinary minus 128, as int8).

    Equal to sentence-transformers' (6.x) given the same ``ranges``; values outside them go to the end buckets.
    Unlike it, ``ranges`` is required for int8/uint8: sentence-transformers takes them from the batch by default,
    zoo never does (a text's vector must not depend on its neighbours; ``encode`` uses the model's own).

    :param x: float embeddings [n, d].
    :param precision: "float32", "float16", "uint8", "int8", "ubinary" or "binary".
    :param ranges: [2, d] per-dimension minima and maxima (int8/uint8 only).
    """
    x = np.asarray(x, dtype="float32")
    if precision in ("float32", "float16"):
        return x.astype(precision)
    if precision in ("int8", "uint8"):
        if ranges is None:
            raise ValueError(f"{precision} embeddings need ranges: [2, d] per-dimension minima and maxima "
                             f"(zoo.vectors.embedding_ranges of a sample)")
        ranges = np.asarray(ranges, dtype="float32")
        if ranges.shape != (2, x.shape[-1]):
            raise ValueError(f"ranges must have shape (2, {x.shape[-1]}), got {ranges.shape}")
        steps = (ranges[1] - ranges[0]) / 255
        buckets = np.clip(np.floor((x - ranges[0]) / np.where(steps == 0, 1, steps)), 0, 255)
        return buckets.astype("uint8") if precision == "uint8" else (buckets - 128).astype("int8")
    if precision in ("binary", "ubinary"):
        bits = np.packbits(x > 0, axis=-1)
        return bits if precision == "ubinary" else (bits.astype("int16") - 128).astype("int8")
    raise ValueError(f"precision must be one of {EMBEDDING_DTYPES}, got {precision!r}")


def dequantize_embeddings(q, precision, ranges):
    """Float approximations of int8 or uint8 embeddings: each bucket's middle (``quantize_embeddings``'s inverse)."""
    ranges = np.asarray(ranges, dtype="float32")
    buckets = np.asarray(q, dtype="float32") + (128 if precision == "int8" else 0)
    return ranges[0] + (buckets + 0.5) * (ranges[1] - ranges[0]) / 255


def stored_width(dim, dtype):
    """Columns of a stored [n, dim] embedding array: dim, or ceil(dim / 8) bytes for binary and ubinary."""
    return -(-dim // 8) if dtype in ("binary", "ubinary") else dim


def mean_of_windows(vectors, owner, weights, n):
    """Vectors of a text's windows [W, d] -> [n, d]: each text's token-weighted mean of its L2-normalised windows
    (``owner``: the text of each window, ``weights``: its token count); ``encode(long_text="chunk")``."""
    vectors = normalize_rows(np.asarray(vectors, dtype="float32")).astype("float64")
    sums = np.zeros((n, vectors.shape[1]), dtype="float64")
    np.add.at(sums, owner, vectors * weights[:, None])
    return (sums / np.bincount(owner, weights, minlength=n)[:, None]).astype("float32")
