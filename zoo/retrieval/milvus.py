"""Milvus as a ``SemanticIndex`` backend (pymilvus): Milvus Lite, the embedded engine, for a local file, and the
same code against a Milvus server or cluster by URI.

```python
index = SemanticIndex(encoder, backend="milvus", uri="corpus.db", collection="faq")   # or "http://HOST:19530"
index.add(texts, ids=ids, metadata=[{"lang": "zh"}, ...])
index.search("怎么开通花呗", topk=5, mode="hybrid", filter="lang == 'zh'")
```

A collection holds per entry: ``pk`` (the id, JSON-encoded: ints and strings both round-trip), ``text``,
``vector`` (L2-normalised, inner product = cosine), ``terms`` (zoo's BM25 terms, ``retrieval.lexical_terms``, each
written as the hex of its UTF-8 bytes so that any Milvus analyzer keeps it whole) with Milvus' BM25 function
filling ``sparse``, and the metadata fields (dynamic fields, for filter expressions). Where the engine has no BM25
function, the collection is made without it and lexical search runs zoo's BM25 (bm25s) over the collection's
texts. The collection records zoo's settings (model, dimension, terms) in its ``zoo`` property; opening it with
another model or dimension is refused, naming the collection.
"""

from __future__ import annotations

import json
import os

import numpy as np

from ..errors import CheckpointError, ConfigError, DataError, require
from ..paths import atomic_dir
from ..vectors import normalize_rows
from .base import INDEX_FILE, SemanticIndex
from .lexical import BM25, lexical_terms

MAX_ID_BYTES = 1024
MAX_TEXT_BYTES = 65_535  # Milvus' VARCHAR limit
INSERT_ROWS = 1000  # rows per insert request
RESERVED = ("pk", "text", "terms", "vector", "sparse")


def _terms(text, lexical):
    return " ".join(t.encode("utf-8").hex() for t in lexical_terms(text, lexical))


def _pk(i):
    if isinstance(i, np.generic):
        i = i.item()
    if not isinstance(i, (int, str)) or isinstance(i, bool):
        raise ValueError(f"ids must be ints or strings, got {i!r}")
    return json.dumps(i, ensure_ascii=False)


def _local(uri):
    return "://" not in uri


class MilvusIndex(SemanticIndex):
    """``SemanticIndex``'s API on a Milvus collection (``SemanticIndex(..., backend="milvus")``; the module's doc
    says what Milvus keeps and what zoo adds), with metadata filters.

    :param encoder: as ``SemanticIndex``'s.
    :param dim: as ``SemanticIndex``'s.
    :param backend: "milvus".
    :param uri: a local file for Milvus Lite (``*.db``) or a server's address.
    :param collection: the collection's name (created when missing, checked against these settings when present).
    :param model: as ``SemanticIndex``'s.
    :param lexical: as ``SemanticIndex``'s.
    :param token: the server's credentials, "user:password" or an API key (None: the ``MILVUS_TOKEN`` environment
        variable).
    :param index_type: the vector index (None: FLAT, exact, for a local file; AUTOINDEX on a server).
    :param hybrid_weight: as ``SemanticIndex``'s.
    :param fusion: as ``SemanticIndex``'s (default "rrf" here).
    :param calibration: as ``SemanticIndex``'s.
    :param vector_source: as ``SemanticIndex``'s.
    """

    filters = True  # search takes filter expressions on the metadata

    def __init__(self, encoder=None, dim=None, *, backend="milvus", uri="zoo.db", collection="zoo", model=None,
                 lexical="bigram", token=None, index_type=None, hybrid_weight=0.5, fusion="rrf", calibration=None,
                 vector_source=None):
        MilvusClient = require("pymilvus", "milvus", "the Milvus backend").MilvusClient

        if backend != "milvus":
            raise ValueError(f"a MilvusIndex has backend='milvus', got {backend!r}")
        self.backend, self.collection = backend, collection
        self.uri = os.path.abspath(uri) if _local(str(uri)) else str(uri)
        super().__init__(encoder, dim, model=model, lexical=lexical, hybrid_weight=hybrid_weight, fusion=fusion,
                         calibration=calibration, vector_source=vector_source)
        self.index_type = index_type or ("FLAT" if _local(self.uri) else "AUTOINDEX")
        self.client = MilvusClient(self.uri, token=token if token is not None else os.environ.get("MILVUS_TOKEN", ""))
        self._bm25 = None  # zoo's BM25 over the collection, where the engine has none
        if self.client.has_collection(collection):
            self._check_collection()
        else:
            self._create()
        self.client.load_collection(collection)

    # ------------------------------------------------------------------ the collection
    def _where(self):
        return f"Milvus collection {self.collection!r} at {self.uri}"

    def _check_collection(self):
        described = self.client.describe_collection(self.collection)
        try:
            recorded = json.loads((described.get("properties") or {}).get("zoo", "{}"))
        except ValueError:
            recorded = {}
        vector = next((f for f in described["fields"] if f["name"] == "vector"), None)
        dim = int(vector["params"]["dim"]) if vector else recorded.get("dim")
        if vector is None or "pk" not in {f["name"] for f in described["fields"]}:
            raise CheckpointError(f"{self._where()} was not made by zoo (no 'pk' and 'vector' fields): choose "
                                  f"another collection")
        if dim != self.dim:
            of = f" of {recorded['model']}" if recorded.get("model") else ""
            raise ConfigError(f"{self._where()} holds {dim}-d vectors{of}; this encoder gives {self.dim}-d vectors: "
                              f"use the model it was built with or another collection")
        if recorded.get("model") and self.model and recorded["model"] != self.model:
            raise ConfigError(f"{self._where()} holds vectors of model {recorded['model']!r}, not {self.model!r}: use "
                              f"that model or another collection")
        if recorded.get("lexical", self.lexical) != self.lexical:
            raise ConfigError(f"{self._where()} holds {recorded['lexical']} BM25 terms, not {self.lexical}")
        self.model = self.model or recorded.get("model")
        self.engine_bm25 = bool(described.get("functions"))

    def _create(self):
        from pymilvus import DataType, Function, FunctionType, MilvusException

        def schema(bm25):
            s = self.client.create_schema(auto_id=False, enable_dynamic_field=True)
            s.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=MAX_ID_BYTES)
            s.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT_BYTES)
            s.add_field("terms", DataType.VARCHAR, max_length=MAX_TEXT_BYTES, enable_analyzer=bm25)
            s.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dim)
            params = self.client.prepare_index_params()
            params.add_index("vector", index_type=self.index_type, metric_type="IP")
            if bm25:
                s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
                s.add_function(Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["terms"],
                                        output_field_names=["sparse"]))
                params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
            return s, params

        try:
            s, params = schema(True)
            self.client.create_collection(self.collection, schema=s, index_params=params, consistency_level="Strong")
            self.engine_bm25 = True
        except MilvusException as e:  # an engine without BM25 functions (Milvus < 2.5)
            from ..logs import log

            log.info("%s: no BM25 function (%s); lexical search runs zoo's BM25", self._where(), e)
            s, params = schema(False)
            self.client.create_collection(self.collection, schema=s, index_params=params, consistency_level="Strong")
            self.engine_bm25 = False
        self.client.alter_collection_properties(self.collection, properties={"zoo": json.dumps(
            {"model": self.model, "dim": self.dim, "lexical": self.lexical})})

    def settings(self):
        return {"backend": "milvus", "uri": self.uri, "collection": self.collection, "dim": self.dim,
                "model": self.model, "lexical": self.lexical, "index_type": self.index_type,
                "hybrid_weight": self.hybrid_weight, "fusion": self.fusion, "calibration": self.calibration,
                "vector_source": self.vector_source}

    def __len__(self):
        rows = self.client.query(self.collection, filter="", output_fields=["count(*)"])
        return int(rows[0]["count(*)"])

    # ------------------------------------------------------------------ writing
    def existing(self, ids):
        """The ids of ``ids`` already in the collection.

        :param ids: the ids to look up.
        """
        found = set()
        keys = [_pk(i) for i in ids]
        for start in range(0, len(keys), INSERT_ROWS):
            found |= {r["pk"] for r in self.client.get(self.collection, ids=keys[start:start + INSERT_ROWS],
                                                       output_fields=["pk"])}
        return [i for i, k in zip(ids, keys) if k in found]

    def _rows(self, texts, vectors, ids, metadata, batch_size):
        if texts is None:
            raise ValueError("a Milvus index stores texts: add() needs texts (and optionally their vectors)")
        texts = list(texts)
        if vectors is None:
            if self.encoder is None:
                raise ValueError("this index has no encoder: pass vectors")
            vectors = self._encoded(self.encoder.encode, texts, batch_size=batch_size)
        vectors = normalize_rows(np.atleast_2d(np.asarray(vectors, dtype="float32")))
        if vectors.shape[1] != self.dim:
            raise ValueError(f"vectors have dimension {vectors.shape[1]}, the index {self.dim}")
        if len(texts) != len(vectors):
            raise ValueError(f"{len(texts)} texts but {len(vectors)} vectors")
        if ids is None:
            raise ValueError("a Milvus index needs ids (ints or strings) for what it adds")
        ids = list(ids)
        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
        metadata = [{}] * len(texts) if metadata is None else list(metadata)
        if len(metadata) != len(texts):
            raise ValueError(f"{len(metadata)} metadata rows but {len(texts)} texts")
        rows = []
        for n, (i, text, vector, meta) in enumerate(zip(ids, texts, vectors, metadata)):
            if not isinstance(meta, dict) or set(meta) & set(RESERVED):
                raise DataError(f"metadata of row {n} (id {i!r}) must be an object without the fields {RESERVED}")
            if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
                raise DataError(f"text of row {n} (id {i!r}) has {len(text.encode('utf-8'))} UTF-8 bytes; Milvus "
                                f"stores at most {MAX_TEXT_BYTES}")
            pk = _pk(i)
            if len(pk.encode("utf-8")) > MAX_ID_BYTES:
                raise DataError(f"id of row {n} is longer than {MAX_ID_BYTES} bytes")
            rows.append({**meta, "pk": pk, "text": text, "terms": _terms(text, self.lexical),
                         "vector": vector.tolist()})
        return rows

    def add(self, texts=None, vectors=None, ids=None, metadata=None, batch_size=64):
        """Add entries; an id already in the collection is refused (use ``upsert``).

        :param texts: the texts (None: bare vectors).
        :param vectors: their vectors (None: the encoder embeds ``texts``).
        :param ids: unique ints or strings (required).
        :param metadata: one dict a row: filterable fields.
        :param batch_size: texts per forward pass.
        """
        keys = [_pk(i) for i in (ids or [])]
        if len(set(keys)) != len(keys):
            raise ValueError("ids must be unique within one add()")
        present = self.existing(list(ids or []))
        if present:
            raise ValueError(f"id {present[0]!r} is already in the index (ids must be unique; remove it first, or "
                             f"upsert)")
        return self._write("insert", self._rows(texts, vectors, ids, metadata, batch_size))

    def upsert(self, texts=None, vectors=None, ids=None, metadata=None, batch_size=64):
        """Add or replace the entries with these ids.

        :param texts: as ``add``'s.
        :param vectors: as ``add``'s.
        :param ids: as ``add``'s.
        :param metadata: as ``add``'s.
        :param batch_size: as ``add``'s.
        """
        return self._write("upsert", self._rows(texts, vectors, ids, metadata, batch_size))

    def _write(self, how, rows):
        for start in range(0, len(rows), INSERT_ROWS):
            getattr(self.client, how)(self.collection, rows[start:start + INSERT_ROWS])
        self._bm25 = None
        return self

    def remove(self, ids):
        """Remove the entries with these ids (KeyError names an unknown one).

        :param ids: the ids to remove.
        """
        ids = list(ids)
        present = set(map(_pk, self.existing(ids)))
        missing = [i for i in ids if _pk(i) not in present]
        if missing:
            raise KeyError(f"id {missing[0]!r} is not in the index")
        self.client.delete(self.collection, ids=[_pk(i) for i in ids])
        self._bm25 = None
        return self

    # ------------------------------------------------------------------ searching
    def _missing(self, ids):
        present = set(map(_pk, self.existing(ids)))
        return [i for i in ids if _pk(i) not in present]

    def _dense(self, vectors, k, filter):
        answers = self.client.search(self.collection, data=[v.tolist() for v in vectors], anns_field="vector",
                                     limit=k, filter=filter or "", output_fields=["text"],
                                     search_params={"metric_type": "IP"})
        return [[(h["pk"], json.loads(h["pk"]), h["entity"]["text"], float(h["distance"])) for h in hits]
                for hits in answers]

    def _lexical(self, texts, k, filter):
        if not self.engine_bm25:
            return self._zoo_bm25(texts, k, filter)
        terms = [_terms(t, self.lexical) for t in texts]
        answers = [[] if not t else self.client.search(
            self.collection, data=[t], anns_field="sparse", limit=k, filter=filter or "", output_fields=["text"],
            search_params={"metric_type": "BM25"})[0] for t in terms]
        # BM25 scores are >= 0 (Milvus Lite reports them negated, best first)
        return [[(h["pk"], json.loads(h["pk"]), h["entity"]["text"], abs(float(h["distance"]))) for h in hits]
                for hits in answers]

    def _zoo_bm25(self, texts, k, filter):
        """zoo's BM25 (``zoo.retrieval.lexical``) over every text of the collection, for engines without a BM25 function."""
        if self._bm25 is None:
            entries = []
            iterator = self.client.query_iterator(self.collection, batch_size=INSERT_ROWS, filter="",
                                                  output_fields=["pk", "text"])
            while batch := iterator.next():
                entries += [(r["pk"], r["text"]) for r in batch]
            iterator.close()
            self._bm25 = (BM25([t for _, t in entries], self.lexical), entries)
        bm25, entries = self._bm25
        allowed = None
        if filter:
            keys = {r["pk"] for r in self.client.query(self.collection, filter=filter, output_fields=["pk"])}
            allowed = {n for n, (pk, _) in enumerate(entries) if pk in keys}
        return [[(entries[r][0], json.loads(entries[r][0]), entries[r][1], v) for r, v in row]
                for row in bm25.top(texts, k, allowed=allowed)]

    def search(self, queries, topk=10, batch_size=64, mode="dense", weight=None, depth=100, query_vectors=None,
               return_ids=False, fusion=None, filter=None):
        """As ``SemanticIndex.search``; hybrid fuses by rank by default (``fusion="rrf"``).

        :param queries: as ``SemanticIndex.search``'s.
        :param topk: as ``SemanticIndex.search``'s.
        :param batch_size: as ``SemanticIndex.search``'s.
        :param mode: as ``SemanticIndex.search``'s.
        :param weight: as ``SemanticIndex.search``'s.
        :param depth: as ``SemanticIndex.search``'s.
        :param query_vectors: as ``SemanticIndex.search``'s.
        :param return_ids: as ``SemanticIndex.search``'s.
        :param fusion: as ``SemanticIndex.search``'s.
        :param filter: a Milvus boolean expression on the metadata fields (e.g. ``"lang == 'zh' and year >= 2020"``).
        """
        from pymilvus import MilvusException

        try:
            return super().search(queries, topk, batch_size, mode, weight, depth, query_vectors, return_ids, fusion,
                                  filter)
        except MilvusException as e:
            raise ValueError(f"{self._where()}: {e.message if hasattr(e, 'message') else e}") from None

    # ------------------------------------------------------------------ a folder pointing at the collection
    def save(self, directory):
        """Write ``directory/index.json``: where the collection is, so ``SemanticIndex.load``, ``zoo search`` and
        ``zoo serve --index`` open it (the data stays in Milvus).

        :param directory: the folder to write.
        """
        with atomic_dir(directory) as tmp:
            with open(os.path.join(tmp, INDEX_FILE), "w", encoding="utf-8") as f:
                json.dump(self.settings(), f)

    @classmethod
    def _load(cls, directory, meta, encoder, **options):
        cls._check_settings(directory, meta)
        return cls(encoder=encoder, **{**meta, "dim": meta.get("dim"), **options})
