"""Paraphrase retrieval built from the project's data: dense, BM25 and hybrid search over every distinct sentence.

    python bench/bench_paraphrase_retrieval.py --data-dir ../shared/data --cache runs/cache

Corpus: every distinct sentence of all splits of LCQMC, BQ and ATEC (ATEC's train is the substitute). Queries:
text_a of the positive **test** pairs of LCQMC and BQ; the relevant item is its text_b (the query's own sentence
is left out of the results). Reported: recall@1, recall@10 and MRR@10 of dense search with each model, of BM25
(character bigrams and jieba words), and of hybrid search (reciprocal-rank fusion of the top 100 of each). The
BM25 terms and the hybrid weight are chosen on the positive **valid** pairs (``--tune-queries`` of them); test
numbers are only reported. Corpus vectors are cached in ``--cache`` (outside git). Writes
bench/results/paraphrase_retrieval.json and a table.
"""

import argparse
import hashlib
import os
import random
import time

import numpy as np

import zoo
from zoo.data.tasks import load_task
from zoo.evaluation import mrr_at_k, recall_at_k
from zoo.logs import progress
from zoo.paths import write_json_atomic
from zoo.retrieval.base import SemanticIndex, reciprocal_rank_fusion
from zoo.train.results import table, versions

HERE = os.path.dirname(os.path.abspath(__file__))
SPLITS = {"LCQMC": ("train", "valid", "test"), "BQ": ("train", "valid", "test"), "ATEC": ("train", "valid", "test")}
DEPTH = 100


def corpus_and_queries(data_dir):
    corpus, queries = {}, {"valid": [], "test": []}
    for task, splits in SPLITS.items():
        for split in splits:
            d = load_task(task, split, data_dir)
            for text in d.texts_a + d.texts_b:
                corpus.setdefault(text, len(corpus))
            if task in ("LCQMC", "BQ") and split in queries:
                queries[split] += [(a, b) for a, b, y in zip(d.texts_a, d.texts_b, d.labels) if y == 1 and a != b]
    return list(corpus), queries


def cached_vectors(model_name, model, texts, cache):
    key = hashlib.sha256(("\n".join(texts) + model_name).encode()).hexdigest()[:16]
    path = os.path.join(cache, f"{os.path.basename(model_name.rstrip('/'))}-{key}.npy")
    if os.path.exists(path):
        return np.load(path, mmap_mode="r")
    vectors = model.encode(texts, batch_size=128, show_progress_bar=True)
    os.makedirs(cache, exist_ok=True)
    np.save(path + ".tmp.npy", vectors)
    os.replace(path + ".tmp.npy", path)
    return vectors


def metrics(rankings, relevant):
    """recall@1, recall@10, MRR@10 (x100) of ``rankings`` (corpus ids, best first) against ``relevant`` ids."""
    return {"recall@1": 100 * recall_at_k(rankings, relevant, 1),
            "recall@10": 100 * recall_at_k(rankings, relevant, 10),
            "mrr@10": 100 * mrr_at_k(rankings, relevant, 10)}


def without_self(rows, selves):
    return [[i for i in row if i != own and i >= 0] for row, own in zip(rows, selves)]


def dense_rankings(index, query_vectors, selves, batch=1000):
    rows = []
    for start in range(0, len(query_vectors), batch):
        rows += index.search_vectors(query_vectors[start:start + batch], DEPTH + 1)[1].tolist()
    return without_self(rows, selves)


def lexical_rankings(index, texts, selves, batch=2000):
    rows = []
    for start in range(0, len(texts), batch):
        rows += index.search_lexical(texts[start:start + batch], DEPTH + 1)[1]
    return without_self(rows, selves)


def fuse(dense, lexical, weight):
    out = []
    for d, lex in zip(dense, lexical):
        fused = reciprocal_rank_fusion([d, lex], [weight, 1.0 - weight])
        out.append([i for i, _ in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:10]])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--models", default="zoo-embed-zh-L4,zoo-simbert-zh-L4")
    p.add_argument("--cache", default=os.path.join(HERE, "..", "runs", "cache"))
    p.add_argument("--tune-queries", type=int, default=2000)
    p.add_argument("--limit", type=int, default=None, help="smoke run: this many test and valid queries, and a corpus "
                                                           "of their sentences plus as many others")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(HERE, "results", "paraphrase_retrieval.json"))
    args = p.parse_args()
    t0 = time.time()
    corpus, queries = corpus_and_queries(args.data_dir)
    if args.limit:
        queries = {k: q[:args.limit] for k, q in queries.items()}
        needed = {t for q in queries.values() for pair in q for t in pair}
        corpus = sorted(needed) + [t for t in corpus if t not in needed][:len(needed)]
    ids = {t: i for i, t in enumerate(corpus)}
    queries["valid"] = random.Random(args.seed).sample(queries["valid"], min(args.tune_queries,
                                                                              len(queries["valid"])))
    sets = {split: ([a for a, _ in q], [ids[a] for a, _ in q], [ids[b] for _, b in q]) for split, q in queries.items()}
    print(f"corpus: {len(corpus):,} distinct sentences; queries: {len(sets['test'][0]):,} test, "
          f"{len(sets['valid'][0]):,} valid (tuning)")

    lexical, rows, chosen = {}, [], {}
    for terms in ("bigram", "jieba"):
        index = SemanticIndex(dim=1, lexical=terms).add(texts=corpus, vectors=np.ones((len(corpus), 1), "float32"))
        lexical[terms] = {split: lexical_rankings(index, s[0], s[1]) for split, s in
                          progress(sets.items(), f"BM25 {terms}", unit="split")}
    valid_lex = {t: metrics(lexical[t]["valid"], sets["valid"][2])["mrr@10"] for t in lexical}
    best_terms = max(valid_lex, key=valid_lex.get)
    chosen["bm25_terms"] = {"valid_mrr@10": valid_lex, "chosen": best_terms}
    for terms in lexical:
        rows.append({"method": f"BM25, {'character bigrams' if terms == 'bigram' else 'jieba words'}",
                     **metrics(lexical[terms]["test"], sets["test"][2])})

    for name in args.models.split(","):
        model = zoo.from_preset(name)
        vectors = np.asarray(cached_vectors(name, model, corpus, args.cache), dtype="float32")
        index = SemanticIndex(dim=vectors.shape[1]).add(texts=corpus, vectors=vectors)
        dense = {}
        for split, (texts, selves, _) in sets.items():
            dense[split] = dense_rankings(index, model.encode(texts, batch_size=128), selves)
        rows.append({"method": f"dense, {name}", **metrics(dense["test"], sets["test"][2])})
        weights = [round(w, 1) for w in np.arange(0.1, 1.0, 0.1)]
        valid_mrr = {w: metrics(fuse(dense["valid"], lexical[best_terms]["valid"], w), sets["valid"][2])["mrr@10"]
                     for w in weights}
        weight = max(valid_mrr, key=valid_mrr.get)
        chosen[name] = {"hybrid_weight_valid_mrr@10": valid_mrr, "chosen_weight": weight}
        rows.append({"method": f"hybrid, {name} + BM25 {best_terms} (dense weight {weight}, chosen on valid)",
                     **metrics(fuse(dense["test"], lexical[best_terms]["test"], weight), sets["test"][2])})

    result = {"command": "python bench/bench_paraphrase_retrieval.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None and k != "out"),
              "corpus_sentences": len(corpus), "test_queries": len(sets["test"][0]),
              "valid_queries": len(sets["valid"][0]), "rows": rows, "choices_on_valid": chosen,
              "seconds": time.time() - t0, "versions": versions()}
    result["table"] = table(["method", "recall@1", "recall@10", "MRR@10"],
                            [[r["method"], r["recall@1"], r["recall@10"], r["mrr@10"]] for r in rows])
    print(result["table"])
    write_json_atomic(args.out, result)
    print(f"wrote {args.out} ({result['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
