"""Losses in keras.ops: CoSENT, in-batch softmax (SimBERT / SimCSE / Mirror-BERT), cosine MSE, triplet."""

from __future__ import annotations

import keras
from keras import ops

NEG_INF = -1e12


def l2_normalize(x, axis=-1):
    return x / ops.sqrt(ops.maximum(ops.sum(ops.square(x), axis=axis, keepdims=True), 1e-24))


def pair_cosine(embeddings):
    """Cosine of rows (0, 1), (2, 3), ... of [2B, d] embeddings -> [B]."""
    z = ops.reshape(l2_normalize(embeddings), (-1, 2, ops.shape(embeddings)[-1]))
    return ops.sum(z[:, 0] * z[:, 1], axis=-1)


def cosent_loss(labels, scores, scale=20.0, gap_weighted=False):
    """CoSENT: log(1 + sum over pairs (k, l) with label_k < label_l of exp(scale * (s_k - s_l))).

    ``scores`` [B] are cosines (bi-encoder) or raw scores (cross-encoder); ``labels`` [B] may be 0/1 or
    graded (STS-B 0-5). A batch with no ordered pair gives 0.
    ``gap_weighted`` weights each term by label_l - label_k (for soft targets in [0, 1], as DvBERT's annealed
    teacher scores): nearly tied targets barely count, and on 0/1 labels it is plain CoSENT.
    """
    labels = ops.cast(ops.reshape(labels, (-1,)), "float32")
    s = ops.cast(ops.reshape(scores, (-1,)), "float32") * scale
    diff = s[:, None] - s[None, :]  # diff[k, l] = s_k - s_l
    gap = labels[None, :] - labels[:, None]  # > 0: pair k should score lower than pair l
    if gap_weighted:
        diff = diff + ops.log(ops.maximum(gap, 1e-12))
    diff = ops.where(gap > 0, diff, NEG_INF)
    diff = ops.concatenate([ops.zeros((1,), "float32"), ops.reshape(diff, (-1,))], axis=0)
    return ops.logsumexp(diff)


def in_batch_softmax_loss(embeddings, partner, scale):
    """Normalise -> cosine matrix -> mask the diagonal -> scale -> softmax CE against ``partner`` indices.

    SimBERT: partner = i XOR 1, scale 30. SimCSE / Mirror-BERT: partner = (i + N) mod 2N, scale 1/tau.
    """
    z = l2_normalize(ops.cast(embeddings, "float32"))
    n = ops.shape(z)[0]
    sim = ops.matmul(z, ops.transpose(z)) * scale
    sim = ops.where(ops.eye(n, dtype="bool"), NEG_INF, sim)
    return ops.mean(keras.losses.sparse_categorical_crossentropy(partner, sim, from_logits=True))


def cosine_mse_loss(labels, scores):
    """Sentence-BERT regression: MSE between cosine and the label (already scaled to [0, 1])."""
    return ops.mean(ops.square(ops.cast(scores, "float32") - ops.cast(labels, "float32")))


def triplet_loss(anchor, positive, negative, margin=1.0):
    """max(|a - p| - |a - n| + margin, 0), Euclidean (Sentence-BERT; paper margin 1, library default 5)."""
    d_pos = ops.sqrt(ops.maximum(ops.sum(ops.square(anchor - positive), axis=-1), 1e-24))
    d_neg = ops.sqrt(ops.maximum(ops.sum(ops.square(anchor - negative), axis=-1), 1e-24))
    return ops.mean(ops.relu(d_pos - d_neg + margin))


@keras.saving.register_keras_serializable(package="zoo")
class CoSENTLoss(keras.losses.Loss):
    def __init__(self, scale=20.0, gap_weighted=False, name="cosent", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale, self.gap_weighted = scale, gap_weighted

    def call(self, y_true, y_pred):
        return cosent_loss(y_true, y_pred, self.scale, self.gap_weighted)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale, "gap_weighted": self.gap_weighted}


@keras.saving.register_keras_serializable(package="zoo")
class CosineMSELoss(keras.losses.Loss):
    def __init__(self, name="cosine_mse", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        return cosine_mse_loss(y_true, y_pred)


def soft_target_cross_entropy(targets, logits):
    """Cross-entropy of ``logits`` [B, C] against soft targets [B, T, C] of T teachers, summed over teachers
    (DvBERT with several teachers), mean over the batch."""
    logp = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    return ops.mean(-ops.sum(ops.cast(targets, "float32") * logp[:, None, :], axis=(1, 2)))


@keras.saving.register_keras_serializable(package="zoo")
class SoftTargetLoss(keras.losses.Loss):
    def __init__(self, name="soft_target_ce", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        return soft_target_cross_entropy(y_true, y_pred)
