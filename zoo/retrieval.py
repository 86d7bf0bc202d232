"""Semantic search: exact cosine top-k in numpy (chunked) or approximate with faiss, behind one API; BM25 over the
same texts (the bm25s library) and hybrid search fusing both (normalised scores or reciprocal ranks), with a fusion
weight calibrated from a few labelled queries."""

from __future__ import annotations

import json
import math
import os
import re
import unicodedata
from collections import Counter

import numpy as np

from .errors import CheckpointError, require
from .paths import atomic_dir, check_manifest, file_manifest, read_json_file
from .vectors import normalize_rows

INDEX_FILE = "index.json"
LEXICAL_TERMS = ("bigram", "jieba")
SEARCH_MODES = ("dense", "lexical", "hybrid")
FUSIONS = ("score", "rrf")  # min-max normalised scores, weighted sum; reciprocal-rank fusion
RRF_K = 60  # reciprocal-rank fusion's constant (Cormack et al. 2009)
CALIBRATION_WEIGHTS = tuple(round(w / 10, 1) for w in range(11))  # dense weights tried by calibrate(), 0 and 1 too
BACKENDS = ("exact", "hnsw", "ivfpq", "faiss")
# backends in modules of their own, which build on this one (imported by name when used): name -> (module, class)
BACKEND_MODULES = {"milvus": ("zoo.milvus_index", "MilvusIndex")}
QUANTIZE = (None, "int8", "binary")
QUANTIZED_BACKENDS = {"int8": ("exact", "hnsw"), "binary": ("exact",)}  # where codes can replace the float vectors
FAISS_FILE = "faiss.index"
SMALL = 50_000  # faiss structures for fewer vectors are built on one thread
TRAIN_SAMPLE = 200_000  # vectors a faiss structure is trained on (a random sample of larger corpora)


def _normalise(x):
    return normalize_rows(np.atleast_2d(x))


def lexical_terms(text, terms="bigram"):
    """BM25 terms of a (Chinese) text, lower-cased, punctuation and spaces dropped: "bigram": overlapping
    character bigrams (a one-character text: that character); "jieba": jieba's words."""
    if terms == "jieba":
        import jieba

        return [w for w in jieba.lcut(text.lower()) if normalized(w)]
    chars = normalized(text)
    return ["".join(p) for p in zip(chars, chars[1:])] or list(chars)


def normalized(text):
    """``text`` without punctuation, symbols and spaces, lower-cased: two texts equal here say the same words."""
    return "".join(ch for ch in text.lower() if unicodedata.category(ch)[0] in "LN")


def reciprocal_rank_fusion(rankings, weights, k=RRF_K):
    """{item: sum of weight / (k + rank)} over ``rankings`` (lists of items, best first; rank 1 = first)."""
    fused = {}
    for ranking, weight in zip(rankings, weights):
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return fused


def score_fusion(scored, weights):
    """{item: sum of weight * normalised score} over ``scored`` (one list of (item, score) per ranking, best
    first): each ranking's scores are min-max normalised to [0, 1] over its own list (all 1 when they are equal),
    and an item missing from a ranking gets 0 from it."""
    fused = {}
    for pairs, weight in zip(scored, weights):
        if not pairs:
            continue
        values = np.asarray([v for _, v in pairs], dtype="float64")
        low, span = values.min(), values.max() - values.min()
        for (item, _), v in zip(pairs, values):
            fused[item] = fused.get(item, 0.0) + weight * ((v - low) / span if span > 0 else 1.0)
    return fused


def fuse(dense, lexical, weight, fusion="score", topk=10):
    """Hybrid ranking of one query: ``dense`` and ``lexical`` are lists of (item, score), best first; ``weight``
    on the dense side and 1 - weight on the lexical side, fused by ``fusion`` ("score": ``score_fusion``; "rrf":
    ``reciprocal_rank_fusion``) -> [(item, fused value)] best first (ties: the lower item first)."""
    if fusion == "score":
        fused = score_fusion([dense, lexical], [weight, 1.0 - weight])
    elif fusion == "rrf":
        fused = reciprocal_rank_fusion([[i for i, _ in dense], [i for i, _ in lexical]], [weight, 1.0 - weight])
    else:
        raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
    return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:topk]


def backend_class(backend):
    """The index class of a backend in ``BACKEND_MODULES``."""
    import importlib

    module, name = BACKEND_MODULES[backend]
    return getattr(importlib.import_module(module), name)


def default_factory(n):
    """A faiss factory for ``n`` vectors: exact ("Flat") below 10,000, else IVF with about 4 sqrt(n) lists."""
    return "Flat" if n < 10_000 else f"IVF{2 ** round(math.log2(4 * math.sqrt(n)))},Flat"


def exact_topk(queries, vectors, topk, chunk_size=65536):
    """Top-k inner products of each query row against ``vectors``, scanning ``chunk_size`` rows at a time
    (1M x 256 float32 vectors need ~1 GB; the score block is queries x chunk). Returns (scores, indices)."""
    queries = np.asarray(queries, dtype="float32")
    k = min(topk, len(vectors))
    best_s = np.full((len(queries), 0), -np.inf, dtype="float32")
    best_i = np.zeros((len(queries), 0), dtype="int64")
    for start in range(0, len(vectors), chunk_size):
        scores = queries @ vectors[start:start + chunk_size].T
        kk = min(k, scores.shape[1])
        part = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
        best_s = np.concatenate([best_s, np.take_along_axis(scores, part, 1)], axis=1)
        best_i = np.concatenate([best_i, part + start], axis=1)
        if best_s.shape[1] > k:
            keep = np.argpartition(-best_s, k - 1, axis=1)[:, :k]
            best_s, best_i = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_i, keep, 1)
    order = np.argsort(-best_s, axis=1, kind="stable")
    return np.take_along_axis(best_s, order, 1), np.take_along_axis(best_i, order, 1)


class SemanticIndex:
    """Texts (or bare vectors) with ids, indexed by L2-normalised embeddings; cosine top-k search.

    >>> index = SemanticIndex()                         # exact search with zoo.DEFAULT_ENCODER
    >>> index = SemanticIndex(encoder)                  # ... or any model with encode()
    >>> index.add(corpus_texts)                         # ids 0, 1, 2, ... (or ids=[...])
    >>> index.search("怎么开通花呗", topk=5)            # [[(text, score), ...]]
    >>> index.search("怎么开通花呗", mode="hybrid")     # dense + BM25, scores fused (calibrate() picks the weight)
    >>> index.remove([3, 7]); index.save("idx"); SemanticIndex.load("idx", encoder)   # vectors memory-mapped

    Backends (faiss for all but exact):
    - ``exact``: every vector scored (numpy, chunked). ``quantize="int8"`` (faiss scalar quantizer, 1 byte a
      dimension) or ``"binary"`` (sign bits, Hamming distance) scans compact codes instead, then rescores the best
      ``rescore`` x topk candidates with the float vectors.
    - ``hnsw``: a faiss HNSW graph (``hnsw_m`` links a node, ``ef_construction``, ``ef_search``);
      ``quantize="int8"`` stores its vectors as int8 codes (a quarter of the memory, faster hops), the best
      ``rescore`` x topk candidates rescored with the float vectors.
    - ``ivfpq``: faiss IVF lists with product-quantized codes (``pq_bytes`` codes a vector, default dim / 8, of 8
      bits from 10,000 vectors on, fewer below; lists sized to the corpus; ``nprobe`` lists searched), the
      candidates rescored with the float vectors.
    - ``faiss``: any faiss ``factory`` string (e.g. ``"IVF1024,Flat"``; default sized to the corpus).
    Approximate structures are built at the first search and grow with ``add``; ``remove`` hides rows at once and
    drops them (rebuilding) once a quarter of the rows are removed, or at ``save``. ``lexical``: the BM25 terms
    of the texts (character bigrams or jieba words, ``lexical_terms``), indexed at the first lexical search.
    Hybrid search fuses the two sides (``fusion`` "score": min-max normalised scores, or "rrf": reciprocal ranks)
    with ``hybrid_weight`` on the dense side; ``calibrate(queries, gold)`` picks both from a few labelled queries.
    """

    def __new__(cls, *args, **kwargs):
        """``backend="milvus"`` (a registered backend) gives that backend's index (``zoo.milvus_index``)."""
        backend = kwargs.get("backend", args[2] if len(args) > 2 else "exact")
        if backend in BACKEND_MODULES:
            return backend_class(backend)(*args[:2], **{k: v for k, v in kwargs.items() if k != "backend"})
        return super().__new__(cls)

    def __init__(self, encoder=None, dim=None, backend="exact", factory=None, nprobe=32, lexical="bigram",
                 model=None, quantize=None, rescore=4, hnsw_m=32, ef_construction=200, ef_search=128, pq_bytes=None,
                 hybrid_weight=0.5, fusion="score", calibration=None):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if quantize not in QUANTIZE:
            raise ValueError(f"quantize must be one of {QUANTIZE}, got {quantize!r}")
        if quantize is not None and backend not in QUANTIZED_BACKENDS[quantize]:
            raise ValueError(f"quantize={quantize!r} is for backend {' or '.join(QUANTIZED_BACKENDS[quantize])} "
                             f"(ivfpq quantizes by itself), got backend={backend!r}")
        if factory is not None and backend != "faiss":
            raise ValueError(f"a faiss factory string is for backend='faiss', not {backend!r}")
        if lexical not in LEXICAL_TERMS:
            raise ValueError(f"lexical must be one of {LEXICAL_TERMS}, got {lexical!r}")
        if rescore < 1:
            raise ValueError(f"rescore must be >= 1, got {rescore}")
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        if not 0.0 <= hybrid_weight <= 1.0:
            raise ValueError(f"hybrid_weight must be in [0, 1], got {hybrid_weight}")
        if encoder is None and dim is None:  # the shipped general sentence-embedding model (a saved SentenceEncoder)
            from .paths import DEFAULT_ENCODER
            from .presets import load_saved

            encoder, model = load_saved(DEFAULT_ENCODER), DEFAULT_ENCODER
        self.encoder, self.backend, self.factory, self.nprobe = encoder, backend, factory, nprobe
        self.lexical, self.model = lexical, model  # model: the encoder's name or path, recorded by save()
        self.quantize, self.rescore, self.hnsw_m = quantize, rescore, hnsw_m
        self.ef_construction, self.ef_search, self.pq_bytes = ef_construction, ef_search, pq_bytes
        self.hybrid_weight, self.fusion, self.calibration = hybrid_weight, fusion, calibration
        self.dim = dim or encoder.dim
        if pq_bytes is not None and self.dim % pq_bytes:
            raise ValueError(f"pq_bytes must divide the dimension {self.dim}, got {pq_bytes}")
        self.vectors = np.zeros((0, self.dim), dtype="float32")
        self.texts, self.ids = [], []
        self._rows, self._removed = {}, set()  # id -> row; rows hidden by remove()
        self._faiss = self._bm25 = None

    def settings(self):
        """What ``save`` records besides the data (the constructor's arguments)."""
        return {"dim": self.dim, "backend": self.backend, "factory": self.factory, "nprobe": self.nprobe,
                "lexical": self.lexical, "model": self.model, "quantize": self.quantize, "rescore": self.rescore,
                "hnsw_m": self.hnsw_m, "ef_construction": self.ef_construction, "ef_search": self.ef_search,
                "pq_bytes": self.pq_bytes, "hybrid_weight": self.hybrid_weight, "fusion": self.fusion,
                "calibration": self.calibration}

    def __len__(self):
        return len(self.vectors) - len(self._removed)

    def add(self, texts=None, vectors=None, ids=None, batch_size=64):
        """Add texts (encoded with the encoder) and/or their precomputed vectors, with ``ids`` (ints or strings;
        default: the next integers)."""
        if vectors is None:
            if texts is None:
                raise ValueError("add() needs texts or vectors")
            if self.encoder is None:
                raise ValueError("this index has no encoder: pass vectors")
            vectors = self.encoder.encode(list(texts), batch_size=batch_size)
        vectors = _normalise(vectors)
        if vectors.shape[1] != self.dim:
            raise ValueError(f"vectors have dimension {vectors.shape[1]}, the index {self.dim}")
        if texts is not None and len(texts) != len(vectors):
            raise ValueError(f"{len(texts)} texts but {len(vectors)} vectors")
        if ids is None:
            start = max([i for i in self.ids if isinstance(i, int)], default=-1) + 1
            ids = range(start, start + len(vectors))
        ids = [i.item() if isinstance(i, np.generic) else i for i in ids]
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids but {len(vectors)} vectors")
        for i in ids:
            if not isinstance(i, (int, str)):
                raise ValueError(f"ids must be ints or strings, got {i!r}")
        repeated = [i for i in ids if i in self._rows] or [i for i, n in Counter(ids).items() if n > 1]
        if repeated:
            raise ValueError(f"id {repeated[0]!r} is already in the index (ids must be unique; remove it first)")
        first = len(self.vectors)
        self.vectors = np.concatenate([self.vectors, vectors]) if first else vectors
        self.texts += list(texts) if texts is not None else [None] * len(vectors)
        self.ids += ids
        self._rows.update((i, first + n) for n, i in enumerate(ids))
        if self._faiss is not None:  # approximate structures grow in place
            self._faiss.add(self._codes(vectors))
        self._bm25 = None
        return self

    def remove(self, ids):
        """Remove the entries with these ids (KeyError names an unknown one)."""
        missing = [i for i in ids if i not in self._rows]
        if missing:
            raise KeyError(f"id {missing[0]!r} is not in the index")
        for i in ids:
            self._removed.add(self._rows.pop(i))
        if len(self._removed) > len(self.vectors) / 4:
            self.compact()
        return self

    def compact(self):
        """Drop removed rows for good (the approximate structure and BM25 are rebuilt at the next search)."""
        if self._removed:
            keep = np.setdiff1d(np.arange(len(self.vectors)), sorted(self._removed))
            self.vectors = np.asarray(self.vectors[keep])
            self.texts = [self.texts[i] for i in keep]
            self.ids = [self.ids[i] for i in keep]
            self._rows = {i: n for n, i in enumerate(self.ids)}
            self._removed = set()
            self._faiss = self._bm25 = None
        return self

    def _queries(self, queries, batch_size):
        if isinstance(queries, str):
            queries = [queries]
        if isinstance(queries, np.ndarray) and queries.dtype != object:
            return _normalise(queries)
        if self.encoder is None:
            raise ValueError("this index has no encoder: search with vectors")
        encode = getattr(self.encoder, "encode_queries", self.encoder.encode)  # with the model's query prefix
        return _normalise(encode(list(queries), batch_size=batch_size))

    def search_vectors(self, queries, topk=10):
        """(scores, rows) arrays [n_queries, topk], best first; row -1 (score -inf) where fewer were found."""
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        if len(self) == 0:
            raise ValueError("the index is empty")
        queries = _normalise(queries)
        if queries.shape[1] != self.dim:
            raise ValueError(f"queries have dimension {queries.shape[1]}, the index {self.dim}")
        fetch = min(topk + len(self._removed), len(self.vectors))
        approximate_codes = self.quantize is not None or self.backend == "ivfpq"
        if self.backend == "exact" and self.quantize is None:
            scores, rows = exact_topk(queries, self.vectors, fetch)
        else:
            index = self._faiss_index()
            fetch = min(fetch * (self.rescore if approximate_codes else 1), len(self.vectors))
            if self.backend == "hnsw":
                index.hnsw.efSearch = max(self.ef_search, fetch)
            scores, rows = index.search(self._codes(queries), fetch)
            if approximate_codes:  # rescore the candidates with the float vectors
                safe = np.maximum(rows, 0)
                scores = np.einsum("qd,qkd->qk", queries, np.asarray(self.vectors[safe.ravel()]).reshape(
                    *safe.shape, self.dim)).astype("float32")
        scores = np.where(rows >= 0, scores, -np.inf).astype("float32")
        if self._removed:
            hidden = np.isin(rows, list(self._removed))
            rows, scores = np.where(hidden, -1, rows), np.where(hidden, -np.inf, scores).astype("float32")
        order = np.argsort(-scores, axis=1, kind="stable")[:, :topk]
        return np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)

    def search(self, queries, topk=10, batch_size=64, mode="dense", weight=None, depth=100, query_vectors=None,
               return_ids=False, fusion=None):
        """For each query: [(text, or the id of a bare vector, score)] best first ([(id, text, score)] with
        ``return_ids``). ``mode``: "dense" (score: cosine), "lexical" (BM25 over the texts; only texts sharing a
        term), or "hybrid": the top ``depth`` of each, fused (``fuse``) with ``weight`` on the dense side and
        1 - weight on BM25's (score: the fused value). ``weight`` and ``fusion`` default to the index's
        ``hybrid_weight`` and ``fusion`` (0.5 and "score" until ``calibrate`` sets them from labelled queries).
        ``query_vectors``: the queries' embeddings when already computed (else the encoder embeds them)."""
        if mode not in SEARCH_MODES:
            raise ValueError(f"mode must be one of {SEARCH_MODES}, got {mode!r}")
        if mode == "dense":
            scores, indices = self.search_vectors(self._queries(queries, batch_size) if query_vectors is None
                                                  else query_vectors, topk)
        elif mode == "lexical":
            scores, indices = self.search_lexical([queries] if isinstance(queries, str) else list(queries), topk)
        else:
            weight = self.hybrid_weight if weight is None else weight
            if not 0.0 <= weight <= 1.0:
                raise ValueError(f"weight must be in [0, 1], got {weight}")
            best = [fuse(d, lex, weight, fusion or self.fusion, topk)
                    for d, lex in zip(*self._both_sides(queries, depth, batch_size, query_vectors))]
            indices = [[i for i, _ in row] for row in best]
            scores = [[v for _, v in row] for row in best]
        if return_ids:
            return [[(self.ids[i], self.texts[i], float(s)) for s, i in zip(srow, irow) if i >= 0]
                    for srow, irow in zip(scores, indices)]
        return [[(self.texts[i] if self.texts[i] is not None else self.ids[i], float(s))
                 for s, i in zip(srow, irow) if i >= 0] for srow, irow in zip(scores, indices)]

    def _both_sides(self, queries, depth, batch_size=64, query_vectors=None):
        """Per query, the dense and the BM25 top ``depth`` as lists of (row, score), best first."""
        texts = [queries] if isinstance(queries, str) else list(queries)
        lex_scores, lex_rows = self.search_lexical(texts, depth)
        scores, rows = self.search_vectors(self._queries(texts, batch_size) if query_vectors is None
                                           else query_vectors, depth)
        dense = [[(int(i), float(v)) for v, i in zip(srow, irow) if i >= 0] for srow, irow in zip(scores, rows)]
        return dense, [list(zip(irow, srow)) for srow, irow in zip(lex_scores, lex_rows)]

    def calibrate(self, queries, gold, weights=CALIBRATION_WEIGHTS, fusions=FUSIONS, depth=100, k=10,
                  batch_size=64, query_vectors=None):
        """Choose the hybrid ``fusion`` and dense ``weight`` from a few labelled queries: the pair with the best
        MRR@``k`` of the ids in ``gold`` (per query, the id of its relevant entry, or a collection of ids) becomes
        the index's default (saved with it). ``weights`` include 0 (BM25 alone) and 1 (dense alone), so on these
        queries the default is never worse than the better of the two; ties go to the first fusion, then to the
        weight nearest 0.5. Returns {"fusion", "weight", "mrr@k": {fusion: {weight: MRR}}, "queries"}."""
        from .evaluation import mrr_at_k

        texts = [queries] if isinstance(queries, str) else list(queries)
        if len(texts) != len(gold) or not texts:
            raise ValueError(f"calibrate needs one gold id per query, got {len(texts)} queries and {len(gold)} ids")
        unknown = [g for g in gold for i in (g if isinstance(g, (list, tuple, set, frozenset)) else [g])
                   if i not in self._rows]
        if unknown:
            raise KeyError(f"gold id {unknown[0]!r} is not in the index")
        gold_rows = [{self._rows[i] for i in (g if isinstance(g, (list, tuple, set, frozenset)) else [g])}
                     for g in gold]
        dense, lexical = self._both_sides(texts, depth, batch_size, query_vectors)
        table = {f: {w: mrr_at_k([[i for i, _ in fuse(d, lex, w, f, k)] for d, lex in zip(dense, lexical)],
                                 gold_rows, k) for w in weights} for f in fusions}
        best = max(((f, w) for f in fusions for w in weights),
                   key=lambda fw: (table[fw[0]][fw[1]], -fusions.index(fw[0]), -abs(fw[1] - 0.5)))
        self.fusion, self.hybrid_weight = best
        self.calibration = {"fusion": best[0], "weight": best[1], f"mrr@{k}": table, "queries": len(texts)}
        return self.calibration

    def search_lexical(self, texts, topk=10):
        """BM25 (scores, indices) lists per query text, best first; only texts that share a term."""
        if any(t is None for t in self.texts) or not self.texts:
            raise ValueError("lexical search needs the index's texts (this index holds bare vectors or is empty)")
        if self._bm25 is None:
            bm25s = require("bm25s", "search", "BM25 (lexical and hybrid search)")
            self._bm25 = bm25s.BM25()
            self._bm25.index([lexical_terms(t, self.lexical) for t in self.texts], show_progress=False)
        k = min(topk + len(self._removed), len(self.texts))
        ids, values = self._bm25.retrieve([lexical_terms(t, self.lexical) for t in texts], k=k, show_progress=False)
        keep = (values > 0) & ~np.isin(ids, list(self._removed)) & (np.cumsum(values > 0, axis=1) <= k)
        keep &= np.cumsum(keep, axis=1) <= topk
        return ([list(map(float, v[m])) for v, m in zip(values, keep)],
                [list(map(int, i[m])) for i, m in zip(ids, keep)])

    def _codes(self, vectors):
        """What the faiss structure holds for float vectors: sign bits for binary, the vectors otherwise."""
        return np.packbits(vectors > 0, axis=1) if self.quantize == "binary" else np.ascontiguousarray(vectors)

    def _faiss_index(self):
        if self._faiss is None:
            faiss = require("faiss", "search", f"backend={self.backend!r}")
            n, vectors = len(self.vectors), self.vectors
            threads = faiss.omp_get_max_threads()
            if n < SMALL:  # small structures build faster on one thread than with OpenMP's hand-offs
                faiss.omp_set_num_threads(1)
            try:
                self._faiss = self._build(faiss, n, vectors)
            finally:
                faiss.omp_set_num_threads(threads)
        return self._faiss

    def _build(self, faiss, n, vectors):
        """A new faiss structure holding every row (trained first when it needs it)."""
        if self.quantize == "binary":
            index = faiss.IndexBinaryFlat(8 * -(-self.dim // 8))
        elif self.backend == "hnsw":
            index = (faiss.IndexHNSWSQ(self.dim, faiss.ScalarQuantizer.QT_8bit, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
                     if self.quantize == "int8" else faiss.IndexHNSWFlat(self.dim, self.hnsw_m,
                                                                        faiss.METRIC_INNER_PRODUCT))
            index.hnsw.efConstruction = self.ef_construction
        elif self.quantize == "int8":
            index = faiss.IndexScalarQuantizer(self.dim, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
        else:
            index = self._factory_index(faiss, n)
        if not index.is_trained:
            sample = vectors if n <= TRAIN_SAMPLE else vectors[np.sort(
                np.random.default_rng(0).choice(n, TRAIN_SAMPLE, replace=False))]
            try:
                index.train(np.ascontiguousarray(sample))
            except RuntimeError as e:
                raise ValueError(f"faiss could not train {self.backend} on {n} vectors: "
                                 f"{str(e).strip().splitlines()[-1]}") from None
        for start in range(0, n, 262_144):  # add in blocks: a memory-mapped array is read once
            index.add(self._codes(np.asarray(vectors[start:start + 262_144])))
        if hasattr(index, "nprobe"):
            index.nprobe = self.nprobe
        return index

    def _factory_index(self, faiss, n):
        """The ivfpq structure (lists sized to the corpus, dim / 8 one-byte codes) or the faiss factory's."""
        if self.backend == "ivfpq":
            if n < 256:
                raise ValueError(f"backend='ivfpq' trains 256 centroids per code byte and needs at least 256 vectors; "
                                 f"this index has {n}: use backend='exact'")
            lists = 2 ** max(0, round(math.log2(math.sqrt(n) if n < 100_000 else 4 * math.sqrt(n))))
            bits = min(8, max(4, int(math.log2(n / 39))))  # faiss wants >= 39 training vectors a centroid
            factory = f"IVF{lists},PQ{self.pq_bytes or max(1, self.dim // 8)}x{bits}"
        else:
            factory = self.factory or default_factory(n)
        lists = re.search(r"IVF(\d+)", factory)
        if lists and int(lists.group(1)) > n:
            raise ValueError(f"faiss factory {factory!r} needs at least {lists.group(1)} vectors to train its "
                             f"lists (faiss advises 39x that); this index has {n}: use "
                             f"factory=None (picked for the size), a smaller IVF, or backend='exact'")
        try:
            return faiss.index_factory(self.dim, factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as e:
            raise ValueError(f"faiss could not build {factory!r}: {str(e).strip().splitlines()[-1]}") from None

    def save(self, directory):
        """vectors.npy + texts.json + ids.json (+ faiss.index when built) + index.json (settings and the sha256 of
        the others), written to a temp folder then moved into place. Removed rows are dropped first (a built
        structure is rebuilt without them, so loading never has to)."""
        built = self._faiss is not None
        self.compact()
        if built:
            self._faiss_index()
        with atomic_dir(directory) as tmp:
            with open(os.path.join(tmp, "vectors.npy"), "wb") as f:  # in blocks: the vectors may be memory-mapped
                np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False,
                                                         "shape": self.vectors.shape})
                for start in range(0, len(self.vectors), 262_144):
                    f.write(np.ascontiguousarray(self.vectors[start:start + 262_144], dtype="<f4").tobytes())
            for name, values in (("texts.json", self.texts), ("ids.json", self.ids)):
                with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                    json.dump(values, f, ensure_ascii=False)
            if self._faiss is not None:
                import faiss

                write = faiss.write_index_binary if self.quantize == "binary" else faiss.write_index
                write(self._faiss, os.path.join(tmp, FAISS_FILE))
            meta = dict(self.settings(), files=file_manifest(tmp))
            with open(os.path.join(tmp, INDEX_FILE), "w", encoding="utf-8") as f:
                json.dump(meta, f)

    @classmethod
    def load(cls, directory, encoder=None, mmap=True):
        """An index written by ``save``, its vectors memory-mapped (``mmap=False``: read into memory); a damaged,
        truncated or missing file raises CheckpointError naming it."""
        directory = os.fspath(directory)
        meta = read_json_file(os.path.join(directory, INDEX_FILE), "a search index's settings")
        if meta.get("backend") in BACKEND_MODULES:  # a folder pointing at a Milvus collection
            return backend_class(meta["backend"]).load(directory, encoder)
        files = meta.pop("files", None)
        if files is not None:
            check_manifest(directory, files, INDEX_FILE)
        try:
            index = cls(encoder=encoder, **meta)
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{os.path.join(directory, INDEX_FILE)}: unexpected settings ({e})") from None
        if encoder is not None and getattr(encoder, "dim", index.dim) != index.dim:
            raise CheckpointError(f"{os.path.join(directory, INDEX_FILE)}: the index holds {index.dim}-d vectors"
                                  f"{' of ' + index.model if index.model else ''}; the encoder gives {encoder.dim}-d "
                                  f"vectors: search it with the model it was built with")
        vectors = os.path.join(directory, "vectors.npy")
        try:
            index.vectors = np.load(vectors, mmap_mode="r" if mmap else None)
        except (OSError, ValueError, EOFError) as e:
            raise CheckpointError(f"{vectors}: cannot read the vectors ({type(e).__name__}: {e})") from None
        with open(os.path.join(directory, "texts.json"), encoding="utf-8") as f:
            index.texts = json.load(f)
        ids = os.path.join(directory, "ids.json")
        if os.path.exists(ids):
            with open(ids, encoding="utf-8") as f:
                index.ids = json.load(f)
        else:  # written before ids: rows
            index.ids = list(range(len(index.texts)))
        index._rows = {i: n for n, i in enumerate(index.ids)}
        structure = os.path.join(directory, FAISS_FILE)
        if os.path.exists(structure):
            import faiss

            read = faiss.read_index_binary if index.quantize == "binary" else faiss.read_index
            index._faiss = read(structure)
            if hasattr(index._faiss, "nprobe"):
                index._faiss.nprobe = index.nprobe
        return index
