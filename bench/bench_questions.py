"""Questions -> passages: dense, BM25 and hybrid search on the held-out sets built from the corpus.

    python bench/bench_questions.py --corpus ../shared/data/corpus --models zoo-embed-zh-L4

Sets (``zoo.data.corpus.question_sets``, documents no training reads): news titles -> the lead of their article, and
cloze sentences -> the passage they were cut from; each query is searched against all passages of its set. Each
set's first 100 queries ("dev") calibrate the hybrid (``SemanticIndex.calibrate``); every figure is on the other
("test") queries: recall@1, recall@10 and MRR@10 (x100) of BM25 (character bigrams, jieba words), dense search
with each model (passages embedded at ``--passage-maxlen`` tokens; queries prefixed with the model's query prefix,
if it has one), hybrid with the uncalibrated defaults (reciprocal-rank fusion at weight 0.5, as before
calibration existed, and score fusion at 0.5), and hybrid calibrated on dev. Writes bench/results/questions.json.
"""

import argparse
import os
import time

import numpy as np

import zoo
from zoo.data.corpus import question_sets
from zoo.evaluation import mrr_at_k, recall_at_k
from zoo.paths import write_json_atomic
from zoo.retrieval.base import SemanticIndex, fuse
from zoo.train.results import table, versions

HERE = os.path.dirname(os.path.abspath(__file__))
DEPTH = 100


def metrics(rankings, gold):
    """recall@1, recall@10, MRR@10 (x100)."""
    return {"recall@1": 100 * recall_at_k(rankings, gold, 1), "recall@10": 100 * recall_at_k(rankings, gold, 10),
            "mrr@10": 100 * mrr_at_k(rankings, gold, 10)}


def encode_queries(model, queries):
    """Query vectors, with the model's query prefix when it has one (``SentenceEncoder.encode_queries``)."""
    return getattr(model, "encode_queries", model.encode)(queries, batch_size=64)


def evaluate_set(qset, models, passage_maxlen, terms):
    """Rows of one set: BM25 per term kind, then per model dense and hybrid (uncalibrated and calibrated)."""
    dev_q, dev_gold = qset.split("dev")
    test_q, test_gold = qset.split("test")
    rows, lexical = [], {}
    for kind in terms:
        index = SemanticIndex(dim=1, lexical=kind).add(texts=qset.passages,
                                                       vectors=np.ones((len(qset.passages), 1), "float32"))
        _, found = index.search_lexical(test_q, 10)
        lexical[kind] = index
        rows.append({"set": qset.name, "method": f"BM25, {'character bigrams' if kind == 'bigram' else 'jieba words'}",
                     **metrics(found, test_gold)})
    for name in models:
        model = zoo.from_preset(name)
        vectors = model.encode(qset.passages, batch_size=64, maxlen=passage_maxlen)
        index = SemanticIndex(model, lexical=terms[0]).add(texts=qset.passages, vectors=vectors)
        test_vectors, dev_vectors = encode_queries(model, test_q), encode_queries(model, dev_q)
        _, rows_dense = index.search_vectors(test_vectors, 10)
        rows.append({"set": qset.name, "method": f"dense, {name}", **metrics(rows_dense.tolist(), test_gold)})
        dense, lex = index._both_sides(test_q, DEPTH, query_vectors=test_vectors)
        for fusion in ("rrf", "score"):
            found = [[i for i, _ in fuse(d, le, 0.5, fusion)] for d, le in zip(dense, lex)]
            rows.append({"set": qset.name, "method": f"hybrid {fusion}, weight 0.5 (uncalibrated), {name}",
                         **metrics(found, test_gold)})
        chosen = index.calibrate(dev_q, dev_gold, query_vectors=dev_vectors)
        found = [[i for i, _ in fuse(d, le, index.hybrid_weight, index.fusion)] for d, le in zip(dense, lex)]
        rows.append({"set": qset.name, "method": f"hybrid calibrated on {len(dev_q)} dev queries "
                                                 f"({chosen['fusion']}, weight {chosen['weight']}), {name}",
                     **metrics(found, test_gold), "calibration": chosen})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=os.path.join(HERE, "..", "..", "shared", "data", "corpus"))
    p.add_argument("--models", default="zoo-embed-zh-L4", help="comma-separated presets or run folders")
    p.add_argument("--passage-maxlen", type=int, default=256, help="tokens of a passage embedded (dense)")
    p.add_argument("--passage-chars", type=int, default=200)
    p.add_argument("--terms", default="bigram,jieba", help="BM25 terms; the first is the hybrid's")
    p.add_argument("--out", default=os.path.join(HERE, "results", "questions.json"))
    args = p.parse_args()
    t0 = time.time()
    sets = question_sets(args.corpus, args.passage_chars)
    rows = []
    for qset in sets.values():
        print(f"{qset.name}: {len(qset.passages)} passages, {qset.splits.count('dev')} dev and "
              f"{qset.splits.count('test')} test queries")
        rows += evaluate_set(qset, args.models.split(","), args.passage_maxlen, args.terms.split(","))
    result = {"command": "python bench/bench_questions.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("out", "corpus")),
              "sets": {k: {"passages": len(s.passages), "dev": s.splits.count("dev"), "test": s.splits.count("test")}
                       for k, s in sets.items()},
              "rows": rows, "seconds": time.time() - t0, "versions": versions()}
    result["table"] = table(["set", "method", "recall@1", "recall@10", "MRR@10"],
                            [[r["set"], r["method"], r["recall@1"], r["recall@10"], r["mrr@10"]] for r in rows])
    print(result["table"])
    write_json_atomic(args.out, result)
    print(f"wrote {args.out} ({result['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
