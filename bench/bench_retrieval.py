"""SemanticIndex on 1M random 256-d vectors: exact (numpy, chunked) vs faiss IVF; recall@10 and queries/s.

    python bench/bench_retrieval.py --n 1000000 --queries 200
Writes bench/results/retrieval.json.
"""

import argparse
import os
import sys
import time

import numpy as np

from zoo.evaluation import overlap_at_k
from zoo.paths import write_json_atomic
from zoo.retrieval.base import SemanticIndex
from zoo.train.results import versions

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--factory", default="IVF1024,Flat")
    p.add_argument("--nprobe", type=int, nargs="+", default=[8, 32, 128])
    p.add_argument("--output", "--out", default=os.path.join(HERE, "results", "retrieval.json"))
    args = p.parse_args()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((args.n, args.dim), dtype=np.float32)
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    exact = SemanticIndex(dim=args.dim).add(vectors=vectors)
    t = time.perf_counter()
    _, truth = exact.search_vectors(queries, 10)
    exact_qps = args.queries / (time.perf_counter() - t)
    print(f"exact: {exact_qps:.1f} queries/s", file=sys.stderr)
    rows = [{"method": "exact (numpy, 65,536-row chunks)", "recall@10": 1.0, "queries_per_s": exact_qps}]
    approx = SemanticIndex(dim=args.dim, backend="faiss", factory=args.factory).add(vectors=exact.vectors)
    t = time.perf_counter()
    approx._faiss_index()
    build = time.perf_counter() - t
    for nprobe in args.nprobe:
        approx._faiss.nprobe = nprobe
        t = time.perf_counter()
        _, found = approx.search_vectors(queries, 10)
        qps = args.queries / (time.perf_counter() - t)
        recall = overlap_at_k(found, truth, 10)
        rows.append({"method": f"faiss {args.factory}, nprobe {nprobe}", "recall@10": recall, "queries_per_s": qps})
        print(f"nprobe {nprobe}: recall@10 {recall:.3f}, {qps:.0f} queries/s", file=sys.stderr)
    result = {"n": args.n, "dim": args.dim, "queries": args.queries, "faiss_build_seconds": build, "rows": rows,
              "versions": versions(), "command": " ".join(sys.argv)}
    write_json_atomic(args.output, result)
    print("| method | recall@10 | queries/s |\n|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['recall@10']:.3f} | {r['queries_per_s']:.1f} |")
    print(f"\n{args.n:,} x {args.dim} random vectors; faiss build {build:.1f} s; wrote {args.output}")


if __name__ == "__main__":
    main()
