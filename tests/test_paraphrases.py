"""Paraphrase mining and community detection give sentence-transformers' answers (its functions run in the torch
subprocess) on vectors with planted groups, chunk by chunk as at once; on texts, through any zoo encoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch_reference

from zoo.retrieval import community_detection, paraphrase_mining, paraphrase_mining_embeddings


def planted(seed=0, groups=6, per_group=(3, 25), loose=60, dim=24):
    """Vectors in tight groups of different sizes around random centers, and loose ones."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(groups):
        center = rng.normal(size=dim)
        size = int(rng.integers(*per_group))
        rows += [center + rng.normal(scale=0.25, size=dim) for _ in range(size)]
    rows += [rng.normal(size=dim) for _ in range(loose)]
    return np.array(rows, "float32")[rng.permutation(len(rows))]


MINING = [(5, 10_000, 5000), (3, 40, 17), (1, 7, 1000)]  # top_k, max_pairs, chunk_size
COMMUNITIES = [(0.8, 5, 1024), (0.8, 3, 13), (0.95, 2, 50)]  # threshold, min_community_size, chunk_size


@pytest.fixture(scope="module")
def theirs():
    """sentence-transformers' answers for every setting below, from one subprocess."""
    return torch_reference.run(
        "st_paraphrases", batch={"embeddings": planted()},
        mining=[{"top_k": k, "max_pairs": m, "query_chunk_size": c} for k, m, c in MINING],
        communities=[{"threshold": t, "min_community_size": m} for t, m, _ in COMMUNITIES])


@pytest.mark.parametrize("n", range(len(MINING)))
def test_paraphrase_mining_equals_sentence_transformers(theirs, n):
    """The same pairs in the same order, with the same scores, at every top_k, max_pairs and chunk size."""
    top_k, max_pairs, chunk_size = MINING[n]
    ours = paraphrase_mining_embeddings(planted(), top_k=top_k, max_pairs=max_pairs, chunk_size=chunk_size)
    pairs = theirs[f"pairs{n}"]
    assert len(ours) == len(pairs) > 0 and len(ours) <= max_pairs
    assert [(i, j) for _, i, j in ours] == [(int(i), int(j)) for _, i, j in pairs]
    np.testing.assert_allclose([s for s, _, _ in ours], pairs[:, 0], atol=1e-5)
    assert all(i < j for _, i, j in ours) and [s for s, _, _ in ours] == sorted((s for s, _, _ in ours), reverse=True)


@pytest.mark.parametrize("n", range(len(COMMUNITIES)))
def test_community_detection_equals_sentence_transformers(theirs, n):
    """The same communities (center first, members by cosine), largest first, chunk by chunk as at once."""
    threshold, min_size, chunk_size = COMMUNITIES[n]
    ours = community_detection(planted(), threshold=threshold, min_community_size=min_size, chunk_size=chunk_size)
    lengths = theirs[f"lengths{n}"]
    split = np.split(theirs[f"members{n}"], np.cumsum(lengths)[:-1]) if len(lengths) else []
    assert ours == [c.tolist() for c in split]
    assert len(ours) >= 2 and len({m for c in ours for m in c}) == sum(map(len, ours))  # found, and disjoint


def test_on_texts_through_an_encoder():
    """With the shipped encoder, a question bank's duplicates come first and the paraphrases form a community."""
    import zoo

    encoder = zoo.SentenceEncoder.from_preset("zoo-embed-zh-L4")
    texts = ["花呗怎么开通", "如何开通花呗", "怎么才能开通花呗", "今天天气不错", "借呗额度怎么提升", "信用卡年费多少钱"]
    pairs = paraphrase_mining(encoder, texts, top_k=2)
    assert {pairs[0][1], pairs[0][2]} <= {0, 1, 2}, pairs
    groups = community_detection(encoder.encode(texts), threshold=0.9, min_community_size=3)
    assert [sorted(g) for g in groups] == [[0, 1, 2]], groups
    with pytest.raises(ValueError, match="vectors must be"):
        community_detection(np.zeros(4))
