"""Semantic search: exact cosine top-k in numpy (chunked) or approximate with faiss, behind one API; BM25 over the
same texts (the bm25s library) and hybrid search fusing both rankings (reciprocal-rank fusion)."""

from __future__ import annotations

import json
import math
import os
import re
import unicodedata

import numpy as np

from .errors import CheckpointError
from .paths import atomic_dir, check_manifest, file_manifest, read_json_file
from .vectors import normalize_rows

INDEX_FILE = "index.json"
LEXICAL_TERMS = ("bigram", "jieba")
SEARCH_MODES = ("dense", "lexical", "hybrid")
RRF_K = 60  # reciprocal-rank fusion's constant (Cormack et al. 2009)


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
    """Texts (or bare vectors) indexed by L2-normalised embeddings; cosine top-k search.

    >>> index = SemanticIndex()                         # exact search with zoo.DEFAULT_ENCODER
    >>> index = SemanticIndex(encoder)                  # ... or any model with encode()
    >>> index.add(corpus_texts)
    >>> index.search("怎么开通花呗", topk=5)            # [[(text, score), ...]]
    >>> SemanticIndex(dim=256, backend="faiss", factory="IVF1024,Flat", nprobe=32).add(vectors=v)

    >>> index.search("怎么开通花呗", mode="hybrid")     # dense + BM25, fused by reciprocal rank

    ``backend="faiss"`` builds a faiss index (inner product) from ``factory`` when first searched (training it
    on the added vectors if the factory needs training); ``factory=None`` picks one for the corpus size
    (``default_factory``). Exact search needs no build. ``lexical``: the BM25 terms of the texts (character
    bigrams or jieba words, ``lexical_terms``); the BM25 index is built at the first lexical or hybrid search.
    """

    def __init__(self, encoder=None, dim=None, backend="exact", factory=None, nprobe=32, lexical="bigram",
                 model=None):
        if backend not in ("exact", "faiss"):
            raise ValueError(f"backend must be 'exact' or 'faiss', got {backend!r}")
        if lexical not in LEXICAL_TERMS:
            raise ValueError(f"lexical must be one of {LEXICAL_TERMS}, got {lexical!r}")
        if encoder is None and dim is None:  # the shipped general sentence-embedding model (a saved SentenceEncoder)
            from .paths import DEFAULT_ENCODER
            from .presets import load_saved

            encoder, model = load_saved(DEFAULT_ENCODER), DEFAULT_ENCODER
        self.encoder, self.backend, self.factory, self.nprobe = encoder, backend, factory, nprobe
        self.lexical, self.model = lexical, model  # model: the encoder's name or path, recorded by save()
        self.dim = dim or encoder.dim
        self.vectors = np.zeros((0, self.dim), dtype="float32")
        self.texts = []
        self._faiss = self._bm25 = None

    def __len__(self):
        return len(self.vectors)

    def add(self, texts=None, vectors=None, batch_size=64):
        """Add texts (encoded with the encoder) and/or their precomputed vectors."""
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
        self.vectors = np.concatenate([self.vectors, vectors]) if len(self.vectors) else vectors
        self.texts += list(texts) if texts is not None else [None] * len(vectors)
        self._faiss = self._bm25 = None
        return self

    def _queries(self, queries, batch_size):
        if isinstance(queries, str):
            queries = [queries]
        if isinstance(queries, np.ndarray) and queries.dtype != object:
            return _normalise(queries)
        if self.encoder is None:
            raise ValueError("this index has no encoder: search with vectors")
        return _normalise(self.encoder.encode(list(queries), batch_size=batch_size))

    def search_vectors(self, queries, topk=10):
        """(scores, indices) arrays [n_queries, topk]; -1 indices where faiss found fewer."""
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        if len(self.vectors) == 0:
            raise ValueError("the index is empty")
        queries = _normalise(queries)
        if self.backend == "exact":
            return exact_topk(queries, self.vectors, topk)
        index = self._faiss_index()
        scores, indices = index.search(queries, min(topk, len(self.vectors)))
        return scores, indices

    def search(self, queries, topk=10, batch_size=64, mode="dense", weight=0.5, depth=100, query_vectors=None):
        """For each query: [(text or row index, score)] best first. ``mode``: "dense" (score: cosine), "lexical"
        (BM25 over the texts; only texts sharing a term), or "hybrid": the top ``depth`` of each, fused by
        reciprocal rank, ``weight`` on the dense ranking and 1 - weight on BM25's (score: the fused value).
        ``query_vectors``: the queries' embeddings when already computed (else the encoder embeds them)."""
        if mode not in SEARCH_MODES:
            raise ValueError(f"mode must be one of {SEARCH_MODES}, got {mode!r}")
        if mode == "dense":
            scores, indices = self.search_vectors(self._queries(queries, batch_size) if query_vectors is None
                                                  else query_vectors, topk)
        else:
            texts = [queries] if isinstance(queries, str) else list(queries)
            scores, indices = self.search_lexical(texts, topk if mode == "lexical" else depth)
            if mode == "hybrid":
                if not 0.0 <= weight <= 1.0:
                    raise ValueError(f"weight must be in [0, 1], got {weight}")
                _, dense = self.search_vectors(self._queries(texts, batch_size) if query_vectors is None
                                               else query_vectors, depth)
                fused = [reciprocal_rank_fusion([[i for i in drow if i >= 0], lrow], [weight, 1.0 - weight])
                         for drow, lrow in zip(dense, indices)]
                best = [sorted(f.items(), key=lambda kv: (-kv[1], kv[0]))[:topk] for f in fused]
                indices = [[i for i, _ in row] for row in best]
                scores = [[v for _, v in row] for row in best]
        return [[(self.texts[i] if self.texts[i] is not None else int(i), float(s))
                 for s, i in zip(srow, irow) if i >= 0] for srow, irow in zip(scores, indices)]

    def search_lexical(self, texts, topk=10):
        """BM25 (scores, indices) lists per query text, best first; only texts that share a term."""
        if any(t is None for t in self.texts) or not self.texts:
            raise ValueError("lexical search needs the index's texts (this index holds bare vectors or is empty)")
        if self._bm25 is None:
            import bm25s

            self._bm25 = bm25s.BM25()
            self._bm25.index([lexical_terms(t, self.lexical) for t in self.texts], show_progress=False)
        k = min(topk, len(self.texts))
        ids, values = self._bm25.retrieve([lexical_terms(t, self.lexical) for t in texts], k=k, show_progress=False)
        keep = values > 0
        return ([list(map(float, v[m])) for v, m in zip(values, keep)],
                [list(map(int, i[m])) for i, m in zip(ids, keep)])

    def _faiss_index(self):
        if self._faiss is None:
            try:
                import faiss
            except ImportError:
                raise ImportError("backend='faiss' needs faiss: pip install faiss-cpu") from None
            factory = self.factory or default_factory(len(self.vectors))
            lists = re.search(r"IVF(\d+)", factory)
            if lists and int(lists.group(1)) > len(self.vectors):
                raise ValueError(f"faiss factory {factory!r} needs at least {lists.group(1)} vectors to train its "
                                 f"lists (faiss advises 39x that); this index has {len(self.vectors)}: use "
                                 f"factory=None (picked for the size), a smaller IVF, or backend='exact'")
            try:
                index = faiss.index_factory(self.dim, factory, faiss.METRIC_INNER_PRODUCT)
                if not index.is_trained:
                    index.train(self.vectors)
            except RuntimeError as e:
                raise ValueError(f"faiss could not build {factory!r} on {len(self.vectors)} vectors: "
                                 f"{str(e).strip().splitlines()[-1]}") from None
            index.add(self.vectors)
            if hasattr(index, "nprobe"):
                index.nprobe = self.nprobe
            self._faiss = index
        return self._faiss

    def save(self, directory):
        """vectors.npy + texts.json + index.json (settings and the sha256 of the other two), written to a temp
        folder then moved into place."""
        with atomic_dir(directory) as tmp:
            np.save(os.path.join(tmp, "vectors.npy"), self.vectors)
            with open(os.path.join(tmp, "texts.json"), "w", encoding="utf-8") as f:
                json.dump(self.texts, f, ensure_ascii=False)
            meta = {"dim": self.dim, "backend": self.backend, "factory": self.factory, "nprobe": self.nprobe,
                    "lexical": self.lexical, "model": self.model, "files": file_manifest(tmp)}
            with open(os.path.join(tmp, INDEX_FILE), "w", encoding="utf-8") as f:
                json.dump(meta, f)

    @classmethod
    def load(cls, directory, encoder=None):
        """An index written by ``save``; a damaged, truncated or missing file raises CheckpointError naming it."""
        directory = os.fspath(directory)
        meta = read_json_file(os.path.join(directory, INDEX_FILE), "a search index's settings")
        files = meta.pop("files", None)
        if files is not None:
            check_manifest(directory, files, INDEX_FILE)
        try:
            index = cls(encoder=encoder, **meta)
        except TypeError as e:
            raise CheckpointError(f"{os.path.join(directory, INDEX_FILE)}: unexpected settings ({e})") from None
        if encoder is not None and getattr(encoder, "dim", index.dim) != index.dim:
            raise CheckpointError(f"{os.path.join(directory, INDEX_FILE)}: the index holds {index.dim}-d vectors"
                                  f"{' of ' + index.model if index.model else ''}; the encoder gives {encoder.dim}-d "
                                  f"vectors: search it with the model it was built with")
        vectors = os.path.join(directory, "vectors.npy")
        try:
            index.vectors = np.load(vectors)
        except (OSError, ValueError, EOFError) as e:
            raise CheckpointError(f"{vectors}: cannot read the vectors ({type(e).__name__}: {e})") from None
        with open(os.path.join(directory, "texts.json"), encoding="utf-8") as f:
            index.texts = json.load(f)
        return index
