"""Attention masks for the backbone's ``attention_mask`` input ([batch, query, key], 1 = may attend)."""

from __future__ import annotations

import keras
from keras import ops


def unilm_mask(segment_ids):
    """UniLM seq2seq mask (bert4keras ``UniLM_Mask``): key j is visible to query i iff cumsum(s)[j] <= cumsum(s)[i].

    Segment 0 (``[CLS] source [SEP]``) attends bidirectionally within itself and never to the target; target
    token k attends to the whole source and to target tokens 1..k. Padding keys are removed by the padding mask.
    """
    c = ops.cumsum(ops.cast(segment_ids, "int32"), axis=1)
    return ops.cast(c[:, None, :] <= c[:, :, None], "int32")


def causal_mask(segment_ids):
    """Plain left-to-right LM mask (bert4keras ``LM_Mask``), shaped like ``unilm_mask`` for a batch."""
    length = ops.shape(segment_ids)[1]
    idx = ops.arange(length)
    mask = ops.cast(idx[None, :] <= idx[:, None], "int32")
    return ops.broadcast_to(mask[None], (ops.shape(segment_ids)[0], length, length))


@keras.saving.register_keras_serializable(package="zoo")
class AttentionMask(keras.layers.Layer):
    """Builds a [B, T, T] mask from segment ids inside a model: kind "unilm" or "causal"."""

    def __init__(self, kind="unilm", **kwargs):
        super().__init__(**kwargs)
        if kind not in ("unilm", "causal"):
            raise ValueError(f"mask kind must be 'unilm' or 'causal', got {kind!r}")
        self.kind = kind

    def call(self, segment_ids):
        return unilm_mask(segment_ids) if self.kind == "unilm" else causal_mask(segment_ids)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], input_shape[1])

    def get_config(self):
        return {**super().get_config(), "kind": self.kind}
