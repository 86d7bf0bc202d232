"""Semantic search behind one API, ``SemanticIndex``: its backends live in modules of their own --
``zoo.retrieval.local`` (exact cosine top-k in numpy, or faiss structures, in this process) and ``zoo.retrieval.milvus``
(a Milvus collection); BM25 is ``zoo.retrieval.lexical``. This module holds what every backend shares: the settings they
check alike, query encoding, the three search modes, hybrid fusion (normalised scores or reciprocal ranks) and
the calibration of the fusion weight from a few labelled queries."""

from __future__ import annotations

import importlib
import inspect
import os

import numpy as np

from ..errors import CheckpointError, ConfigError
from ..inference.pipeline import engine_argument
from ..logs import log
from ..paths import read_json_file
from ..vectors import normalize_rows
from .lexical import check_terms

INDEX_FILE = "index.json"
SEARCH_MODES = ("dense", "lexical", "hybrid")
FUSIONS = ("score", "rrf")  # min-max normalised scores, weighted sum; reciprocal-rank fusion
LOSSLESS_PRECISIONS = {"fp32", "onnx-fp32"}  # float32 vectors, equal within rounding (zoo.inference)
RRF_K = 60  # reciprocal-rank fusion's constant (Cormack et al. 2009)
CALIBRATION_WEIGHTS = tuple(round(w / 10, 1) for w in range(11))  # dense weights tried by calibrate(), 0 and 1 too
BACKENDS = ("exact", "hnsw", "ivfpq", "faiss")  # the vectors held in this process (zoo.retrieval.local)
# backend -> (module, class), imported when used
BACKEND_MODULES = {**{b: ("zoo.retrieval.local", "VectorIndex") for b in BACKENDS},
                   "milvus": ("zoo.retrieval.milvus", "MilvusIndex")}


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
    """The ``SemanticIndex`` subclass of a backend (ValueError for an unknown one)."""
    if backend not in BACKEND_MODULES:
        raise ValueError(f"backend must be one of {tuple(BACKEND_MODULES)}, got {backend!r}")
    module, name = BACKEND_MODULES[backend]
    return getattr(importlib.import_module(module), name)


class SemanticIndex:
    """Texts (or bare vectors) with ids, indexed by L2-normalised embeddings; cosine top-k search.

    ```python
    index = SemanticIndex()                         # exact search with zoo.DEFAULT_ENCODER
    index = SemanticIndex(encoder)                  # ... or any model with encode()
    index.add(corpus_texts)                         # ids 0, 1, 2, ... (or ids=[...])
    index.search("怎么开通花呗", topk=5)            # [[(text, score), ...]]
    index.search("怎么开通花呗", mode="hybrid")     # dense + BM25, scores fused (calibrate() picks the weight)
    index.remove([3, 7]); index.save("idx"); SemanticIndex.load("idx", encoder)   # vectors memory-mapped
    ```

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

    ``SemanticIndex(..., backend=B)`` gives that backend's class: ``VectorIndex`` (exact, hnsw, ivfpq, faiss) or
    ``MilvusIndex`` (milvus), whose own settings are keyword arguments documented there.

    :param encoder: any model with ``encode`` (and ``dim``); None with ``dim``: an index of bare vectors; None
        without ``dim``: the shipped general sentence-embedding model (``zoo.DEFAULT_ENCODER``).
    :param dim: the vectors' width (None: ``encoder.dim``).
    :param model: the encoder's name, saved with the index (``zoo search`` loads it back).
    :param lexical: the BM25 terms: "bigram" (character bigrams) or "jieba" (words); ``lexical_terms``.
    :param hybrid_weight: the dense side's weight in hybrid search, in [0, 1].
    :param fusion: "score" (min-max normalised scores, weighted sum) or "rrf" (reciprocal-rank fusion).
    :param calibration: what ``calibrate`` chose (saved with the index).
    :param vector_source: how the stored vectors were made (``SentenceEncoder.vector_source``): later texts and
        queries are encoded the same way.
    """

    backend = None
    filters = False  # whether search takes filter expressions on metadata

    def __new__(cls, *args, backend="exact", **kwargs):
        """``SemanticIndex(..., backend=B)`` (keyword only) makes the index of backend B (``BACKEND_MODULES``),
        a subclass; the subclass' ``__init__`` then checks every other argument.

        :param args: the backend's arguments.
        :param backend: "exact", "hnsw", "ivfpq", "faiss" (``VectorIndex``) or "milvus" (``MilvusIndex``).
        :param kwargs: the backend's arguments.
        """
        if cls is SemanticIndex:
            cls = backend_class(backend)
        return super().__new__(cls)

    def __init__(self, encoder=None, dim=None, model=None, lexical="bigram", hybrid_weight=0.5, fusion="score",
                 calibration=None, vector_source=None):
        """The settings every backend checks alike (the class' parameters)."""
        check_terms(lexical)
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        if not 0.0 <= hybrid_weight <= 1.0:
            raise ValueError(f"hybrid_weight must be in [0, 1], got {hybrid_weight}")
        if encoder is None and dim is None:
            from ..paths import DEFAULT_ENCODER
            from ..presets import load_saved

            encoder, model = load_saved(DEFAULT_ENCODER), DEFAULT_ENCODER
        self.encoder, self.model, self.lexical = encoder, model, lexical  # model: the encoder's name, saved
        self.hybrid_weight, self.fusion, self.calibration = hybrid_weight, fusion, calibration
        self.vector_source, self._source_checked = vector_source, False  # how the stored vectors were made
        self.dim = int(dim or encoder.dim)
        scoring = getattr(encoder, "similarity_fn_name", "cosine")
        if scoring not in ("cosine", "dot") or (scoring == "dot" and not getattr(encoder, "normalize", True)):
            raise ConfigError(f"an index ranks by cosine; this encoder scores by {scoring!r}"
                              f"{' of unnormalised vectors' if scoring == 'dot' else ''}: set its "
                              "similarity_fn_name to 'cosine' to index it", param="encoder")
        if encoder is not None and getattr(encoder, "dim", self.dim) != self.dim:
            raise ConfigError(f"{self._where()} holds {self.dim}-d vectors{' of ' + model if model else ''}; the "
                              f"encoder gives {encoder.dim}-d vectors: search it with the model it was built with")

    def _where(self):
        return f"this {self.backend} index"

    def _encoded(self, encode, texts, **kwargs):
        """``encode(texts, ...)`` of the encoder, checked against how the stored vectors were made
        (``vector_source``: runtime, engine (its ``precision`` field), ONNX graph sha256), which the first texts embedded record: vectors
        of another model's graph at the same precision are refused. One vector per index: where the stored vectors
        were made at a lossy precision (int8, openvino-int8, bf16), later texts and queries are encoded at that
        same precision (unless the caller names one), so that two int8 graphs never meet in one index; a caller's
        other lossy precision is warned of once."""
        source = getattr(self.encoder, "vector_source", None)
        stored = self.vector_source
        if "precision" in kwargs:  # the engine's name before zoo 0.3
            kwargs["engine"] = engine_argument(kwargs.pop("engine", "auto"), kwargs.pop("precision"))
        if source is not None and stored and stored.get("precision") not in LOSSLESS_PRECISIONS \
                and "engine" not in kwargs:
            kwargs["engine"] = stored["precision"]
        if source is not None and not self._source_checked:
            now = source(kwargs.get("engine", "auto"))
            if stored is None:
                self.vector_source = now
            elif stored.get("precision") == now["precision"] and None not in (stored.get("graph_sha256"),
                                                                             now["graph_sha256"]) \
                    and stored["graph_sha256"] != now["graph_sha256"]:
                raise ConfigError(f"{self._where()} holds vectors of another model's graph (sha256 "
                                  f"{stored['graph_sha256'][:12]}, this encoder's {now['graph_sha256'][:12]}, both "
                                  f"{now['precision']}): search it with the model it was built with")
            elif stored.get("precision") != now["precision"] and not {stored.get("precision"), now["precision"]} <= \
                    LOSSLESS_PRECISIONS:
                log.warning("%s holds %s vectors; these texts are encoded at %s (lossy: scores shift slightly; "
                            "encode them at %s to match)", self._where(), stored.get("precision"), now["precision"],
                            stored.get("precision"))
            self._source_checked = True
        return encode(texts, **kwargs)

    # ------------------------------------------------------------------ what a backend provides
    def _dense(self, vectors, k, filter):
        """Per query vector, the best ``k`` entries as [(key, id, text, score)], best first (``key``: the
        backend's own handle of an entry, used to fuse the two sides)."""
        raise NotImplementedError

    def _lexical(self, texts, k, filter):
        """Per query text, BM25's best ``k`` entries sharing a term, as ``_dense`` gives them."""
        raise NotImplementedError

    def _missing(self, ids):
        """The ids of ``ids`` that are not in the index, in order."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared
    def _query_vectors(self, queries, batch_size=64, query_vectors=None):
        """L2-normalised query vectors [n, dim]: ``query_vectors`` when given, a float array of queries as it is,
        texts embedded by the encoder (with its query prefix, ``encode_queries``, where it has one)."""
        if query_vectors is None and isinstance(queries, np.ndarray) and queries.dtype != object:
            query_vectors = queries
        if query_vectors is None:
            if self.encoder is None:
                raise ValueError("this index has no encoder: search with vectors (query_vectors=)")
            encode = getattr(self.encoder, "encode_queries", self.encoder.encode)
            query_vectors = self._encoded(encode, [queries] if isinstance(queries, str) else list(queries),
                                          batch_size=batch_size)
        vectors = normalize_rows(np.atleast_2d(query_vectors))
        if vectors.shape[1] != self.dim:
            raise ValueError(f"queries have dimension {vectors.shape[1]}, the index {self.dim}")
        return vectors

    def search(self, queries, topk=10, batch_size=64, mode="dense", weight=None, depth=100, query_vectors=None,
               return_ids=False, fusion=None, filter=None):
        """The best entries of each query.

        :param queries: one text, a list of texts, or a float array of query vectors.
        :param topk: entries per query (at least 1).
        :param batch_size: queries per forward pass of the encoder.
        :param mode: "dense" (score: cosine), "lexical" (BM25 over the texts; only texts sharing a term), or
            "hybrid": the top ``depth`` of each, fused (``fuse``) with ``weight`` on the dense side and 1 - weight on
            BM25's (score: the fused value).
        :param weight: hybrid's dense weight (None: the index's ``hybrid_weight``).
        :param depth: hybrid's candidates from each side.
        :param query_vectors: the queries' embeddings when already computed (else the encoder embeds them).
        :param return_ids: give (id, text, score) tuples.
        :param fusion: hybrid's fusion (None: the index's ``fusion``).
        :param filter: a boolean expression on the metadata, for a backend that keeps metadata (Milvus).
        :returns: per query, [(text, or the id of a bare vector, score)] best first ([(id, text, score)] with
            ``return_ids``).
        """
        if mode not in SEARCH_MODES:
            raise ValueError(f"mode must be one of {SEARCH_MODES}, got {mode!r}")
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        if filter is not None and not self.filters:
            raise TypeError(f"filter= needs an index that keeps metadata (backend='milvus'); this is a "
                            f"{self.backend} index")
        if mode == "dense":
            hits = self._dense(self._query_vectors(queries, batch_size, query_vectors), topk, filter)
        elif mode == "lexical":
            hits = self._lexical([queries] if isinstance(queries, str) else list(queries), topk, filter)
        else:
            weight = self.hybrid_weight if weight is None else weight
            if not 0.0 <= weight <= 1.0:
                raise ValueError(f"weight must be in [0, 1], got {weight}")
            hits = [_fused(d, lex, weight, fusion or self.fusion, topk)
                    for d, lex in zip(*self._both_sides(queries, depth, batch_size, query_vectors, filter))]
        if return_ids:
            return [[(i, text, score) for _, i, text, score in row] for row in hits]
        return [[(text if text is not None else i, score) for _, i, text, score in row] for row in hits]

    def _both_sides(self, queries, depth, batch_size=64, query_vectors=None, filter=None):
        """Per query, the dense and the BM25 top ``depth`` (``_dense``'s hits)."""
        texts = [queries] if isinstance(queries, str) else list(queries)
        lexical = self._lexical(texts, depth, filter)
        return self._dense(self._query_vectors(texts, batch_size, query_vectors), depth, filter), lexical

    def calibrate(self, queries, gold, weights=CALIBRATION_WEIGHTS, fusions=FUSIONS, depth=100, k=10,
                  batch_size=64, query_vectors=None):
        """Choose the hybrid ``fusion`` and dense ``weight`` from a few labelled queries: the pair with the best
        MRR@``k`` becomes the index's default (saved with it). ``weights`` include 0 (BM25 alone) and 1 (dense
        alone), so on these queries the default is never worse than the better of the two; ties go to the first
        fusion, then to the weight nearest 0.5.

        :param queries: the labelled queries' texts (valid queries, never test).
        :param gold: per query, the id of its relevant entry, or a collection of ids.
        :param weights: the dense weights tried.
        :param fusions: the fusions tried.
        :param depth: candidates from each side.
        :param k: the cut-off of MRR.
        :param batch_size: queries per forward pass.
        :param query_vectors: the queries' embeddings when already computed.
        :returns: {"fusion", "weight", "mrr@k": {fusion: {weight: MRR}}, "queries"}.
        """
        from ..evaluation import mrr_at_k

        texts = [queries] if isinstance(queries, str) else list(queries)
        if len(texts) != len(gold) or not texts:
            raise ValueError(f"calibrate needs one gold id per query, got {len(texts)} queries and {len(gold)} ids")
        gold_ids = [set(g) if isinstance(g, (list, tuple, set, frozenset)) else {g} for g in gold]
        missing = self._missing([i for g in gold for i in (g if isinstance(g, (list, tuple, set, frozenset))
                                                           else [g])])
        if missing:
            raise KeyError(f"gold id {missing[0]!r} is not in the index")
        dense, lexical = self._both_sides(texts, depth, batch_size, query_vectors)
        table = {f: {w: mrr_at_k([[hit[1] for hit in _fused(d, lex, w, f, k)] for d, lex in zip(dense, lexical)],
                                 gold_ids, k) for w in weights} for f in fusions}
        best = max(((f, w) for f in fusions for w in weights),
                   key=lambda fw: (table[fw[0]][fw[1]], -fusions.index(fw[0]), -abs(fw[1] - 0.5)))
        self.fusion, self.hybrid_weight = best
        self.calibration = {"fusion": best[0], "weight": best[1], f"mrr@{k}": table, "queries": len(texts)}
        return self.calibration

    @classmethod
    def load(cls, directory, encoder=None, **options):
        """An index written by ``save``, of whichever backend its ``index.json`` names; a damaged, truncated or
        missing file raises CheckpointError naming it.

        :param directory: the folder ``save`` wrote.
        :param encoder: the model that embeds queries (None: queries are given as vectors).
        :param options: that backend's loading options, e.g. ``mmap=False``.
        """
        path = os.path.join(os.fspath(directory), INDEX_FILE)
        meta = read_json_file(path, "a search index's settings")
        try:
            target = backend_class(meta.get("backend") or "exact")
        except ValueError as e:
            raise CheckpointError(f"{path}: {e}") from None
        if not issubclass(target, cls):
            raise CheckpointError(f"{path} holds a {meta.get('backend')} index, not a {cls.__name__}")
        return target._load(os.fspath(directory), meta, encoder, **options)

    @classmethod
    def _load(cls, directory, meta, encoder, **options):
        raise NotImplementedError

    @classmethod
    def _check_settings(cls, directory, meta):
        """CheckpointError naming ``index.json`` for a setting this backend's ``__init__`` does not take (a file
        of another zoo, or edited by hand), before any call: a caller's own wrong option stays a TypeError."""
        known = set(inspect.signature(cls.__init__).parameters) - {"self", "encoder"}
        unknown = sorted(set(meta) - known)
        if unknown:
            raise CheckpointError(f"{os.path.join(directory, INDEX_FILE)}: unexpected settings {unknown} for a "
                                  f"{meta.get('backend')} index (it takes {sorted(known)})")


def _fused(dense, lexical, weight, fusion, topk):
    """Two sides' hits [(key, id, text, score)] -> the fused top ``topk``, as hits with the fused score."""
    entries = {hit[0]: hit for hit in dense + lexical}
    fused = fuse([(h[0], h[3]) for h in dense], [(h[0], h[3]) for h in lexical], weight, fusion, topk)
    return [(key, entries[key][1], entries[key][2], float(value)) for key, value in fused]
