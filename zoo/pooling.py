"""Sentence pooling over BERT outputs: cls | mean | first-last-avg | pooler (Su's P1, P3, P4, P2), and
sentence-transformers' max | lasttoken | weightedmean | mean_sqrt_len; modes joined by "+" are concatenated."""

from __future__ import annotations

import keras
from keras import ops

from .choices import POOLINGS

FILL = -1e9  # what padded positions hold before a max (sentence-transformers' rule)


def masked_mean(x, padding_mask):
    """Mean over the time axis of [B, T, H] ``x``, padding (mask 0) excluded."""
    mask = ops.cast(padding_mask, x.dtype)[:, :, None]
    return ops.sum(x * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1.0)


def pooling_modes(mode):
    """The modes of a pooling name ("cls", or "cls+mean" for a concatenation); ValueError for an unknown one."""
    modes = tuple(str(mode).split("+"))
    for m in modes:
        if m not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS} (or several joined by '+'), got {mode!r}")
    return modes


@keras.saving.register_keras_serializable(package="zoo")
class Pooling(keras.layers.Layer):
    """Turns the backbone's output dict into one vector per sentence.

    cls: last-layer [CLS] state. mean: mean of last-layer states, padding excluded. first-last-avg: mean over
    tokens of (first transformer layer + last layer) / 2, padding excluded (needs a backbone built with
    ``output_hidden_states=True``). pooler: the backbone's pooler output (tanh, or linear for SimBERT).
    As sentence-transformers' ``Pooling`` computes them (padding excluded): max: the largest value of each
    dimension over real tokens. lasttoken: the last real token's state. weightedmean: a mean weighted by position,
    1 for the first real token, 2 for the second ... mean_sqrt_len: the sum over real tokens divided by the square
    root of their number. Several modes joined by "+" ("cls+mean") give their vectors concatenated in that order.
    """

    def __init__(self, mode="cls", **kwargs):
        super().__init__(**kwargs)
        self.modes = pooling_modes(mode)
        self.mode = mode

    def call(self, outputs, padding_mask):
        vectors = [self._pool(m, outputs, padding_mask) for m in self.modes]
        return vectors[0] if len(vectors) == 1 else ops.concatenate(vectors, axis=-1)

    def _pool(self, mode, outputs, padding_mask):
        if mode == "cls":
            return outputs["sequence_output"][:, 0, :]
        if mode == "pooler":
            return outputs["pooled_output"]
        if mode == "mean":
            return masked_mean(outputs["sequence_output"], padding_mask)
        if mode == "first-last-avg":
            hidden = outputs["hidden_states"]
            return masked_mean((hidden[1] + hidden[-1]) / 2.0, padding_mask)
        x = outputs["sequence_output"]
        real = ops.cast(padding_mask, "bool")
        mask = ops.cast(padding_mask, x.dtype)[:, :, None]
        if mode == "max":
            return ops.max(ops.where(real[:, :, None], x, ops.cast(FILL, x.dtype)), axis=1)
        positions = ops.arange(ops.shape(x)[1], dtype="int32")[None, :]  # [1, T]
        if mode == "lasttoken":  # the last position with mask 1 (zeros for a row without any)
            last = ops.max(ops.where(real, positions, -1), axis=1)
            chosen = ops.logical_and(ops.equal(positions, last[:, None]), real)
            return ops.sum(ops.where(chosen[:, :, None], x, ops.zeros_like(x)), axis=1)
        if mode == "weightedmean":  # weights 1, 2, ... from the first real token (any left padding skipped)
            first = ops.cast(ops.argmax(ops.cast(padding_mask, "int32"), axis=1), "int32")
            weights = ops.cast(positions + 1 - first[:, None], x.dtype)[:, :, None] * mask
            return ops.sum(x * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1e-9)
        # mean_sqrt_len
        return ops.sum(x * mask, axis=1) / ops.sqrt(ops.maximum(ops.sum(mask, axis=1), 1e-9))

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}
