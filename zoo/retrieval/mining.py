"""Hard-negative mining, as sentence-transformers' ``mine_hard_negatives``: for each (anchor, positive) pair, the
corpus texts an encoder ranks closest to the anchor that are not among its positives, within a rank range, below the
positive's own score by a margin and under a score ceiling, optionally checked by a cross-encoder; returned as the
(anchor, positive, negative) rows the bi-encoder job reads as triplets (``zoo.data.pair_files``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ConfigError
from ..inference.pipeline import engine_argument
from ..vectors import normalize_rows


@dataclasses.dataclass
class MiningReport:
    """What mining found: anchors, pairs, triplets written, and the candidates each filter removed."""

    anchors: int = 0
    pairs: int = 0
    triplets: int = 0
    pairs_without_negative: int = 0
    removed_by_margin: int = 0
    removed_by_max_score: int = 0
    removed_by_cross_encoder: int = 0


def mine_hard_negatives(pairs, encoder, corpus=None, *, num_negatives=1, range_min=0, range_max=50, margin=None,
                        max_score=None, cross_encoder=None, cross_encoder_max_score=0.5, batch_size=64,
                        engine="auto", precision=None):
    """Mine hard negatives for each (anchor, positive) of ``pairs`` (sentence-transformers' ``mine_hard_negatives``;
    ``zoo mine-negatives``). Candidates are the corpus texts by cosine to the anchor (``encoder.encode_queries`` for
    anchors), best first, without the anchor itself and every positive of that anchor.

    :param pairs: (anchor, positive) tuples.
    :param encoder: a SentenceEncoder.
    :param corpus: the texts negatives come from (None: the positives, as sentence-transformers).
    :param num_negatives: negatives per pair.
    :param range_min: candidates skipped from the top (the closest are often unlabelled paraphrases).
    :param range_max: the lowest rank considered.
    :param margin: a candidate must score below the positive's cosine minus ``margin`` (None: no such rule).
    :param max_score: a candidate must score below this cosine (None: no such rule).
    :param cross_encoder: a CrossEncoder: a candidate it scores above ``cross_encoder_max_score`` is taken for an
        unlabelled positive and skipped (it scores candidates in rank order, a few per pair).
    :param cross_encoder_max_score: see ``cross_encoder``.
    :param batch_size: texts per forward pass.
    :param engine: as ``SentenceEncoder.encode``'s.
    :param precision: the engine's name before zoo 0.3.
    :returns: ([(anchor, positive, negative)], MiningReport).
    """
    pairs = [(str(a), str(p)) for a, p in pairs]
    for name, value, low in (("num_negatives", num_negatives, 1), ("range_min", range_min, 0),
                             ("batch_size", batch_size, 1)):
        if int(value) < low:
            raise ConfigError(f"{name} must be >= {low}, got {value}", param=name)
    if range_max <= range_min:
        raise ConfigError(f"range_max must be above range_min ({range_min}), got {range_max}", param="range_max")
    if not pairs:
        raise ConfigError("no (anchor, positive) pairs to mine negatives for", param="pairs")
    positives = {}
    for anchor, positive in pairs:
        positives.setdefault(anchor, set()).add(positive)
    corpus = list(dict.fromkeys(corpus if corpus is not None else (p for _, p in pairs)))
    anchors = list(positives)
    known = list(dict.fromkeys(corpus + [p for _, p in pairs]))
    where = {t: i for i, t in enumerate(known)}
    encode_queries = getattr(encoder, "encode_queries", encoder.encode)
    engine = engine_argument(engine, precision)
    anchor_vectors = normalize_rows(encode_queries(anchors, batch_size=batch_size, engine=engine))
    text_vectors = normalize_rows(encoder.encode(known, batch_size=batch_size, engine=engine))
    corpus_vectors = text_vectors[:len(corpus)]
    report = MiningReport(anchors=len(anchors), pairs=len(pairs))
    depth = min(len(corpus), range_max)
    candidates = {}  # anchor -> [(text, cosine)] of ranks range_min .. range_max, best first
    for start in range(0, len(anchors), 256):
        scores = anchor_vectors[start:start + 256] @ corpus_vectors.T
        for row, anchor in zip(scores, anchors[start:start + 256]):
            excluded = positives[anchor] | {anchor}
            wanted = min(len(corpus), depth + len(excluded))
            top = np.argpartition(-row, wanted - 1)[:wanted] if wanted < len(corpus) else np.arange(len(corpus))
            ranked = [(corpus[j], float(row[j])) for j in top[np.argsort(-row[top], kind="stable")]
                      if corpus[j] not in excluded]
            candidates[anchor] = ranked[range_min:range_max]
    triplets = []
    anchor_row = {a: i for i, a in enumerate(anchors)}
    for anchor, positive in pairs:
        positive_score = float(anchor_vectors[anchor_row[anchor]] @ text_vectors[where[positive]])
        kept = []
        for text, score in candidates[anchor]:
            if margin is not None and score > positive_score - margin:
                report.removed_by_margin += 1
            elif max_score is not None and score > max_score:
                report.removed_by_max_score += 1
            else:
                kept.append(text)
        if cross_encoder is not None:
            kept = _checked_by(cross_encoder, anchor, kept, num_negatives, cross_encoder_max_score, report)
        kept = kept[:num_negatives]
        report.pairs_without_negative += not kept
        triplets += [(anchor, positive, negative) for negative in kept]
    report.triplets = len(triplets)
    return triplets, report


def _checked_by(cross_encoder, anchor, texts, wanted, ceiling, report):
    """The first ``wanted`` of ``texts`` the cross-encoder scores at most ``ceiling`` against ``anchor``, scored in
    rank order, ``2 * wanted`` at a time."""
    kept, start = [], 0
    while len(kept) < wanted and start < len(texts):
        chunk = texts[start:start + 2 * wanted]
        scores = cross_encoder.score([(anchor, t) for t in chunk])
        for text, score in zip(chunk, scores):
            if float(score) > ceiling:
                report.removed_by_cross_encoder += 1
            elif len(kept) < wanted:
                kept.append(text)
        start += len(chunk)
    return kept
