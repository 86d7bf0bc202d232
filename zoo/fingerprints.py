"""A cheap fingerprint of a model's weights (a leaf: imports only numpy, and Keras when called): how zoo notices
that weights changed since a fused graph was written or a model was loaded from a preset."""

from __future__ import annotations

import hashlib
import weakref

import numpy as np

_WATCHED = weakref.WeakKeyDictionary()  # model -> the variables weights_fingerprint reads


def weights_fingerprint(model, watched=4):
    """A cheap digest of ``model``'s weights: ``watched`` of its small (1-D) trainable variables, spread from the
    first layer to the head, read whole. Training and ``set_weights`` change every one of them; after changing a
    few weights by hand, call ``forget``."""
    import keras

    if model not in _WATCHED:
        small = [w for w in model.trainable_weights if len(w.shape) == 1] or \
            [w for w in model.weights if len(w.shape) == 1] or list(model.weights)
        _WATCHED[model] = [small[i] for i in sorted(set(np.linspace(0, len(small) - 1, watched).astype(int)))] \
            if small else []
    h = hashlib.sha256()
    for w in _WATCHED[model]:
        value = w.value
        # a TensorFlow variable's own read is ~10x faster than convert_to_numpy's generic path
        h.update((value.numpy() if keras.backend.backend() == "tensorflow" else keras.ops.convert_to_numpy(w))
                 .tobytes())
    return h.hexdigest()
