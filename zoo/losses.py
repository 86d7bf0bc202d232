"""Every loss of zoo, in keras.ops (one home): CoSENT, in-batch softmax (SimBERT / SimCSE / Mirror-BERT), in-batch
ranking of pairs (multiple negatives ranking, with CoSENT), cosine MSE,
triplet, soft-target cross-entropy (DvBERT), the joint SimBERT loss, and the pretraining losses (MLM, TaCL, TACO).

Functions compute a loss from tensors; the ``keras.losses.Loss`` / layer classes wrap them for ``compile``. Under
data-parallel training every loss is the loss of the global batch: the classes of the losses that couple a batch's
examples gather the replicas' shards first (``zoo.distribute``; a no-op on one device and on JAX)."""

from __future__ import annotations

import keras
from keras import ops

from .distribute import gather_batch, global_sum, replica_share

NEG_INF = -1e12


def l2_normalize(x, axis=-1):
    """x / max(||x||, 1e-12) along ``axis`` (the in-graph one; ``zoo.vectors.normalize_rows`` is numpy's)."""
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


def multiple_negatives_ranking_loss(embeddings, anchor_weights, scale=20.0):
    """In-batch ranking (multiple negatives ranking loss, InfoNCE with in-batch negatives) on interleaved pairs.

    ``embeddings`` [2B, d]: rows (a_1, b_1, a_2, b_2, ...); ``anchor_weights`` [B]: 1 where (a_i, b_i) is a
    paraphrase (a_i is then an anchor with positive b_i), 0 elsewhere. With c_ij = cos(a_i, b_j)::

        loss = sum_i w_i * (log sum_j exp(scale * c_ij) - scale * c_ii) / max(sum_i w_i, 1)

    every b_j of the batch is a candidate for every anchor, so the other pairs' b's are its negatives, and a pair
    (a_k, b_k) labelled as non-paraphrase contributes its b_k as one more negative (a hard one when b_k is a
    rewrite of a_i). A batch without anchors gives 0. Reference: Henderson et al. 2017, "Efficient Natural
    Language Response Suggestion for Smart Reply" (sentence-transformers' MultipleNegativesRankingLoss, scale 20).
    """
    z = l2_normalize(ops.cast(embeddings, "float32"))
    z = ops.reshape(z, (-1, 2, ops.shape(z)[-1]))
    logits = ops.matmul(z[:, 0], ops.transpose(z[:, 1])) * scale  # [B, B]: anchors x candidates
    ce = keras.losses.sparse_categorical_crossentropy(ops.arange(ops.shape(logits)[0]), logits, from_logits=True)
    w = ops.cast(ops.reshape(anchor_weights, (-1,)), "float32")
    return ops.sum(ce * w) / ops.maximum(ops.sum(w), 1.0)


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
    """CoSENT, the ranking loss of pair scores: every pair labelled more similar must score higher.

    ``loss = log(1 + sum over (k, l) with y_k < y_l of exp(scale * (s_k - s_l)))`` (``cosent_loss``).

    Inputs: ``y_pred`` [B] pair scores, the cosines of ``zoo.models.build_pair_trainer`` (bi-encoders) or a
    cross-encoder's raw scores (``scale=1``); ``y_true`` [B] labels, 0/1 or graded (STS-B 0-5: only their order
    counts), or DvBERT's soft targets with ``gap_weighted=True``. Reference: Su Jianlin, "CoSENT (一): a more
    effective sentence-vector scheme than Sentence-BERT" (2022, kexue.fm/archives/8847); scale 20 as there.

    ```python
    trainer = zoo.models.build_pair_trainer(encoder)          # pairs -> their cosines
    trainer.compile(optimizer="adam", loss=zoo.losses.CoSENTLoss())
    ```

    :param scale: multiplies the score differences (20 for cosines; 1 for a cross-encoder's raw scores).
    :param gap_weighted: weight each pair of pairs by their label gap (DvBERT's soft targets).
    :param name: the Keras name.
    :param kwargs: Keras ``Loss`` arguments.
    """

    def __init__(self, scale=20.0, gap_weighted=False, name="cosent", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale, self.gap_weighted = scale, gap_weighted

    def call(self, y_true, y_pred):
        return replica_share(cosent_loss(gather_batch(y_true), gather_batch(y_pred), self.scale, self.gap_weighted))

    def get_config(self):
        return {**super().get_config(), "scale": self.scale, "gap_weighted": self.gap_weighted}


@keras.saving.register_keras_serializable(package="zoo")
class CoSENTInBatchLoss(keras.losses.Loss):
    """CoSENT on the pair cosines plus ``weight`` x the in-batch ranking loss:
    ``loss = cosent(y, cos(a_i, b_i)) + weight * multiple_negatives_ranking(a, b, anchors)``.

    Inputs: ``y_pred`` the [2B, d] embeddings of interleaved pairs (a_1, b_1, ...; ``build_trainer(...,
    in_batch=True)``); ``y_true`` [B, 2]: each pair's CoSENT label (0/1, or graded) and its anchor flag (1: a
    paraphrase, whose a ranks its b above the batch's other b's, word-order rewrites included). References: CoSENT
    (``CoSENTLoss``); Henderson et al. 2017 (``multiple_negatives_ranking_loss``).

    :param weight: the in-batch ranking loss's weight.
    :param scale: CoSENT's scale.
    :param in_batch_scale: the ranking loss's scale (multiplies the cosines).
    :param name: the Keras name.
    :param kwargs: Keras ``Loss`` arguments.
    """

    def __init__(self, weight=1.0, scale=20.0, in_batch_scale=20.0, name="cosent_in_batch", **kwargs):
        super().__init__(name=name, **kwargs)
        self.weight, self.scale, self.in_batch_scale = weight, scale, in_batch_scale

    def call(self, y_true, y_pred):
        y_true, y_pred = gather_batch(y_true), gather_batch(y_pred)
        loss = cosent_loss(y_true[:, 0], pair_cosine(y_pred), self.scale)
        if self.weight:
            loss = loss + self.weight * multiple_negatives_ranking_loss(y_pred, y_true[:, 1], self.in_batch_scale)
        return replica_share(loss)

    def get_config(self):
        return {**super().get_config(), "weight": self.weight, "scale": self.scale,
                "in_batch_scale": self.in_batch_scale}


@keras.saving.register_keras_serializable(package="zoo")
class MatryoshkaLoss(keras.losses.Loss):
    """Matryoshka training: ``loss = sum_i inner(y, s_i)``, a pair loss (e.g. CoSENT) summed over nested dimensions.

    Inputs: ``y_pred`` [B, k], the pair cosines computed on the first d_1 < ... < d_k dimensions of the embeddings
    (``zoo.models.build_pair_trainer(..., matryoshka_dims=...)``); ``y_true`` the inner loss's labels. Truncated
    vectors stay useful. Reference: Kusupati et al. 2022, "Matryoshka Representation Learning".

    :param loss: the inner pair loss (a Keras loss, its name or its config).
    :param name: the Keras name.
    :param kwargs: Keras ``Loss`` arguments.
    """

    def __init__(self, loss, name="matryoshka", **kwargs):
        super().__init__(name=name, **kwargs)
        self.loss = keras.losses.get(loss) if isinstance(loss, (str, dict)) else loss

    def call(self, y_true, y_pred):
        return sum(self.loss.call(y_true, y_pred[:, i]) for i in range(y_pred.shape[-1]))

    def get_config(self):
        return {**super().get_config(), "loss": keras.saving.serialize_keras_object(self.loss)}


@keras.saving.register_keras_serializable(package="zoo")
class CosineMSELoss(keras.losses.Loss):
    """Sentence-BERT's regression objective: ``mean((cos(u, v) - y)^2)``.

    Inputs: ``y_pred`` [B] pair cosines (``build_pair_trainer(..., "cosine_mse")``); ``y_true`` [B] similarity
    labels scaled to [0, 1] (STS-B's 0-5 divided by 5; ``objective_labels``). Reference: Reimers and Gurevych 2019,
    "Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks" (CosineSimilarityLoss).

    :param name: the Keras name.
    :param kwargs: Keras ``Loss`` arguments.
    """

    def __init__(self, name="cosine_mse", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        return replica_share(cosine_mse_loss(y_true, y_pred))


def soft_target_cross_entropy(targets, logits):
    """Cross-entropy of ``logits`` [B, C] against soft targets [B, T, C] of T teachers, summed over teachers
    (DvBERT with several teachers), mean over the batch."""
    logp = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    return ops.mean(-ops.sum(ops.cast(targets, "float32") * logp[:, None, :], axis=(1, 2)))


@keras.saving.register_keras_serializable(package="zoo")
class SoftTargetLoss(keras.losses.Loss):
    """DvBERT's distillation loss: cross-entropy of the student's classifier against each teacher's annealed
    target, summed over teachers (``soft_target_cross_entropy``):
    ``loss = mean_b sum_t sum_c -q_btc log softmax(z_b)_c`` with ``q = lambda onehot(gold) + (1 - lambda) p_teacher``.

    Inputs: ``y_pred`` [B, C] logits of the SBERT head; ``y_true`` [B, T, C] targets of T teachers
    (``zoo.train.DistillBatches``). Reference: Cheng 2021, "Dual-View Distilled BERT for Sentence Embedding".

    :param name: the Keras name.
    :param kwargs: Keras ``Loss`` arguments.
    """

    def __init__(self, name="soft_target_ce", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        return replica_share(soft_target_cross_entropy(y_true, y_pred))


# ---------------------------------------------------------------------------------- SimBERT
def simbert_loss(token_ids, segment_ids, mlm_logits, pooled, scale=30.0):
    """Seq2seq CE on target tokens (position t predicts t+1 where token t+1 is in segment 1) + in-batch
    similarity CE over L2-normalised pooled vectors with partner ``i XOR 1`` (rows come in both orders)."""
    y_true = token_ids[:, 1:]
    y_mask = ops.cast(segment_ids[:, 1:], "float32")
    ce = keras.losses.sparse_categorical_crossentropy(y_true, ops.cast(mlm_logits[:, :-1], "float32"),
                                                      from_logits=True)
    gen = global_sum(ops.sum(ce * y_mask)) / ops.maximum(global_sum(ops.sum(y_mask)), 1.0)
    pooled = gather_batch(pooled)
    partner = ops.arange(ops.shape(pooled)[0]) ^ 1
    return gen + in_batch_softmax_loss(pooled, partner, scale)


@keras.saving.register_keras_serializable(package="zoo")
class SimBERTLoss(keras.layers.Layer):
    """SimBERT's joint loss as a layer (the loss model's output, ``simbert_loss``): seq2seq cross-entropy on the
    target segment's tokens (UniLM mask) plus the in-batch softmax over the scaled cosines of the pooled vectors,
    each row's partner being the same pair in the other order (``i XOR 1``).

    Inputs: the batch's ``token_ids`` and ``segment_ids`` [2B, T] (rows ``[CLS] a [SEP] b [SEP]`` and
    ``[CLS] b [SEP] a [SEP]`` side by side, ``zoo.train.SimBERTBatches``), the MLM logits [2B, T, V] and the pooled
    vectors [2B, d]; no labels. Reference: Su Jianlin, "SimBERT: integrating retrieval and generation"
    (2020, kexue.fm/archives/7427), scale 30.

    :param scale: multiplies the cosines of the in-batch softmax.
    :param kwargs: Keras ``Layer`` arguments.
    """

    def __init__(self, scale=30.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale

    def call(self, token_ids, segment_ids, mlm_logits, pooled):
        return ops.reshape(simbert_loss(token_ids, segment_ids, mlm_logits, pooled, self.scale), (1,))

    def compute_output_shape(self, *input_shapes):
        return (1,)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


def passthrough_loss(y_true, y_pred):
    """For models whose output already is their loss (SimBERT): use the output."""
    return replica_share(ops.mean(y_pred))


def first_output_loss(y_true, y_pred):
    """For models whose output is [loss, metric, ...] (pretraining): use the first value."""
    return replica_share(y_pred[0])


@keras.saving.register_keras_serializable(package="zoo")
class InBatchSoftmaxLoss(keras.losses.Loss):
    """SimCSE / Mirror-BERT InfoNCE: ``loss = mean_i -log softmax_j(cos(z_i, z_j) / tau)[partner(i)]`` over the batch,
    the diagonal masked, where rows i and (i + N) mod 2N of the [2N, d] embeddings are the two views of a sentence.

    Inputs: ``y_pred`` [2N, d] embeddings (``zoo.train.MirrorBatches``: N originals, then N augmented copies);
    ``y_true`` unused (no labels). ``matryoshka_dims`` (d_1 < ... < d): the loss is also computed on the first d_i
    dimensions (each truncation normalised on its own) and summed, so that truncated vectors stay useful.
    References: Gao et al. 2021, "SimCSE"; Liu et al. 2021, "Fast, Effective, and Self-Supervised: Transforming
    Masked Language Models into Universal Lexical and Sentence Encoders" (Mirror-BERT); tau 0.04 as Mirror-BERT.

    :param temperature: tau, dividing the cosines.
    :param matryoshka_dims: nested widths the loss is also computed on.
    :param name: the Keras name.
    :param kwargs: Keras ``Loss`` arguments.
    """

    def __init__(self, temperature=0.04, matryoshka_dims=(), name="in_batch_softmax", **kwargs):
        super().__init__(name=name, **kwargs)
        self.temperature = temperature
        self.matryoshka_dims = tuple(matryoshka_dims)

    def call(self, y_true, y_pred):
        width = y_pred.shape[-1]  # before the gather, which loses static shapes
        y_pred = gather_batch(y_pred)
        n2 = ops.shape(y_pred)[0]
        partner = (ops.arange(n2) + n2 // 2) % n2
        widths = [None] + [d for d in self.matryoshka_dims if width is None or d < width]
        return replica_share(sum(in_batch_softmax_loss(y_pred if d is None else y_pred[:, :d], partner,
                                                       1.0 / self.temperature) for d in widths))

    def get_config(self):
        return {**super().get_config(), "temperature": self.temperature,
                "matryoshka_dims": list(self.matryoshka_dims)}


# ---------------------------------------------------------------------------------- pretraining
def gather_positions(sequence, positions):
    """sequence [B, T, ...] at positions [B, P] -> [B, P, ...]."""
    index = positions
    for _ in range(len(sequence.shape) - 2):
        index = ops.expand_dims(index, -1)
    return ops.take_along_axis(sequence, index, axis=1)


def mlm_loss_and_accuracy(logits, truth_ids, weights):
    """Masked-LM cross-entropy and accuracy, averaged over the slots with weight 1."""
    ce = keras.losses.sparse_categorical_crossentropy(truth_ids, ops.cast(logits, "float32"), from_logits=True)
    total = ops.maximum(global_sum(ops.sum(weights)), 1.0)
    correct = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), ops.cast(truth_ids, "int32")),
                       "float32")
    return global_sum(ops.sum(ce * weights)) / total, global_sum(ops.sum(correct * weights)) / total


def tacl_loss(student, teacher, positions, weights, padding_mask, temperature=0.01):
    """TaCL token contrast. ``student`` [B, P, H]: the student's vectors at the masked ``positions`` [B, P]
    (``weights`` 0 marks unused slots); ``teacher`` [B, T, H]. For each masked position i of a row: softmax over
    the teacher's positions of that row (cosine / temperature) with target i. Padding positions are removed from
    the denominator (zoo's choice; the original keeps them)."""
    s, t = l2_normalize(ops.cast(student, "float32")), l2_normalize(ops.cast(ops.stop_gradient(teacher), "float32"))
    logits = ops.einsum("bid,bjd->bij", s, t) / temperature
    logits = ops.where(ops.cast(padding_mask, "bool")[:, None, :], logits, NEG_INF)
    ce = keras.losses.sparse_categorical_crossentropy(positions, logits, from_logits=True)
    return global_sum(ops.sum(ce * weights)) / ops.maximum(global_sum(ops.sum(weights)), 1.0)


def taco_loss(hidden, embeddings, positive, negative, padding_mask, temperature=0.07):
    """TACO: g = h - e; anchor vs one positive and k negatives (stop-gradient), cosine / temperature, CE to the
    positive, averaged over real (non-padding) anchors."""
    g = ops.cast(hidden, "float32") - ops.cast(embeddings, "float32")
    d = ops.shape(g)[-1]
    flat = ops.stop_gradient(l2_normalize(ops.reshape(gather_batch(g), (-1, d))))  # indices are global-batch ones
    anchor = l2_normalize(g)
    pos = ops.take(flat, positive, axis=0)  # [B, L, d]
    neg = ops.take(flat, negative, axis=0)  # [B, L, K, d]
    logits = ops.concatenate([ops.sum(anchor * pos, -1)[..., None], ops.einsum("bld,blkd->blk", anchor, neg)],
                             axis=-1) / temperature
    ce = keras.losses.sparse_categorical_crossentropy(ops.zeros(ops.shape(logits)[:2], "int32"), logits,
                                                      from_logits=True)
    w = ops.cast(padding_mask, "float32")
    return global_sum(ops.sum(ce * w)) / ops.maximum(global_sum(ops.sum(w)), 1.0)


@keras.saving.register_keras_serializable(package="zoo")
class PretrainingLoss(keras.layers.Layer):
    """MLM (+ NSP) (+ TaCL or TACO) from the model's outputs; returns [loss, masked-token accuracy].
    ``masked_hidden`` [B, P, H] and ``mlm_logits`` [B, P, V] are at the masked positions ``x["mlm_positions"]``.

    :param objective: "mlm", "tacl" (plus TaCL's token contrast against a teacher) or "taco" (plus TACO's).
    :param nsp: add next-sentence prediction's cross-entropy.
    :param kwargs: Keras ``Layer`` arguments.
    """

    def __init__(self, objective="mlm", nsp=True, **kwargs):
        super().__init__(**kwargs)
        self.objective, self.nsp = objective, nsp

    def call(self, x, masked_hidden, mlm_logits, hidden_states=None, nsp_logits=None, teacher=None):
        truth = gather_positions(x["truth_ids"], x["mlm_positions"])
        loss, acc = mlm_loss_and_accuracy(mlm_logits, truth, x["mlm_weights"])
        if self.nsp:
            loss = loss + ops.mean(keras.losses.sparse_categorical_crossentropy(x["nsp_labels"], nsp_logits,
                                                                                from_logits=True))
        if self.objective == "tacl":
            loss = loss + tacl_loss(masked_hidden, teacher, x["mlm_positions"], x["mlm_weights"], x["padding_mask"])
        elif self.objective == "taco":
            loss = loss + taco_loss(hidden_states[-1], hidden_states[0], x["taco_positive"], x["taco_negative"],
                                    x["padding_mask"])
        return ops.stack([loss, acc])

    def compute_output_shape(self, *args, **kwargs):
        return (2,)

    def get_config(self):
        return {**super().get_config(), "objective": self.objective, "nsp": self.nsp}


# ---------------------------------------------------------------------------------- a bi-encoder's objective
def objective_labels(objective, labels, graded=None):
    """Labels as each pair objective wants them: CoSENT raw (0/1 or 0-5), SBERT classes (STS-B: > 2.5), cosine MSE
    in [0, 1]. ``graded`` (0-5 labels) defaults to ``labels.max() > 1``.

    :param objective: "cosent", "sbert" or "cosine_mse".
    :param labels: the dataset's labels.
    :param graded: whether they are 0-5 (None: ``labels.max() > 1``).
    """
    graded = labels.max() > 1 if graded is None else graded
    if objective == "cosent":
        return labels.astype("float32")
    if objective == "sbert":
        return (labels > 2.5).astype("int32") if graded else labels.astype("int32")
    return (labels / (5.0 if graded else 1.0)).astype("float32")


def objective_loss(objective, matryoshka_dims=(), in_batch_weight=0.0):
    """The Keras loss of a pair objective ("cosent", "sbert", "cosine_mse"); with ``matryoshka_dims``, summed over
    the nested dimensions (``MatryoshkaLoss``); with ``in_batch_weight``, CoSENT plus that much in-batch ranking
    (``CoSENTInBatchLoss``, on the embeddings of ``zoo.models.build_trainer(..., in_batch=True)``).

    :param objective: "cosent", "sbert" or "cosine_mse".
    :param matryoshka_dims: nested widths (``MatryoshkaLoss``).
    :param in_batch_weight: the in-batch ranking loss's weight (``CoSENTInBatchLoss``; 0: none).
    """
    if in_batch_weight:
        return CoSENTInBatchLoss(in_batch_weight)
    loss = {"cosent": CoSENTLoss(), "cosine_mse": CosineMSELoss(),
            "sbert": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}[objective]
    return MatryoshkaLoss(loss) if matryoshka_dims else loss
