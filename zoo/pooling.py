"""Sentence pooling over BERT outputs: cls | mean | first-last-avg | pooler (Su's P1, P3, P4, P2)."""

from __future__ import annotations

import keras
from keras import ops

from .config import POOLINGS


def masked_mean(x, padding_mask):
    """Mean over the time axis of [B, T, H] ``x``, padding (mask 0) excluded."""
    mask = ops.cast(padding_mask, x.dtype)[:, :, None]
    return ops.sum(x * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1.0)


@keras.saving.register_keras_serializable(package="zoo")
class Pooling(keras.layers.Layer):
    """Turns the backbone's output dict into one vector per sentence.

    cls: last-layer [CLS] state. mean: mean of last-layer states, padding excluded. first-last-avg: mean over
    tokens of (first transformer layer + last layer) / 2, padding excluded (needs a backbone built with
    ``output_hidden_states=True``). pooler: the backbone's pooler output (tanh, or linear for SimBERT).
    """

    def __init__(self, mode="cls", **kwargs):
        super().__init__(**kwargs)
        if mode not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {mode!r}")
        self.mode = mode

    def call(self, outputs, padding_mask):
        if self.mode == "cls":
            return outputs["sequence_output"][:, 0, :]
        if self.mode == "pooler":
            return outputs["pooled_output"]
        if self.mode == "mean":
            return masked_mean(outputs["sequence_output"], padding_mask)
        hidden = outputs["hidden_states"]
        return masked_mean((hidden[1] + hidden[-1]) / 2.0, padding_mask)

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}
