"""Cross-encoders (interaction-based matching): both texts in one sequence, a score from [CLS]."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from ..utils import batch_length, batch_starts
from .bi_encoder import TokenizerAssetsMixin, backbone_inputs

HEADS = ("softmax", "cosent")


@keras.saving.register_keras_serializable(package="zoo")
class CrossEncoder(TokenizerAssetsMixin, keras.Model):
    """``[CLS] a [SEP] b [SEP]`` -> last-layer [CLS] -> a score.

    head "softmax": Dense(2), trained with cross-entropy; the score is P(similar).
    head "cosent": Dense(1), trained with the CoSENT ranking loss on raw scores (CoSENT 三); the score is raw.
    ``zero_segments=True`` reproduces bojone's interact.py, which sets every segment id to 0 (default: 1 for b).

    >>> ce = zoo.CrossEncoder.from_checkpoint("chinese_L-12_H-768_A-12/")
    >>> ce.predict([("今天天气不错", "今天天气很好"), ("你好", "再见")])
    """

    def __init__(self, backbone, tokenizer=None, head="softmax", maxlen=128, zero_segments=False, **kwargs):
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        inputs = backbone_inputs()
        cls = backbone(inputs, first_token_only=True)["sequence_output"][:, 0, :]
        units = 2 if head == "softmax" else 1
        logits = keras.layers.Dense(units, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
                                    name="classifier")(cls)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        backbone.get_layer("pooler_dense").trainable = False  # not on the path to the output
        self.backbone, self.tokenizer, self.head = backbone, tokenizer, head
        self.maxlen, self.zero_segments = maxlen, zero_segments

    @classmethod
    def from_checkpoint(cls, path, head="softmax", maxlen=128, zero_segments=False, **backbone_kwargs):
        from ..checkpoints import load_backbone
        from ..tokenizer import load_tokenizer

        return cls(load_backbone(path, **backbone_kwargs), load_tokenizer(path), head=head, maxlen=maxlen,
                   zero_segments=zero_segments)

    def get_config(self):
        return self._config(head=self.head, maxlen=self.maxlen, zero_segments=self.zero_segments)

    def encode_pairs(self, texts_a, texts_b, maxlen=None):
        """(token_ids, segment_ids) rows for pairs (bert4keras truncation), segments zeroed if configured."""
        maxlen = maxlen or self.maxlen
        pieces_a, pieces_b = self.tokenizer.piece_ids(texts_a), self.tokenizer.piece_ids(texts_b)
        rows = [self.tokenizer._assemble(a, b, maxlen) for a, b in zip(pieces_a, pieces_b)]
        if self.zero_segments:
            rows = [(ids, [0] * len(ids)) for ids, _ in rows]
        return rows

    def predict(self, pairs, batch_size=64, show_progress_bar=None, **kwargs):
        """Scores for (text_a, text_b) pairs -> [n] float32: P(similar) for softmax, the raw score for cosent.

        Pairs are batched by length; results come back in input order. Empty texts raise ValueError.
        """
        if kwargs or isinstance(pairs, dict):  # Keras-style predict on tensors
            return super().predict(pairs, batch_size=batch_size, **kwargs)
        pairs = list(pairs)
        for i, pair in enumerate(pairs):
            if len(pair) != 2 or not all(isinstance(t, str) and t.strip() for t in pair):
                raise ValueError(f"pair {i} must be two non-empty texts, got {pair!r:.80}")
        out = np.zeros(len(pairs), dtype="float32")
        if not pairs:
            return out
        rows = self.encode_pairs([a for a, _ in pairs], [b for _, b in pairs])
        order = np.argsort([-len(r[0]) for r in rows], kind="stable")
        if not self.compiled and not getattr(self, "_jit_chosen", False):
            self.jit_compile = keras.backend.backend() != "torch"
            self._jit_chosen = True
        for start in batch_starts(len(rows), batch_size, "predict", show_progress_bar, unit="pair"):
            index = order[start:start + batch_size]
            batch = [rows[i] for i in index]
            logits = np.asarray(ops.convert_to_numpy(self.predict_on_batch(
                self.tokenizer.pad(batch, pad_to=batch_length(batch, self.maxlen)))), dtype="float32")
            out[index] = _softmax(logits)[:, 1] if self.head == "softmax" else logits[:, 0]
        return out


def _softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
