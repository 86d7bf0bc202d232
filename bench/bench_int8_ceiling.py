"""How far each system's encoding is from the CPU's product peak: the arithmetic of an inference run, per second.

    python bench/bench_int8_ceiling.py --inference bench/results/inference --matmul bench/results/matmul_avx512_vnni

For each model of an inference result (``bench/bench_inference.py``), the floating-point work of encoding its
sentences: the tokens of the same LCQMC test sentences (zoo's tokenizer, the model's maxlen, padded per sorted batch
of 64 as every system batches them), times each layer's weight products (Q, K, V, output: 4 H^2; feed-forward:
8 H^2 multiply-adds per token) and attention (2 L^2 H per sentence and layer). Divided by each system's measured
seconds, this is the GFLOP/s it reached; beside it, the GFLOP/s of ONNX Runtime's int8 and float32 products of the
same hidden size on this CPU (``bench/bench_matmul.py``, run on the same machine; int8: the fastest of its int8
kinds). The ceiling: how many times a
system's speed an encoder would reach if all its work ran at that product rate, with nothing else costing anything.
Writes OUTPUT.json and OUTPUT.md.
"""

import argparse
import json
import os

import numpy as np

from zoo.data.tasks import load_task
from zoo.paths import write_json_atomic, write_text_atomic
from zoo.tokenizer.wordpiece import Tokenizer
from zoo.train.results import table

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 64


def batch_lengths(tokenizer, texts, maxlen):
    """Token counts of ``texts`` ([CLS] and [SEP] included, cut at maxlen), padded to the longest of each batch of
    ``BATCH`` once sorted by length."""
    lengths = np.sort([min(len(p) + 2, maxlen) for p in tokenizer.piece_ids(texts)])
    return np.concatenate([np.full(len(c), c.max()) for c in (lengths[i:i + BATCH]
                                                               for i in range(0, len(lengths), BATCH))])


def gflop(lengths, layers, hidden):
    """The multiply-adds of an encoder over sentences of ``lengths`` tokens, x2, in GFLOP."""
    products = 12 * hidden * hidden * lengths.sum()
    attention = 2 * hidden * (lengths.astype(float) ** 2).sum()
    return 2 * layers * (products + attention) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inference", default=os.path.join(HERE, "results", "inference"))
    parser.add_argument("--matmul", default=os.path.join(HERE, "results", "matmul"))
    parser.add_argument("--data-dir", default=None, help="where LCQMC's test split is (default: zoo's data/)")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "int8_ceiling"))
    args = parser.parse_args()
    with open(args.inference + ".json", encoding="utf-8") as f:
        inference = json.load(f)
    with open(args.matmul + ".json", encoding="utf-8") as f:
        matmul = json.load(f)
    test = load_task("LCQMC", "test", args.data_dir)
    tokenizer = Tokenizer.from_preset("zoo-embed-zh-L4")  # the bert-base-chinese vocabulary every model here shares
    rows, report = [], {"inference": os.path.relpath(args.inference + ".json"),
                        "matmul": os.path.relpath(args.matmul + ".json"),
                        "inference_cpu": inference["models"][next(iter(inference["models"]))]["cpu"],
                        "matmul_cpu": matmul["cpu"], "models": {}}
    for name, m in inference["models"].items():
        texts = (test.texts_a + test.texts_b)[:m["sentences"]]
        lengths = batch_lengths(tokenizer, texts, m["maxlen"])
        work = gflop(lengths, m["layers"], m["hidden"])
        peak = dict(matmul["results"][str(m["hidden"])]["gflops"])
        peak["int8"] = max(v for k, v in peak.items() if k.startswith("int8"))  # ONNX Runtime's fastest int8 product
        reached = {system: work / s for system, s in m["median_seconds"].items()}
        best = max(reached, key=reached.get)
        report["models"][name] = {"sentences": len(texts), "mean_padded_tokens": float(lengths.mean()),
                                  "gflop": work, "gflops_reached": reached, "product_gflops": peak,
                                  "ceiling_over_fastest": {k: v / reached[best] for k, v in peak.items()},
                                  "fastest": best}
        label = name if "/" not in name else name.rstrip("/").split("/")[-2]  # a checkpoint folder: its model's name
        for system in sorted(reached, key=reached.get, reverse=True)[:6]:
            rows.append((label, system, reached[system], 100 * reached[system] / peak["int8"],
                         100 * reached[system] / peak["fp32"]))
        rows.append((label, "ceiling: all work at ONNX Runtime's int8 product rate", peak["int8"],
                     100.0, 100 * peak["int8"] / peak["fp32"]))
    text = table(["model", "system", "GFLOP/s reached", "% of ORT int8 product", "% of ORT fp32 product"], rows)
    ceilings = "; ".join(f"{n}: {v['ceiling_over_fastest']['int8']:.2f}x {v['fastest']}"
                         for n, v in report["models"].items())
    text += (f"\n\nWork per sentence: tokens padded per sorted batch of {BATCH}, 12 H^2 per token and layer plus "
             f"attention. Inference: {report['inference_cpu']}; products: {report['matmul_cpu']}. Ceiling over the "
             f"fastest system, if every product ran at ONNX Runtime's int8 rate and nothing else took time: "
             f"{ceilings}.\n")
    flags = " ".join(f"--{k.replace('_', '-')} {os.path.relpath(v)}" for k, v in vars(args).items() if v is not None)
    write_json_atomic(args.output + ".json", {"command": f"python bench/bench_int8_ceiling.py {flags}", **report})
    write_text_atomic(args.output + ".md", text)
    print(text)


if __name__ == "__main__":
    main()
