"""Paraphrases inside one collection of texts, as sentence-transformers finds them: paraphrase mining (the most
similar pairs of a question bank: duplicates to merge) and community detection (groups of texts close to a central
one: clusters of one intent). Numpy over L2-normalised vectors, a block of rows at a time; any zoo encoder (or
vectors you have) gives the vectors."""

from __future__ import annotations

import heapq

import numpy as np

from ..vectors import normalize_rows


def _unit_rows(vectors):
    vectors = np.asarray(vectors, dtype="float32")
    if vectors.ndim != 2:
        raise ValueError(f"vectors must be [n, dim], got shape {vectors.shape}")
    return normalize_rows(vectors)


def paraphrase_mining_embeddings(vectors, top_k=100, max_pairs=500_000, chunk_size=5000):
    """The most similar pairs of rows of ``vectors`` by cosine: each row's ``top_k`` nearest other rows, each pair
    once, the best ``max_pairs`` of them (sentence-transformers' ``paraphrase_mining_embeddings``).

    :param vectors: [n, dim] (normalised here).
    :param top_k: neighbours per row.
    :param max_pairs: pairs kept.
    :param chunk_size: rows compared with all rows at a time.
    :returns: [(score, i, j)] with i < j, highest first.
    """
    vectors = _unit_rows(vectors)
    n = len(vectors)
    if top_k < 1 or max_pairs < 1:
        raise ValueError(f"top_k and max_pairs must be >= 1, got {top_k} and {max_pairs}")
    best, seen = [], set()  # a min-heap of the kept (score, i, j); the (i, j) in it
    k = min(top_k, n - 1)
    for start in range(0, n if k > 0 else 0, chunk_size):
        scores = vectors[start:start + chunk_size] @ vectors.T
        rows = np.arange(len(scores))
        scores[rows, start + rows] = -np.inf  # a text is not its own paraphrase
        nearest = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        for row, neighbours in zip(rows, nearest):
            i = start + int(row)
            for j in neighbours.tolist():
                pair = (min(i, j), max(i, j))
                if pair in seen:
                    continue
                item = (float(scores[row, j]), *pair)
                if len(best) < max_pairs:
                    heapq.heappush(best, item)
                    seen.add(pair)
                elif item > best[0]:
                    seen.discard(heapq.heappushpop(best, item)[1:])
                    seen.add(pair)
    return sorted(best, key=lambda item: -item[0])


def paraphrase_mining(encoder, texts, top_k=100, max_pairs=500_000, chunk_size=5000, **encode_options):
    """The most similar pairs of ``texts`` (sentence-transformers' ``paraphrase_mining``).

    ```python
    for score, i, j in zoo.retrieval.paraphrase_mining(encoder, questions, top_k=10):
        print(f"{score:.3f}", questions[i], questions[j])
    ```

    :param encoder: a model with ``encode`` (a SentenceEncoder).
    :param texts: the texts.
    :param top_k: neighbours per text.
    :param max_pairs: pairs kept.
    :param chunk_size: texts compared with all texts at a time.
    :param encode_options: ``encode``'s arguments (e.g. ``batch_size``).
    :returns: [(score, i, j)] pairs of indices into ``texts``, most similar first.
    """
    return paraphrase_mining_embeddings(encoder.encode(list(texts), **encode_options), top_k, max_pairs, chunk_size)


def community_detection(vectors, threshold=0.75, min_community_size=10, chunk_size=1024):
    """Groups of rows whose cosine with a central row is at least ``threshold``, none sharing a row
    (sentence-transformers' ``community_detection``). A row's community is every row at ``threshold`` or above
    (itself included); the largest are kept first, and a later one keeps the rows no kept community holds, if they
    are still enough and its center is free.

    :param vectors: [n, dim] (normalised here).
    :param threshold: the cosine with the center a member needs.
    :param min_community_size: the fewest rows a community keeps.
    :param chunk_size: rows compared with all rows at a time.
    :returns: [[center, member, ...]], largest first; members in order of their cosine with the center.
    """
    vectors = _unit_rows(vectors)
    if len(vectors) < min_community_size or len(vectors) == 0:
        return []
    candidates = []
    for start in range(0, len(vectors), chunk_size):
        scores = vectors[start:start + chunk_size] @ vectors.T
        for row, row_scores in enumerate(scores):
            members = np.flatnonzero(row_scores >= threshold)
            if len(members) >= min_community_size:
                order = members[np.argsort(-row_scores[members], kind="stable")]
                candidates.append((start + row, order))
    candidates.sort(key=lambda c: len(c[1]), reverse=True)
    taken = np.zeros(len(vectors), dtype=bool)
    communities = []
    for center, members in candidates:
        if taken[center]:
            continue
        free = members[~taken[members]]
        if len(free) >= min_community_size:
            community = [int(center)] + [int(m) for m in free if m != center]
            taken[community] = True
            communities.append(community)
    return sorted(communities, key=len, reverse=True)
