"""gen_synonyms speed with and without the key/value cache, measured side by side in one run.

For each of a few inputs: sample n=100 candidates of up to 32 tokens (top-p 0.95, same seed, so both paths
generate the same tokens), then rank them. Prints generated tokens/s for each path and the ratio (median over
the inputs after a warm-up) and writes bench/results/generation.json.

    python bench/bench_generation.py                        # the embedded L4 preset
    python bench/bench_generation.py --checkpoint runs/simbert/model
"""

import argparse
import os
import statistics
import sys
import time

import zoo
from zoo.paths import write_json_atomic
from zoo.train.results import versions

HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = ["微信和支付宝哪个好", "怎么开通花呗", "今天天气怎么样", "我想买一部手机", "这个手机多少钱"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=zoo.DEFAULT_PRESET)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--maxlen", type=int, default=32)
    p.add_argument("--out", default=os.path.join(HERE, "results", "generation.json"))
    args = p.parse_args()
    model = zoo.SimBERT.from_preset(args.checkpoint, maxlen=args.maxlen)
    rows = []
    for use_cache in (True, False):  # warm-up: compile the cached step and the prefill shapes
        model.gen_synonyms(TEXTS[0], n=args.n, k=5, seed=0, use_cache=use_cache)
    for text in TEXTS:
        row = {"text": text}
        for use_cache in (True, False):
            decoder = model.decoder(use_cache)
            t = time.perf_counter()
            samples = decoder.random_sample(text, args.n, topp=0.95, seed=0)
            seconds = time.perf_counter() - t
            tokens = sum(len(s) for s in samples)
            row["cached" if use_cache else "uncached"] = {"seconds": seconds, "tokens": tokens,
                                                         "tokens_per_s": tokens / seconds}
            row.setdefault("samples", samples)
            if not use_cache:
                row["identical_samples"] = samples == row["samples"]
        row["ratio"] = row["cached"]["tokens_per_s"] / row["uncached"]["tokens_per_s"]
        t = time.perf_counter()
        top = model.gen_synonyms(text, n=args.n, k=3, seed=0)
        row["gen_synonyms_seconds"] = time.perf_counter() - t
        row["top3"] = top
        del row["samples"]
        rows.append(row)
        print(f"{text}: cached {row['cached']['tokens_per_s']:.0f} tok/s, uncached "
              f"{row['uncached']['tokens_per_s']:.0f} tok/s, x{row['ratio']:.1f}, same samples: "
              f"{row['identical_samples']}", file=sys.stderr)
    result = {"checkpoint": args.checkpoint, "n": args.n, "maxlen": args.maxlen, "rows": rows,
              "median_ratio": statistics.median(r["ratio"] for r in rows),
              "median_cached_tokens_per_s": statistics.median(r["cached"]["tokens_per_s"] for r in rows),
              "median_uncached_tokens_per_s": statistics.median(r["uncached"]["tokens_per_s"] for r in rows),
              "versions": versions(), "command": " ".join(sys.argv)}
    write_json_atomic(args.out, result)
    print("| path | generated tokens/s (median) |\n|---|---|")
    print(f"| with KV cache | {result['median_cached_tokens_per_s']:.0f} |")
    print(f"| without cache (full re-run per token) | {result['median_uncached_tokens_per_s']:.0f} |")
    print(f"\nspeed-up from the cache: x{result['median_ratio']:.1f} (n={args.n}, maxlen={args.maxlen}); "
          f"identical samples on every input: {all(r['identical_samples'] for r in rows)}; wrote {args.out}")


if __name__ == "__main__":
    main()
