import numpy as np
import pytest
from keras import ops

from zoo.losses import cosent_loss, cosine_mse_loss, in_batch_softmax_loss, pair_cosine, triplet_loss


def np_cosent(labels, scores, scale=20.0):
    total = 0.0
    for k in range(len(labels)):
        for l in range(len(labels)):  # noqa: E741
            if labels[k] < labels[l]:
                total += np.exp(scale * (scores[k] - scores[l]))
    return np.log1p(total)


def as_np(x):
    return float(ops.convert_to_numpy(x))


@pytest.mark.parametrize("labels", [[1, 0, 1, 0, 0], [0, 3, 5, 2, 2], [0.0, 0.4, 1.0, 0.8, 0.4]])
def test_cosent_matches_numpy(labels):
    rng = np.random.default_rng(0)
    scores = rng.uniform(-1, 1, len(labels)).astype("float32")
    assert as_np(cosent_loss(np.array(labels, "float32"), scores)) == pytest.approx(
        np_cosent(labels, scores), rel=1e-5)


def test_gap_weighted_cosent():
    """Each ordered pair weighted by its label gap: equals plain CoSENT on 0/1 labels, a numpy reference on
    soft labels, and nearly tied soft labels barely count."""
    rng = np.random.default_rng(1)
    scores = rng.uniform(-1, 1, 6).astype("float32")
    gold = np.array([1, 0, 1, 1, 0, 0], "float32")
    assert as_np(cosent_loss(gold, scores, gap_weighted=True)) == pytest.approx(as_np(cosent_loss(gold, scores)), 1e-5)
    soft = np.array([0.9, 0.1, 0.95, 0.6, 0.3, 0.05], "float32")
    reference = np.log1p(sum((soft[l] - soft[k]) * np.exp(20 * (scores[k] - scores[l]))
                             for k in range(6) for l in range(6) if soft[k] < soft[l]))  # noqa: E741
    assert as_np(cosent_loss(soft, scores, gap_weighted=True)) == pytest.approx(reference, rel=1e-5)
    wrong_order = np.array([0.1, 0.0], "float32")  # pair 0 scores higher but its target is lower
    assert as_np(cosent_loss(np.array([0.5, 0.51]), wrong_order, gap_weighted=True)) < 0.1 * as_np(
        cosent_loss(np.array([0.5, 0.51]), wrong_order))


def test_cosent_hand_value_and_edge_cases():
    # one ordered pair (neg 0.5 vs pos 0.25): log(1 + exp(20 * 0.25)) = log(1 + e^5)
    assert as_np(cosent_loss(np.array([0.0, 1.0]), np.array([0.5, 0.25]))) == pytest.approx(np.log1p(np.exp(5)), 1e-6)
    assert as_np(cosent_loss(np.array([1.0, 1.0, 1.0]), np.array([0.1, -0.3, 0.9]))) == 0.0  # no ordered pair
    # huge margins stay finite (logsumexp)
    assert np.isfinite(as_np(cosent_loss(np.array([0.0, 1.0]), np.array([1.0, -1.0]), scale=1000.0)))


def test_pair_cosine_interleaved():
    e = np.array([[1, 0], [1, 0], [1, 0], [0, 2], [3, 4], [-3, -4]], "float32")
    np.testing.assert_allclose(ops.convert_to_numpy(pair_cosine(e)), [1, 0, -1], atol=1e-6)


def test_in_batch_softmax_matches_numpy():
    rng = np.random.default_rng(1)
    e = rng.normal(size=(6, 8)).astype("float32")
    partner = np.arange(6) ^ 1
    z = e / np.linalg.norm(e, axis=1, keepdims=True)
    s = 30 * z @ z.T
    np.fill_diagonal(s, -1e12)
    logp = s - np.log(np.exp(s - s.max(1, keepdims=True)).sum(1, keepdims=True)) - s.max(1, keepdims=True)
    expected = -logp[np.arange(6), partner].mean()
    assert as_np(in_batch_softmax_loss(e, partner, 30.0)) == pytest.approx(expected, rel=1e-5)


def test_cosine_mse_and_triplet():
    assert as_np(cosine_mse_loss(np.array([1.0, 0.0]), np.array([0.5, 0.5]))) == pytest.approx(0.25)
    a = np.array([[0.0, 0.0]], "float32")
    p = np.array([[3.0, 4.0]], "float32")  # distance 5
    n = np.array([[0.0, 1.0]], "float32")  # distance 1
    assert as_np(triplet_loss(a, p, n, margin=1.0)) == pytest.approx(5.0)
    assert as_np(triplet_loss(a, n, p, margin=1.0)) == pytest.approx(0.0)


def test_matryoshka_loss_sums_the_pair_loss_over_nested_dimensions():
    """NestedPairCosine gives each pair's cosine on the first d dimensions, for every d; MatryoshkaLoss is the
    CoSENT loss of each column, summed; the trainer always includes the full dimension."""
    import keras

    import zoo
    from helpers import synthetic_vocab
    from zoo.losses import CoSENTLoss, MatryoshkaLoss
    from zoo.models import build_pair_trainer
    from zoo.models.bi_encoder import NestedPairCosine

    rng = np.random.default_rng(0)
    emb = rng.normal(size=(8, 16)).astype("float32")
    nested = ops.convert_to_numpy(NestedPairCosine([4, 8, 16])(emb))
    for j, d in enumerate((4, 8, 16)):
        np.testing.assert_allclose(nested[:, j], ops.convert_to_numpy(pair_cosine(emb[:, :d])), atol=1e-6)
    labels = np.array([1, 0, 1, 0], "float32")
    total = float(MatryoshkaLoss(CoSENTLoss())(labels, nested))
    expected = sum(float(cosent_loss(labels, nested[:, j])) for j in range(3))
    assert total == pytest.approx(expected, rel=1e-5)
    assert total > float(cosent_loss(labels, nested[:, -1])) + 1e-3

    tok = zoo.Tokenizer(synthetic_vocab())
    encoder = zoo.SentenceEncoder(zoo.BertBackbone(tok.vocab_size, 1, 2, 16, 32, max_sequence_length=32), tok)
    trainer = build_pair_trainer(encoder, "cosent", matryoshka_dims=(4, 8))
    assert trainer.get_layer("nested_pair_cosine").dims == [4, 8, 16]
    with pytest.raises(ValueError, match="cosine objective"):
        build_pair_trainer(encoder, "sbert", matryoshka_dims=(4,))
    with pytest.raises(ValueError, match="must lie in"):
        build_pair_trainer(encoder, "cosent", matryoshka_dims=(32,))
    assert isinstance(keras.losses.deserialize(keras.losses.serialize(MatryoshkaLoss(CoSENTLoss()))),
                      MatryoshkaLoss)


def test_in_batch_loss_with_matryoshka_dims_sums_over_truncations():
    """InfoNCE on the full vectors plus on each leading slice (each normalised on its own); a width at or past
    the full dimension adds nothing twice; the setting survives serialisation."""
    from zoo.losses import InBatchSoftmaxLoss, in_batch_softmax_loss

    emb = np.random.default_rng(1).normal(size=(6, 16)).astype("float32")
    partner = (np.arange(6) + 3) % 6
    parts = [float(in_batch_softmax_loss(emb[:, :d], partner, 25.0)) for d in (4, 8, 16)]
    loss = InBatchSoftmaxLoss(0.04, matryoshka_dims=(4, 8, 16))
    zeros = np.zeros(6, "float32")  # y_true is unused
    assert float(loss(zeros, emb)) == pytest.approx(sum(parts), rel=1e-5)
    assert float(InBatchSoftmaxLoss(0.04)(zeros, emb)) == pytest.approx(parts[-1], rel=1e-5)
    assert InBatchSoftmaxLoss.from_config(loss.get_config()).matryoshka_dims == (4, 8, 16)


def np_multiple_negatives_ranking(embeddings, anchor_weights, scale=20.0):
    """Reference: for each anchor a_i (weight 1) softmax over cos(a_i, b_j) of every pair j, target j = i."""
    z = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    a, b = z[0::2], z[1::2]
    total = 0.0
    for i, w in enumerate(anchor_weights):
        logits = scale * (b @ a[i])
        total += w * (np.log(np.exp(logits).sum()) - logits[i])
    return total / max(sum(anchor_weights), 1.0)


def test_multiple_negatives_ranking_matches_numpy():
    """Only anchors (paraphrase pairs) count; the b's of every pair, non-paraphrases included, are candidates."""
    from zoo.losses import multiple_negatives_ranking_loss

    rng = np.random.default_rng(2)
    e = rng.normal(size=(10, 8)).astype("float32")
    w = np.array([1, 0, 1, 1, 0], "float32")
    assert as_np(multiple_negatives_ranking_loss(e, w)) == pytest.approx(np_multiple_negatives_ranking(e, w), rel=1e-5)
    assert as_np(multiple_negatives_ranking_loss(e, w, scale=5.0)) == pytest.approx(
        np_multiple_negatives_ranking(e, w, 5.0), rel=1e-5)
    assert as_np(multiple_negatives_ranking_loss(e, np.zeros(5, "float32"))) == 0.0  # no anchor
    # anchor 0 with its own b equal to it: near-zero loss; a candidate as close as its b (a hard negative) adds
    # about log 2
    easy = e.copy()
    easy[1] = e[0]
    hard = easy.copy()
    hard[3] = e[0] + 1e-3
    one = np.array([1, 0, 0, 0, 0], "float32")
    assert as_np(multiple_negatives_ranking_loss(easy, one)) < 0.1
    assert as_np(multiple_negatives_ranking_loss(hard, one)) == pytest.approx(
        np.log(2) + as_np(multiple_negatives_ranking_loss(easy, one)), abs=0.02)


def test_cosent_in_batch_loss_is_cosent_plus_weighted_ranking():
    """y_true [B, 2] (label, anchor flag), y_pred the [2B, d] embeddings: CoSENT of the pair cosines on the labels
    plus weight x the ranking loss on the anchor flags; weight 0 is CoSENT alone; survives serialisation."""
    import keras

    from zoo.losses import CoSENTInBatchLoss

    rng = np.random.default_rng(3)
    e = rng.normal(size=(8, 6)).astype("float32")
    z = e / np.linalg.norm(e, axis=1, keepdims=True)
    cos = np.sum(z[0::2] * z[1::2], axis=1)
    y = np.array([[1, 1], [0, 0], [5, 1], [2, 0]], "float32")  # the anchor flag is not derived from the label
    expected = np_cosent(y[:, 0], cos) + 0.5 * np_multiple_negatives_ranking(e, y[:, 1])
    assert float(CoSENTInBatchLoss(0.5)(y, e)) == pytest.approx(expected, rel=1e-5)
    assert float(CoSENTInBatchLoss(0.0)(y, e)) == pytest.approx(np_cosent(y[:, 0], cos), rel=1e-5)
    restored = keras.losses.deserialize(keras.losses.serialize(CoSENTInBatchLoss(0.5, in_batch_scale=10.0)))
    assert (restored.weight, restored.in_batch_scale) == (0.5, 10.0)
