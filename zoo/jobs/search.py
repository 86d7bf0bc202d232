"""Search jobs: ``zoo index build`` (a text file -> a saved SemanticIndex: vectors, texts, BM25 terms; or a Milvus
collection and a folder pointing at it) and ``zoo search`` (queries against a saved index: dense, BM25 or hybrid)."""

from __future__ import annotations

import dataclasses

from ..config import option
from ..data.tasks import iter_lines, read_lines
from ..errors import ConfigError
from ..logs import log
from ..paths import DEFAULT_ENCODER
from ..retrieval.base import BACKENDS, SEARCH_MODES, SemanticIndex
from ..retrieval.lexical import LEXICAL_TERMS
from ..retrieval.local import QUANTIZED_BACKENDS


@dataclasses.dataclass
class IndexBuildConfig:
    """Embed the lines of a text file and save them as a search index."""

    input: str = option(None, "text file, one text per line (UTF-8; .gz allowed)", required=True)
    output: str = option(None, "the index folder to write", required=True)
    model: str = option(DEFAULT_ENCODER, "the encoder (preset name or folder, run folder); recorded in the index")
    backend: str = option("exact", "exact: every vector scored; hnsw: a faiss HNSW graph; ivfpq: faiss IVF lists "
                                   "of product-quantized codes, rescored; faiss: a faiss IVF sized to the corpus",
                          choices=BACKENDS + ("milvus",))
    uri: str | None = option(None, "--backend milvus: a Milvus Lite file (e.g. corpus.db) or a server's address "
                                   "(http://HOST:19530); OUTPUT then records where the collection is")
    collection: str = option("zoo", "--backend milvus: the collection (made if missing; resumed if it holds some "
                                    "of the lines)")
    quantize: str | None = option(None, "search over int8 or binary codes (exact backend; int8 also hnsw), the best "
                                        "candidates rescored with the float vectors", choices=("int8", "binary"))
    lexical: str = option("bigram", "BM25 terms for lexical and hybrid search", choices=LEXICAL_TERMS)
    batch_size: int = option(64, "texts per model call")
    calibrate: str | None = option(None, "labelled queries, one 'query<TAB>a relevant line of --input' a line: the "
                                         "hybrid fusion and weight with the best MRR@10 on them become the index's "
                                         "default (SemanticIndex.calibrate)")

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.calibrate and self.backend == "milvus":
            raise ConfigError("--calibrate is for zoo's own index backends, not --backend milvus")
        if (self.backend == "milvus") != (self.uri is not None):
            raise ConfigError("--uri goes with --backend milvus (and --backend milvus needs --uri)")
        if self.quantize and self.backend not in QUANTIZED_BACKENDS[self.quantize]:
            raise ConfigError(f"--quantize {self.quantize} is for --backend "
                              f"{' or '.join(QUANTIZED_BACKENDS[self.quantize])} (ivfpq quantizes by itself), "
                              f"got {self.backend}")


@dataclasses.dataclass
class SearchConfig:
    """Search a saved index with one or more queries; prints the top results of each."""

    index: str = option(None, "an index folder written by `zoo index build`", required=True)
    query: tuple = option((), "a query (repeat the flag for several)", append=True, required=True)
    topk: int = option(10, "results per query")
    mode: str = option("dense", "dense (cosine), lexical (BM25) or hybrid (both fused)", choices=SEARCH_MODES)
    weight: float | None = option(None, "hybrid: the dense side's weight (BM25 gets 1 - weight; default: the "
                                        "index's, calibrated by `zoo index build --calibrate`, else 0.5)")
    model: str | None = option(None, "the encoder (default: the one the index was built with)")
    filter: str | None = option(None, "a Milvus index: a filter expression on the metadata fields (lang == 'zh')")

    def __post_init__(self):
        if self.topk < 1:
            raise ConfigError(f"--topk must be >= 1, got {self.topk}")
        if self.weight is not None and not 0.0 <= self.weight <= 1.0:
            raise ConfigError(f"--weight must be in [0, 1], got {self.weight}")


def load_encoder(name):
    """The light runtime's ``OnnxEncoder`` of ``name`` where its fused graph exists (no TensorFlow is imported), else
    the model loaded with Keras."""
    from ..inference.light import light_encoder

    encoder = light_encoder(name)
    if encoder is None:
        from ..models import from_preset

        encoder = from_preset(name)
    return encoder


def build(config: IndexBuildConfig):
    if config.backend == "milvus":
        return build_milvus(config)
    texts = read_lines(config.input)
    index = SemanticIndex(load_encoder(config.model), backend=config.backend, lexical=config.lexical,
                          model=config.model, quantize=config.quantize)
    index.add(texts, batch_size=config.batch_size)
    if config.calibrate:
        queries, gold = labelled_queries(config.calibrate, texts)
        chosen = index.calibrate(queries, gold, batch_size=config.batch_size)
        log.info("calibrated on %d queries of %s: %s fusion, dense weight %.1f (MRR@10 %.4f)", len(queries),
                 config.calibrate, chosen["fusion"], chosen["weight"],
                 chosen["mrr@10"][chosen["fusion"]][chosen["weight"]])
    if config.backend != "exact" or config.quantize:
        index.search_vectors(index.vectors[:1], 1)  # build the structure now, so it is saved with the index
    index.save(config.output)
    log.info("wrote %s: %d texts, %d-d vectors of %s", config.output, len(index), index.dim, config.model)
    return {"output": config.output, "texts": len(index), "dim": index.dim}


def labelled_queries(path, texts):
    """(queries, gold ids) of a ``query<TAB>relevant text`` file, the ids being the line numbers of ``texts``;
    a ConfigError names the file and line of a malformed line or of a text not among ``texts``."""
    row = {}
    for i, t in enumerate(texts):
        row.setdefault(t, i)
    queries, gold = [], []
    for n, line in iter_lines(path):
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip():
            raise ConfigError(f"{path}, line {n}: expected 'query<TAB>relevant text', got {line[:80]!r}")
        if parts[1] not in row:
            raise ConfigError(f"{path}, line {n}: the relevant text is not a line of the input: {parts[1][:80]!r}")
        queries.append(parts[0])
        gold.append(row[parts[1]])
    if not queries:
        raise ConfigError(f"{path}: no labelled queries")
    return queries, gold


def build_milvus(config, chunk_size=4096):
    """Lines into a Milvus collection, ids = line numbers (from 0), chunk by chunk: lines already in the collection
    (an interrupted build) are skipped, so a rerun resumes without duplicates."""
    from ..retrieval.milvus import MilvusIndex

    texts = read_lines(config.input)
    index = MilvusIndex(load_encoder(config.model), uri=config.uri, collection=config.collection, lexical=config.lexical,
                        model=config.model)
    skipped = 0
    for start in range(0, len(texts), chunk_size):
        ids = list(range(start, min(start + chunk_size, len(texts))))
        done = set(index.existing(ids))
        todo = [i for i in ids if i not in done]
        skipped += len(done)
        if todo:
            index.add([texts[i] for i in todo], ids=todo, batch_size=config.batch_size)
    index.save(config.output)
    log.info("wrote %s -> %s: %d texts (%d already there), %d-d vectors of %s", config.output, index.uri, len(index),
             skipped, index.dim, config.model)
    return {"output": config.output, "texts": len(index), "dim": index.dim, "resumed": skipped}


def search(config: SearchConfig):
    """[[(text, score), ...] per query]; the queries are embedded by the light runtime where the model's fused graph
    exists (no TensorFlow is imported)."""
    from ..paths import read_json_file

    model = config.model or read_json_file(f"{config.index}/index.json", "a search index's settings").get("model")
    if not model and config.mode != "lexical":
        raise ConfigError(f"{config.index} does not record its model: give --model")
    index = SemanticIndex.load(config.index, load_encoder(model) if model and config.mode != "lexical" else None)
    options = {}
    if config.filter is not None:
        if not getattr(index, "filters", False):
            raise ConfigError(f"--filter needs a Milvus index; {config.index} is a {index.backend} index")
        options["filter"] = config.filter
    if config.weight is not None:
        options["weight"] = config.weight
    return index.search(list(config.query), topk=config.topk, mode=config.mode, **options)


def run(config):
    return build(config) if isinstance(config, IndexBuildConfig) else search(config)
