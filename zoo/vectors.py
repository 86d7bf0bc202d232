"""Embedding arrays in numpy (a leaf): L2 normalisation, the one place for it outside the graph
(``zoo.losses.l2_normalize`` is the keras.ops one)."""

from __future__ import annotations

import numpy as np


def normalize_rows(x, eps=1e-12):
    """Rows of ``x`` (any shape [..., d]) divided by their L2 norm (at least ``eps``), as float32."""
    x = np.asarray(x, dtype="float32")
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)
