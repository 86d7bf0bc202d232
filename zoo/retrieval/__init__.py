"""Semantic search behind one API, ``SemanticIndex`` (``base``: what every backend shares), with one module per
backend: ``local`` (exact top-k in numpy, or faiss structures, in this process: ``VectorIndex``) and ``milvus``
(a Milvus collection: ``MilvusIndex``); ``lexical`` is BM25; ``mining`` mines hard negatives with an encoder;
``paraphrases`` finds the paraphrases inside one collection (paraphrase mining, community detection). The names below are the package's public API."""

from .base import (
                   BACKEND_MODULES,
                   BACKENDS,
                   CALIBRATION_WEIGHTS,
                   FUSIONS,
                   INDEX_FILE,
                   LOSSLESS_PRECISIONS,
                   RRF_K,
                   SEARCH_MODES,
                   SemanticIndex,
                   backend_class,
                   fuse,
                   reciprocal_rank_fusion,
                   score_fusion,
)
from .lexical import BM25, LEXICAL_TERMS, check_terms, lexical_terms, normalized
from .mining import MiningReport, mine_hard_negatives
from .paraphrases import community_detection, paraphrase_mining, paraphrase_mining_embeddings

__all__ = ["BACKENDS", "BACKEND_MODULES", "BM25", "CALIBRATION_WEIGHTS", "FUSIONS", "INDEX_FILE", "LEXICAL_TERMS",
           "LOSSLESS_PRECISIONS", "MiningReport", "RRF_K", "SEARCH_MODES", "SemanticIndex", "backend_class",
           "check_terms", "community_detection", "fuse", "lexical_terms", "mine_hard_negatives", "normalized",
           "paraphrase_mining", "paraphrase_mining_embeddings", "reciprocal_rank_fusion", "score_fusion"]
