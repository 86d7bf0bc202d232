"""The vectors of a ``SemanticIndex`` held in this process: exact cosine top-k in numpy (chunked), or approximate
with faiss (HNSW, IVF-PQ, any factory string, int8 and binary codes rescored with the float vectors); BM25 over the
same texts (``zoo.retrieval.lexical``). ``SemanticIndex(backend="exact" | "hnsw" | "ivfpq" | "faiss")`` makes one."""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter

import numpy as np

from ..errors import CheckpointError, require
from ..paths import atomic_dir, check_manifest, file_manifest
from ..vectors import normalize_rows
from .base import BACKENDS, INDEX_FILE, SemanticIndex
from .lexical import BM25

QUANTIZE = (None, "int8", "binary")
QUANTIZED_BACKENDS = {"int8": ("exact", "hnsw"), "binary": ("exact",)}  # where codes can replace the float vectors
FAISS_FILE = "faiss.index"
SMALL = 50_000  # faiss structures for fewer vectors are built on one thread
TRAIN_SAMPLE = 200_000  # vectors a faiss structure is trained on (a random sample of larger corpora)


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


class VectorIndex(SemanticIndex):
    """A ``SemanticIndex`` whose vectors, texts and ids are held in this process (``SemanticIndex(...,
    backend="exact" | "hnsw" | "ivfpq" | "faiss")``); ``save`` writes them to a folder, ``SemanticIndex.load`` maps
    them back.

    :param encoder: as ``SemanticIndex``'s.
    :param dim: as ``SemanticIndex``'s.
    :param backend: "exact", "hnsw", "ivfpq" or "faiss" (see ``SemanticIndex``).
    :param factory: for backend "faiss": a faiss ``index_factory`` string (None: sized to the corpus).
    :param nprobe: for "ivfpq" and "faiss" IVF structures: the lists searched.
    :param lexical: as ``SemanticIndex``'s.
    :param model: as ``SemanticIndex``'s.
    :param quantize: "int8" (exact, hnsw) or "binary" (exact): scan compact codes, then rescore with the floats.
    :param rescore: the candidates rescored with the float vectors, as a multiple of ``topk``.
    :param hnsw_m: for "hnsw": links per node.
    :param ef_construction: for "hnsw": the candidate list while building.
    :param ef_search: for "hnsw": the candidate list while searching.
    :param pq_bytes: for "ivfpq": bytes of code per vector (None: dim / 8; must divide dim).
    :param hybrid_weight: as ``SemanticIndex``'s.
    :param fusion: as ``SemanticIndex``'s.
    :param calibration: as ``SemanticIndex``'s.
    :param vector_source: as ``SemanticIndex``'s.
    """

    def __init__(self, encoder=None, dim=None, *, backend="exact", factory=None, nprobe=32, lexical="bigram",
                 model=None, quantize=None, rescore=4, hnsw_m=32, ef_construction=200, ef_search=128, pq_bytes=None,
                 hybrid_weight=0.5, fusion="score", calibration=None, vector_source=None):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if quantize not in QUANTIZE:
            raise ValueError(f"quantize must be one of {QUANTIZE}, got {quantize!r}")
        if quantize is not None and backend not in QUANTIZED_BACKENDS[quantize]:
            raise ValueError(f"quantize={quantize!r} is for backend {' or '.join(QUANTIZED_BACKENDS[quantize])} "
                             f"(ivfpq quantizes by itself), got backend={backend!r}")
        if factory is not None and backend != "faiss":
            raise ValueError(f"a faiss factory string is for backend='faiss', not {backend!r}")
        if rescore < 1:
            raise ValueError(f"rescore must be >= 1, got {rescore}")
        self.backend = backend
        super().__init__(encoder, dim, model=model, lexical=lexical, hybrid_weight=hybrid_weight, fusion=fusion,
                         calibration=calibration, vector_source=vector_source)
        self.factory, self.nprobe = factory, nprobe
        self.quantize, self.rescore, self.hnsw_m = quantize, rescore, hnsw_m
        self.ef_construction, self.ef_search, self.pq_bytes = ef_construction, ef_search, pq_bytes
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
                "calibration": self.calibration, "vector_source": self.vector_source}

    def __len__(self):
        return len(self.vectors) - len(self._removed)

    def add(self, texts=None, vectors=None, ids=None, batch_size=64):
        """Add texts (encoded with the encoder) and/or their precomputed vectors.

        :param texts: the texts (None: bare vectors).
        :param vectors: their vectors [n, dim] (None: the encoder embeds ``texts``).
        :param ids: unique ints or strings (None: the next integers).
        :param batch_size: texts per forward pass.
        :returns: the index.
        """
        if vectors is None:
            if texts is None:
                raise ValueError("add() needs texts or vectors")
            if self.encoder is None:
                raise ValueError("this index has no encoder: pass vectors")
            vectors = self._encoded(self.encoder.encode, list(texts), batch_size=batch_size)
        vectors = normalize_rows(np.atleast_2d(vectors))
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
        """Remove the entries with these ids (KeyError names an unknown one).

        :param ids: the ids to remove.
        """
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

    def search_vectors(self, queries, topk=10):
        """(scores, rows) arrays [n_queries, topk], best first; row -1 (score -inf) where fewer were found.

        :param queries: query vectors [n, dim] (normalised here).
        :param topk: rows per query.
        """
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        if len(self) == 0:
            raise ValueError("the index is empty")
        queries = normalize_rows(np.atleast_2d(queries))
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

    def _dense(self, vectors, k, filter):
        scores, rows = self.search_vectors(vectors, k)
        return [[(int(r), self.ids[r], self.texts[r], float(s)) for s, r in zip(srow, rrow) if r >= 0]
                for srow, rrow in zip(scores, rows)]

    def _lexical(self, texts, k, filter):
        scores, rows = self.search_lexical(texts, k)
        return [[(r, self.ids[r], self.texts[r], s) for s, r in zip(srow, rrow)] for srow, rrow in zip(scores, rows)]

    def _missing(self, ids):
        return [i for i in ids if i not in self._rows]

    def search_lexical(self, texts, topk=10):
        """BM25 (scores, indices) lists per query text, best first; only texts that share a term.

        :param texts: the query texts.
        :param topk: rows per query.
        """
        if any(t is None for t in self.texts) or not self.texts:
            raise ValueError("lexical search needs the index's texts (this index holds bare vectors or is empty)")
        if self._bm25 is None:
            self._bm25 = BM25(self.texts, self.lexical)
        hits = self._bm25.top(texts, topk, hidden=self._removed)
        return [[s for _, s in row] for row in hits], [[r for r, _ in row] for row in hits]

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
        """Write vectors.npy, texts.json, ids.json (+ faiss.index when built) and index.json (settings and the
        sha256 of the others) to a temp folder, then move it into place. Removed rows are dropped first (a built
        structure is rebuilt without them, so loading never has to).

        :param directory: the folder to write.
        """
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
    def _load(cls, directory, meta, encoder, mmap=True):
        """The vectors memory-mapped (``mmap=False``: read into memory)."""
        files = meta.pop("files", None)
        if files is not None:
            check_manifest(directory, files, INDEX_FILE)
        if encoder is not None and getattr(encoder, "dim", meta.get("dim")) != meta.get("dim"):
            model = meta.get("model")
            raise CheckpointError(f"{os.path.join(directory, INDEX_FILE)}: the index holds {meta.get('dim')}-d vectors"
                                  f"{' of ' + model if model else ''}; the encoder gives {encoder.dim}-d "
                                  f"vectors: search it with the model it was built with")
        cls._check_settings(directory, meta)
        try:
            index = cls(encoder=encoder, **meta)
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{os.path.join(directory, INDEX_FILE)}: unexpected settings ({e})") from None
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
