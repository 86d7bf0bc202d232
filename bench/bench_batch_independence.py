"""How much a text's vector moves with the texts that share its batch, per precision, on a real model: each of N
LCQMC texts encoded alone, then in batches of 64 and in reversed batches of 7; beside it, the cosine to Keras fp32,
the time of a batch of 64 and of one text (interleaved rounds in rotated order, medians), and ONNX Runtime's dynamic int8 (zoo's
int8 before issue 39: per-batch scales) for comparison. With ``../shared`` present, also the Spearman of each
precision on the first 2,000 pairs of LCQMC, BQ and STS-B valid.

    python bench/bench_batch_independence.py                       # zoo-embed-zh-L4, 256 texts
    python bench/bench_batch_independence.py --model ../shared/models/chinese_L-6_H-384_A-6/google

Writes bench/results/batch_independence.json and .md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

PRECISIONS = ("fp32", "onnx-fp32", "int8", "openvino-int8", "bf16", "int8-dynamic")


def lcqmc_texts(n):
    with gzip.open(os.path.join(ROOT, "data", "LCQMC", "LCQMC.test.data.gz"), "rt", encoding="utf-8") as f:
        texts = [s for line in f for s in line.rstrip("\n").split("\t")[:2]]
    return list(dict.fromkeys(texts))[:n]


def dynamic_int8(encoder, folder):
    """The fused fp32 graph with ONNX Runtime's dynamic quantization (zoo's int8 until issue 39) -> encode(texts)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from zoo.inference.fused_onnx import fused_graph
    from zoo.inference.sessions import ID_INPUTS, new_session

    onnx.save(fused_graph(encoder), os.path.join(folder, "fp32.onnx"))
    quantize_dynamic(os.path.join(folder, "fp32.onnx"), os.path.join(folder, "dynamic.onnx"),
                     weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul", "Attention"],
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    session = new_session(os.path.join(folder, "dynamic.onnx"))

    def encode(texts, batch_size=64):
        out = []
        for start in range(0, len(texts), batch_size):
            batch = encoder.tokenizer(texts[start:start + batch_size], maxlen=encoder.maxlen)
            out.append(session.run(None, {k: np.asarray(batch[k], "int32") for k in ID_INPUTS})[0])
        vectors = np.concatenate(out)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    return encode


def spearman_on_valid(encode, data_dir, pairs=2000):
    from scipy.stats import spearmanr

    from zoo.data.pair_files import read_pairs

    scores = {}
    for task in ("LCQMC", "BQ", "STS-B"):
        path = os.path.join(data_dir, task, "senteval_cn", f"{task}.valid.data")
        if os.path.exists(path):
            data = read_pairs(path).head(pairs)
            a, b = encode(data.texts_a), encode(data.texts_b)
            scores[task] = 100 * spearmanr(np.sum(a * b, axis=1), data.labels).correlation
    return scores


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="zoo-embed-zh-L4", help="a zoo preset (name or folder) or checkpoint")
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "..", "shared", "data"))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "batch_independence"))
    args = parser.parse_args()
    import zoo
    from zoo.export.exportable import load_exportable

    encoder = load_exportable(args.model)
    texts = lcqmc_texts(args.texts)
    with tempfile.TemporaryDirectory() as tmp:
        dynamic = dynamic_int8(encoder, tmp)
        encoders = {p: (lambda t, b=64, p=p: encoder.encode(t, batch_size=b, engine=p,
                                                                   show_progress_bar=False)) for p in PRECISIONS[:-1]}
        encoders["int8-dynamic"] = dynamic
        reference = encoders["fp32"](texts)
        rows = {}
        for name, encode in encoders.items():
            alone = np.concatenate([encode([t]) for t in texts])
            in_64 = encode(texts)
            in_7 = encode(texts[::-1], 7)[::-1]
            rows[name] = {"alone_vs_batch_64": float(np.abs(in_64 - alone).max()),
                          "alone_vs_reversed_batches_of_7": float(np.abs(in_7 - alone).max()),
                          "min_cosine_to_fp32": float(np.sum(in_64 * reference, axis=1).min()),
                          "seconds_batch_64": [], "seconds_one_text": []}
            print(f"{name}: {rows[name]['alone_vs_batch_64']:.2g} / {rows[name]['alone_vs_reversed_batches_of_7']:.2g}"
                  f" from alone, cosine to fp32 >= {rows[name]['min_cosine_to_fp32']:.5f}", file=sys.stderr, flush=True)
        names = list(encoders)
        for r in range(args.rounds):  # interleaved rounds, the order rotated
            for name in names[r % len(names):] + names[:r % len(names)]:
                encode = encoders[name]
                time.sleep(0.2)  # the previous session's spinning threads (ONNX Runtime's default) settle
                start = time.perf_counter()
                encode(texts[:64])
                rows[name]["seconds_batch_64"].append(time.perf_counter() - start)
                start = time.perf_counter()
                encode(texts[64:65])
                rows[name]["seconds_one_text"].append(time.perf_counter() - start)
        quality = {}
        if os.path.isdir(args.data_dir):
            for name, encode in encoders.items():
                quality[name] = spearman_on_valid(encode, args.data_dir)
                print(f"{name}: valid Spearman {quality[name]}", file=sys.stderr, flush=True)
    cpu = "AVX-512 VNNI" if "avx512_vnni" in open("/proc/cpuinfo").read() else "AVX2 (no VNNI)"
    results = {"model": args.model, "texts": len(texts), "rounds": args.rounds, "cpu": cpu,
               "machine": platform.machine(), "cores": os.cpu_count(), "zoo": zoo.__version__, "rows": rows,
               "valid_spearman_first_2000_pairs": quality}
    tasks = sorted({t for q in quality.values() for t in q})
    lines = ["| precision | max diff, alone vs batch of 64 | alone vs reversed batches of 7 | min cosine to fp32 | "
             "batch of 64 | one text |" + "".join(f" {t} valid |" for t in tasks),
             "|---|---|---|---|---|---|" + "---|" * len(tasks)]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['alone_vs_batch_64']:.2g} | {r['alone_vs_reversed_batches_of_7']:.2g} | "
                     f"{r['min_cosine_to_fp32']:.5f} | {1000 * statistics.median(r['seconds_batch_64']):.1f} ms | "
                     f"{1000 * statistics.median(r['seconds_one_text']):.2f} ms |"
                     + "".join(f" {quality[name][t]:.2f} |" for t in tasks))
    text = (f"{args.model}, {len(texts)} LCQMC test texts; {cpu}, {os.cpu_count()} cores; times are medians of "
            f"{args.rounds} interleaved rounds; valid Spearman on the first 2,000 pairs of each valid split\n\n"
            + "\n".join(lines) + f"\n\ncommand: `python bench/bench_batch_independence.py {' '.join(sys.argv[1:])}`\n")
    results = {"command": f"python bench/bench_batch_independence.py {' '.join(sys.argv[1:])}".strip(),
               "table": text.split("\n\ncommand:")[0], **results}
    with open(args.output + ".json", "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
