"""Search over a million real embeddings: bulk encoding, then exact vs HNSW vs IVF-PQ vs int8 / binary codes.

    python bench/bench_million.py --cache runs/cache/million              # (cache: outside git, ~1.5 GB)

1. Texts: sentences and clauses of ``../shared/data/corpus`` (split at 。！？；，, kept at 5-128 characters) plus every
   distinct sentence of the task files (all splits of LCQMC, BQ, ATEC, STS-B, PAWS-X): ~1.2 M distinct texts.
2. ``zoo encode --precision int8`` (the shipped zoo-embed-zh-L4, streamed to a float32 .npy, in a child process):
   sentences/s (start-up and int8 conversion included) and the child's peak RSS. Skipped when the vectors are
   already in the cache.
3. 1,000 random texts are held out as queries; the rest is the corpus. For each index: build seconds, bytes held in
   memory (the searched structure; float vectors used only for rescoring stay memory-mapped), queries/s over the
   1,000 queries (one batch) and recall@10 against exact search.
Writes bench/results/million.json and a table.
"""

import argparse
import gzip
import os
import re
import subprocess
import sys
import time

import numpy as np

from zoo.data.corpus import read_corpus
from zoo.data.tasks import load_task
from zoo.evaluation import overlap_at_k
from zoo.logs import log, setup_cli
from zoo.paths import read_json_file, write_json_atomic
from zoo.retrieval.base import SemanticIndex
from zoo.train.results import table, versions

HERE = os.path.dirname(os.path.abspath(__file__))
SPLIT = re.compile(r"[。！？；，!?;,]")
TASKS = ("LCQMC", "BQ", "ATEC", "STS-B", "PAWSX")


def million_texts(data_dir, corpus_dir):
    texts = {}
    for doc in read_corpus([corpus_dir]):
        for piece in SPLIT.split(doc):
            piece = piece.strip()
            if 5 <= len(piece) <= 128:
                texts.setdefault(piece, None)
    from_corpus = len(texts)
    for task in TASKS:
        for split in ("train", "valid", "test"):
            try:
                data = load_task(task, split, data_dir)
            except FileNotFoundError:
                continue
            for t in data.texts_a + data.texts_b:
                texts.setdefault(t.replace("\n", " ").strip(), None)
    texts.pop("", None)
    return list(texts), from_corpus


def timed_search(index, queries, topk=10):
    start = time.perf_counter()
    _, rows = index.search_vectors(queries, topk)
    return rows, time.perf_counter() - start


def structure_bytes(index):
    """Bytes of the searched structure: the float vectors (exact) or the faiss index."""
    if index._faiss is None:
        return index.vectors.nbytes
    import faiss

    if index.quantize == "binary":
        return index._faiss.ntotal * index._faiss.code_size
    return int(faiss.serialize_index(index._faiss).nbytes)


def milvus_row(settings, corpus, queries, truth, texts, keep, cache, topk=10):
    """A Milvus Lite collection (zoo.retrieval.milvus) of the corpus in a fresh file: build seconds (inserting the
    vectors, texts and BM25 terms, then the vector index), recall@10 against exact search and queries/s over the
    held-out queries in one request. Milvus Lite runs in its own process: its memory is not counted here."""
    import shutil

    from zoo.retrieval.milvus import MilvusIndex

    folder = os.path.join(cache, "milvus-" + settings["index_type"].lower())
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    start = time.perf_counter()
    index = MilvusIndex(dim=corpus.shape[1], uri=os.path.join(folder, "corpus.db"), collection="million",
                        index_type=settings["index_type"])
    for first in range(0, len(corpus), 50_000):
        part = slice(first, first + 50_000)
        index._write("insert", index._rows([texts[i] for i in keep[part]], corpus[part],
                                            list(range(first, min(first + 50_000, len(corpus)))), None, 64))
    index.client.flush(index.collection)
    index.client.load_collection(index.collection)
    build = time.perf_counter() - start
    params = {"metric_type": "IP", "params": {"nprobe": settings["nprobe"]} if "nprobe" in settings else {}}
    start = time.perf_counter()
    answers = index.client.search(index.collection, data=[q.tolist() for q in queries], anns_field="vector",
                                  limit=topk, search_params=params)
    seconds = time.perf_counter() - start
    found = [[int(h["pk"]) for h in hits] for hits in answers]
    recall = overlap_at_k(found, truth, topk)
    log.info("%s: recall@10 %.3f, %.0f queries/s, build %.0f s", settings["index_type"], recall,
             len(queries) / seconds, build)
    return {"settings": settings, "build_seconds": build, "memory_mib": None, "recall_at_10": recall,
            "queries_per_second": len(queries) / seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--data-dir", default=os.path.join(HERE, "..", "..", "shared", "data"))
    parser.add_argument("--model", default="zoo-embed-zh-L4")
    parser.add_argument("--precision", default="int8", help="zoo encode --precision (int8: ONNX Runtime)")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--skip", default="", help="comma-separated index names to leave out")
    parser.add_argument("--only", default="", help="comma-separated index names to measure; the other rows of an "
                                                   "earlier run's results are kept (each row's 'x exact' is against "
                                                   "the exact search timed in its own run)")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "million"))
    parser.add_argument("--limit", type=int, default=None, help="the first N texts only (a smaller-scale run: give "
                                                                 "it its own --cache and --output)")
    args = parser.parse_args()
    setup_cli()
    os.makedirs(args.cache, exist_ok=True)
    texts_file, vectors_file = os.path.join(args.cache, "texts.txt.gz"), os.path.join(args.cache, "vectors.npy")
    report = {"command": " ".join(sys.argv), "versions": versions(), "model": args.model}
    if not os.path.exists(texts_file):
        texts, from_corpus = million_texts(args.data_dir, os.path.join(args.data_dir, "corpus"))
        if args.limit:
            texts = [texts[i] for i in np.sort(np.random.default_rng(1).choice(len(texts), args.limit, replace=False))]
            from_corpus = None
        with gzip.open(texts_file + ".tmp", "wt", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
        os.replace(texts_file + ".tmp", texts_file)
        write_json_atomic(os.path.join(args.cache, "texts.json"), {"texts": len(texts), "from_corpus": from_corpus})
    report["texts_from_corpus"] = read_json_file(os.path.join(args.cache, "texts.json"), "text counts")["from_corpus"]
    with gzip.open(texts_file, "rt", encoding="utf-8", newline="\n") as f:
        texts = f.read().split("\n")[:-1]  # one text a line, as zoo encode reads it (not str.splitlines)
    report["texts"] = len(texts)
    log.info("%d distinct texts", len(texts))
    if not os.path.exists(vectors_file):
        start = time.time()
        child = subprocess.run(["/usr/bin/time", "-f", "peak_rss_kb=%M", sys.executable, "-m", "zoo", "encode",
                                "--model", args.model, "--input", texts_file, "--output", vectors_file,
                                "--precision", args.precision],
                               stderr=subprocess.PIPE, text=True)
        if child.returncode != 0:
            raise SystemExit(child.stderr[-3000:])
        seconds = time.time() - start
        rss = int(re.search(r"peak_rss_kb=(\d+)", child.stderr).group(1)) / 1024
        report["encode"] = {"seconds": seconds, "sentences_per_second": len(texts) / seconds, "peak_rss_mib": rss,
                            "precision": args.precision}
        write_json_atomic(os.path.join(args.cache, "encode.json"), report["encode"])
    else:
        report["encode"] = read_json_file(os.path.join(args.cache, "encode.json"), "the encoding figures")
    log.info("encode: %s", report["encode"])
    vectors = np.load(vectors_file, mmap_mode="r")
    rng = np.random.default_rng(0)
    held = np.sort(rng.choice(len(vectors), args.queries, replace=False))
    keep = np.setdiff1d(np.arange(len(vectors)), held)
    queries = np.asarray(vectors[held], dtype="float32")
    corpus = np.asarray(vectors[keep], dtype="float32")
    del vectors
    exact = SemanticIndex(dim=corpus.shape[1]).add(vectors=corpus)
    truth, exact_seconds = timed_search(exact, queries)
    exact_qps = len(queries) / exact_seconds
    rows = [["exact (float32)", "", 0.0, structure_bytes(exact) / 2**20, 1.0, round(exact_qps), 1.0]]
    report["corpus"], report["indexes"] = len(corpus), {}
    candidates = [("exact int8 rescore4", dict(backend="exact", quantize="int8", rescore=4)),
                  ("exact binary rescore10", dict(backend="exact", quantize="binary", rescore=10)),
                  ("ivfpq nprobe16 rescore4", dict(backend="ivfpq", nprobe=16, rescore=4)),
                  ("ivfpq nprobe32 rescore10", dict(backend="ivfpq", nprobe=32, rescore=10)),
                  ("ivfpq nprobe64 rescore10", dict(backend="ivfpq", nprobe=64, rescore=10)),
                  ("ivfpq64 nprobe32 rescore10", dict(backend="ivfpq", pq_bytes=64, nprobe=32, rescore=10)),
                  ("ivfpq64 nprobe64 rescore10", dict(backend="ivfpq", pq_bytes=64, nprobe=64, rescore=10)),
                  ("ivf-flat nprobe16", dict(backend="faiss", nprobe=16)),
                  ("ivf-flat nprobe32", dict(backend="faiss", nprobe=32)),
                  ("ivf-flat nprobe64", dict(backend="faiss", nprobe=64)),
                  ("hnsw M16 efC80 ef32", dict(backend="hnsw", hnsw_m=16, ef_construction=80, ef_search=32)),
                  ("hnsw M16 efC80 ef64", dict(backend="hnsw", hnsw_m=16, ef_construction=80, ef_search=64)),
                  ("hnsw M16 efC80 ef128", dict(backend="hnsw", hnsw_m=16, ef_construction=80, ef_search=128)),
                  ("hnsw M16 efC80 ef256", dict(backend="hnsw", hnsw_m=16, ef_construction=80, ef_search=256)),
                  ("hnsw-int8 M16 efC80 ef64 rescore2", dict(backend="hnsw", quantize="int8", hnsw_m=16,
                                                             ef_construction=80, ef_search=64, rescore=2)),
                  ("hnsw-int8 M16 efC80 ef96 rescore2", dict(backend="hnsw", quantize="int8", hnsw_m=16,
                                                             ef_construction=80, ef_search=96, rescore=2)),
                  ("hnsw-int8 M16 efC80 ef128 rescore2", dict(backend="hnsw", quantize="int8", hnsw_m=16,
                                                              ef_construction=80, ef_search=128, rescore=2)),
                  ("hnsw M32 ef64", dict(backend="hnsw", ef_search=64)),
                  ("hnsw M32 ef128", dict(backend="hnsw", ef_search=128)),
                  ("hnsw M32 ef256", dict(backend="hnsw", ef_search=256)),
                  ("milvus-lite FLAT", dict(backend="milvus", index_type="FLAT")),
                  ("milvus-lite IVF_FLAT nprobe32", dict(backend="milvus", index_type="IVF_FLAT", nprobe=32))]
    built = {}
    skip, only = set(filter(None, args.skip.split(","))), set(filter(None, args.only.split(",")))
    if only and os.path.exists(args.output + ".json"):  # keep the other rows of the earlier run
        report["indexes"] = {k: {"exact_queries_per_second": earlier["exact_queries_per_second"], **v} for earlier in
                             [read_json_file(args.output + ".json", "earlier results")]
                             for k, v in earlier["indexes"].items() if k not in only}
    for name, settings in candidates:
        if name in skip or (only and name not in only):
            continue
        if settings["backend"] == "milvus":
            report["indexes"][name] = milvus_row(settings, corpus, queries, truth, texts, keep, args.cache)
            report["indexes"][name].update(exact_queries_per_second=exact_qps, command=report["command"],
                                           speedup_vs_exact=report["indexes"][name]["queries_per_second"] / exact_qps)
            write_json_atomic(args.output + ".json", report)
            continue
        family = (settings["backend"], settings.get("quantize"), settings.get("pq_bytes"), settings.get("hnsw_m"),
                  settings.get("ef_construction"))
        index = built.get(family)
        build = 0.0
        if index is None:
            index = SemanticIndex(dim=corpus.shape[1], **settings).add(vectors=corpus)
            start = time.perf_counter()
            index._faiss_index()
            build = time.perf_counter() - start
            built[family] = index
        for key in ("ef_search", "nprobe", "rescore"):
            if key in settings:
                setattr(index, key, settings[key])
        if hasattr(index._faiss, "nprobe"):
            index._faiss.nprobe = index.nprobe
        found, seconds = timed_search(index, queries)
        recall = overlap_at_k(found, truth, 10)
        qps = len(queries) / seconds
        report["indexes"][name] = {"settings": settings, "build_seconds": build, "memory_mib":
                                   structure_bytes(index) / 2**20, "recall_at_10": recall, "queries_per_second": qps,
                                   "speedup_vs_exact": qps / exact_qps, "exact_queries_per_second": exact_qps,
                                   "command": report["command"]}
        log.info("%s: recall@10 %.3f, %.0f queries/s (%.1fx exact), build %.0f s", name, recall, qps, qps / exact_qps,
                 build)
        report["exact_queries_per_second"] = exact_qps
        write_json_atomic(args.output + ".json", report)  # so far, should a later index fail
    report["exact_queries_per_second"] = exact_qps
    rows += [[name, "", r["build_seconds"], r["memory_mib"], r["recall_at_10"], round(r["queries_per_second"]),
              r["speedup_vs_exact"]] for name, r in report["indexes"].items()]
    text = table(["index", "", "build s", "memory MiB", "recall@10", "queries/s", "x exact"], rows)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    write_json_atomic(args.output + ".json", report)
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write(f"{len(corpus):,} vectors ({args.model}), {len(queries)} held-out queries\n\n{text}\n")
    print(text)


if __name__ == "__main__":
    main()
