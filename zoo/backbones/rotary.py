"""Rotary position embeddings (RoFormer, Su et al. 2021), as RoFormer and RoFormer-Sim use them.

Each pair of a head's features (2i, 2i+1) at position p is rotated by the angle p / 10000^(2i/d): queries and keys
(and, with ``rotary_value``, values) carry their positions, so attention scores depend on relative positions. The
sine/cosine table is computed once in float64 (as transformers' ``RoFormerSinusoidalPositionalEmbedding``) and
gathered by position, so the angles of long positions keep float32's precision.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops
from keras_hub.layers import TransformerEncoder


def rotary_table(positions, head_dim):
    """(sin, cos) float32 arrays [positions, head_dim // 2]: angle p / 10000^(2i / head_dim)."""
    inv_freq = np.power(10000.0, -np.arange(0, head_dim, 2, dtype="float64") / head_dim)
    angles = np.arange(positions, dtype="float64")[:, None] * inv_freq[None, :]
    return np.sin(angles).astype("float32"), np.cos(angles).astype("float32")


def rotate(x, sin, cos, positions):
    """Rotate the feature pairs of ``x`` [B, T, heads, d] to ``positions`` ([T], or [B, T] per row)."""
    sin, cos = ops.take(sin, positions, axis=0), ops.take(cos, positions, axis=0)  # [T, d/2] or [B, T, d/2]
    if len(sin.shape) == 2:
        sin, cos = sin[None], cos[None]
    sin, cos = ops.cast(sin[:, :, None, :], x.dtype), ops.cast(cos[:, :, None, :], x.dtype)
    shape = ops.shape(x)
    pairs = ops.reshape(x, (shape[0], shape[1], shape[2], x.shape[-1] // 2, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = ops.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
    return ops.reshape(rotated, shape)


@keras.saving.register_keras_serializable(package="zoo")
class RotaryAttention(keras.layers.MultiHeadAttention):
    """Multi-head attention whose queries and keys (and values, with ``rotary_value``) are rotated to their
    positions 0..T-1 before the scores (``rotate``); weights and names as Keras' ``MultiHeadAttention``."""

    def __init__(self, max_sequence_length=512, rotary_value=False, **kwargs):
        super().__init__(**kwargs)
        self.max_sequence_length = max_sequence_length
        self.rotary_value = rotary_value
        self._sin, self._cos = rotary_table(max_sequence_length, self.key_dim)

    def rotate(self, x, positions):
        """``x`` [B, T, heads, d] rotated to ``positions`` ([T] or [B, T])."""
        return rotate(x, self._sin, self._cos, positions)

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False, **kwargs):
        query = self.rotate(query, ops.arange(ops.shape(query)[1]))
        key_positions = ops.arange(ops.shape(key)[1])
        key = self.rotate(key, key_positions)
        if self.rotary_value:
            value = self.rotate(value, key_positions)
        return super()._compute_attention(query, key, value, attention_mask, training, return_attention_scores,
                                          **kwargs)

    def get_config(self):
        return {**super().get_config(), "max_sequence_length": self.max_sequence_length,
                "rotary_value": self.rotary_value}


def clone(initializer):
    return initializer.__class__.from_config(initializer.get_config())


@keras.saving.register_keras_serializable(package="zoo")
class RotaryTransformerEncoder(TransformerEncoder):
    """keras-hub's ``TransformerEncoder`` (post-LayerNorm, the weights and names zoo maps) with ``RotaryAttention``
    in place of its self-attention."""

    def __init__(self, max_sequence_length=512, rotary_value=False, **kwargs):
        super().__init__(**kwargs)
        self.max_sequence_length = max_sequence_length
        self.rotary_value = rotary_value

    def build(self, inputs_shape):
        super().build(inputs_shape)
        self._layers.remove(self._self_attention_layer)  # the plain attention keras-hub built is replaced
        attention = RotaryAttention(
            max_sequence_length=self.max_sequence_length, rotary_value=self.rotary_value, num_heads=self.num_heads,
            key_dim=int(inputs_shape[-1] // self.num_heads), dropout=self.dropout,
            kernel_initializer=clone(self.kernel_initializer), bias_initializer=clone(self.bias_initializer),
            dtype=self.dtype_policy, name="self_attention_layer")
        attention.build(query_shape=inputs_shape, value_shape=inputs_shape)
        self._self_attention_layer = attention

    def get_config(self):
        return {**super().get_config(), "max_sequence_length": self.max_sequence_length,
                "rotary_value": self.rotary_value}
