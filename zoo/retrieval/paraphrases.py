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
    """The most similar pairs of rows of ``vectors`` by cosine -> [(score, i, j)] with i < j, highest first: each row's
    ``top_k`` nearest other rows, each pair once, the best ``max_pairs`` of them (sentence-transformers'
    ``paraphrase_mining_embeddings``). ``chunk_size`` rows are compared with all rows at a time."""
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
    """``paraphrase_mining_embeddings`` of ``encoder.encode(texts, **encode_options)``: [(score, i, j)] pairs of
    indices into ``texts``, most similar first (sentence-transformers' ``paraphrase_mining``)."""
    return paraphrase_mining_embeddings(encoder.encode(list(texts), **encode_options), top_k, max_pairs, chunk_size)


def community_detection(vectors, threshold=0.75, min_community_size=10, chunk_size=1024):
    """Groups of rows whose cosine with a central row is at least ``threshold``, each of at least
    ``min_community_size`` rows, none sharing a row -> [[center, member, ...]], largest first; members in order of
    their cosine with the center (sentence-transformers' ``community_detection``). A row's community is every row at
    ``threshold`` or above (itself included); the largest are kept first, and a later one keeps the rows no kept
    community holds, if they are still enough and its center is free."""
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
