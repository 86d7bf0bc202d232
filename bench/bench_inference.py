"""CPU inference speed and quality of every zoo precision against transformers and sentence-transformers.

    python bench/bench_inference.py --model ../shared/models/chinese_L-4_H-256_A-4/google \
        --model runs/cosent_L4 --st-python /work/stenv/bin/python      # (setup: bench/st_worker.py's docstring)

For each model (a checkpoint or a saved SentenceEncoder with cls or mean pooling): the model is also written as a
transformers / sentence-transformers folder (``zoo export --format transformers``), so every system runs the same
weights. Speed: the first ``--sentences`` sentences of the LCQMC test pairs (25,000 = all of them), batch 64,
``--repeats`` interleaved rounds (each round times every system once, in a rotated order); the median seconds of
each system, and its speed as a ratio to transformers fp32 measured in the same rounds (every local system first
runs once on all the texts, so XLA has compiled each padded length). Systems: zoo fp32 (Keras, XLA), zoo int8
(ONNX Runtime dynamic quantization), transformers fp32 (BertModel, PyTorch), and sentence-transformers' torch,
ONNX, ONNX int8, OpenVINO and OpenVINO int8 backends (bench/st_worker.py, in its own virtualenv). Keras's own
int8 (``Model.quantize``) is too slow on this CPU to time on everything: it is timed once on 2,000 sentences
beside zoo fp32 (STS-B quality only). Quality: test Spearman on LCQMC, BQ and STS-B of each system.
Writes bench/results/inference.json and a table.
"""

import argparse
import os
import json
import subprocess
import sys
import time

import numpy as np

import zoo
from zoo.checkpoints import save_transformers
from zoo.data import load_task
from zoo.evaluation import spearman
from zoo.export import quantized_copy
from zoo.logs import log, setup_cli
from zoo.paths import write_json_atomic
from zoo.train.results import table, versions

HERE = os.path.dirname(os.path.abspath(__file__))
QUALITY_TASKS = ("LCQMC", "BQ", "STS-B")
KERAS_INT8_SENTENCES = 2000


class STWorker:
    """bench/st_worker.py in another interpreter, one JSON line per command."""

    def __init__(self, python, folder, texts_file, work, maxlen):
        self.proc = subprocess.Popen([python, os.path.join(HERE, "st_worker.py"), "--model", folder, "--texts",
                                      texts_file, "--work", work, "--maxlen", str(maxlen)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = [f"st_{b}" for b in self._reply()["ready"]]

    def _reply(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the sentence-transformers worker died (see its stderr above)")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"sentence-transformers worker: {reply['error']}")
        return reply

    def ask(self, **command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self):
        self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def transformers_encoder(folder, tokenizer, maxlen, pooling):
    """texts -> L2-normalised vectors with transformers' BertModel (fp32, PyTorch), batches sorted by length."""
    import torch
    import transformers

    model = transformers.BertModel.from_pretrained(folder).eval()

    def encode(texts, batch_size=64):
        rows = [tokenizer.assemble(p, None, maxlen) for p in tokenizer.piece_ids(texts)]
        order = np.argsort([-len(r[0]) for r in rows], kind="stable")
        out = np.zeros((len(texts), model.config.hidden_size), dtype="float32")
        with torch.inference_mode():
            for start in range(0, len(rows), batch_size):
                index = order[start:start + batch_size]
                batch = tokenizer.pad([rows[i] for i in index])
                mask = torch.tensor(np.asarray(batch["padding_mask"], dtype="int64"))
                hidden = model(input_ids=torch.tensor(np.asarray(batch["token_ids"], dtype="int64")),
                               token_type_ids=torch.tensor(np.asarray(batch["segment_ids"], dtype="int64")),
                               attention_mask=mask).last_hidden_state
                if pooling == "cls":
                    vectors = hidden[:, 0]
                else:
                    vectors = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
                out[index] = vectors.numpy()
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    return encode


def systems_for(encoder, folder, st, texts_file, work):
    """name -> callable(texts file, texts) -> vectors."""
    hf = transformers_encoder(folder, encoder.tokenizer, encoder.maxlen, encoder.pooling)
    systems = {"zoo_fp32": lambda path, texts: encoder.encode(texts, batch_size=64),
               "zoo_int8_onnxruntime": lambda path, texts: encoder.encode(texts, batch_size=64, precision="int8"),
               "transformers_fp32": lambda path, texts: hf(texts)}
    for name in st.ready if st else ():
        def run(path, texts, name=name):
            out = os.path.join(work, f"{name}.npy")
            st.ask(cmd="encode", backend=name[3:], input=path, output=out, batch_size=64)
            return np.load(out)
        systems[name] = run
    return systems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, help="a checkpoint or saved SentenceEncoder")
    parser.add_argument("--pooling", default="cls", help="pooling for a checkpoint (cls or mean)")
    parser.add_argument("--data-dir", default=os.path.join(HERE, "..", "..", "shared", "data"))
    parser.add_argument("--sentences", type=int, default=25_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--st-python", default=None, help="interpreter of the sentence-transformers virtualenv")
    parser.add_argument("--work", default="/tmp/bench_inference")
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "inference"))
    args = parser.parse_args()
    setup_cli()
    os.makedirs(args.work, exist_ok=True)
    test = load_task("LCQMC", "test", args.data_dir)
    texts = (test.texts_a + test.texts_b)[:args.sentences]
    texts_file = os.path.join(args.work, "texts.txt")
    with open(texts_file, "w", encoding="utf-8") as f:
        f.write("\n".join(t.replace("\n", " ") for t in texts) + "\n")
    report = {"command": " ".join(sys.argv), "versions": versions(), "sentences": len(texts), "batch_size": 64,
              "repeats": args.repeats, "cpu_flags": sorted(zoo.inference.cpu_flags() & {"avx2", "avx512f", "avx512_vnni",
                                                                                     "avx512_bf16", "amx_bf16"}),
              "models": {}}
    for model in args.model:
        encoder = zoo.SentenceEncoder.from_preset(model, pooling=args.pooling)
        work = os.path.join(args.work, f"model{args.model.index(model)}")
        folder = save_transformers(encoder.backbone, os.path.join(work, "hf"), encoder.tokenizer,
                                   pooling=encoder.pooling, maxlen=encoder.maxlen)
        st = STWorker(args.st_python, folder, texts_file, os.path.join(work, "st"), encoder.maxlen) \
            if args.st_python else None
        systems = systems_for(encoder, folder, st, texts_file, work)
        for name, run in systems.items():  # warm-up on every text: XLA compiles each padded length once
            if not name.startswith("st_"):
                run(texts_file, texts)
        seconds = {name: [] for name in systems}
        for r in range(args.repeats):
            names = list(systems)[r % len(systems):] + list(systems)[:r % len(systems)]
            for name in names:
                if name.startswith("st_"):
                    seconds[name].append(st.ask(cmd="time", backend=name[3:], batch_size=64)["seconds"])
                else:
                    start = time.perf_counter()
                    systems[name](texts_file, texts)
                    seconds[name].append(time.perf_counter() - start)
                log.info("round %d %s: %.1f s (%.0f sentences/s)", r + 1, name, seconds[name][-1],
                         len(texts) / seconds[name][-1])
        ratio = {name: float(np.median([b / a for a, b in zip(s, seconds["transformers_fp32"])]))
                 for name, s in seconds.items()}
        # Keras's own int8 (Model.quantize): timed once on KERAS_INT8_SENTENCES beside zoo fp32, STS-B quality only
        keras_int8, few = quantized_copy(encoder, "int8"), texts[:KERAS_INT8_SENTENCES]
        keras_int8.encode(few)
        encoder.encode(few)
        start = time.perf_counter()
        keras_int8.encode(few)
        keras_seconds = time.perf_counter() - start
        start = time.perf_counter()
        encoder.encode(few)
        keras_vs_fp32 = (time.perf_counter() - start) / keras_seconds
        log.info("keras int8: %.0f sentences/s, %.2fx zoo fp32", len(few) / keras_seconds, keras_vs_fp32)
        report["models"][model] = {"seconds": seconds, "speed_vs_transformers_fp32": ratio}
        write_json_atomic(args.output + ".json", report)  # the timings, should the quality part fail
        quality = {}
        if not args.no_quality:
            for task in QUALITY_TASKS:
                data = load_task(task, "test", args.data_dir)
                unique = list(dict.fromkeys(data.texts_a + data.texts_b))
                path = os.path.join(work, f"{task}.txt")
                with open(path, "w", encoding="utf-8") as f:
                    f.write("\n".join(t.replace("\n", " ") for t in unique) + "\n")
                row = {t: i for i, t in enumerate(unique)}
                runs = dict(systems, zoo_int8_keras=lambda path, texts: keras_int8.encode(texts)) \
                    if task == "STS-B" else systems
                for name, run in runs.items():
                    v = run(path, unique)
                    cos = np.sum(v[[row[t] for t in data.texts_a]] * v[[row[t] for t in data.texts_b]], axis=1)
                    quality.setdefault(name, {})[task] = 100 * spearman(cos, data.labels)
        report["models"][model] = {"median_seconds": {k: float(np.median(v)) for k, v in seconds.items()},
                                   "seconds": seconds, "speed_vs_transformers_fp32": ratio,
                                   "sentences_per_second": {k: len(texts) / float(np.median(v))
                                                            for k, v in seconds.items()},
                                   "test_spearman": quality,
                                   "keras_int8": {"sentences": len(few), "sentences_per_second":
                                                  len(few) / keras_seconds, "speed_vs_zoo_fp32": keras_vs_fp32}}
        if st:
            st.close()
    rows = []
    for model, r in report["models"].items():
        for name in r["median_seconds"]:
            q = r["test_spearman"].get(name, {})
            rows.append([os.path.basename(model.rstrip("/")) or model, name, round(r["sentences_per_second"][name]),
                         r["speed_vs_transformers_fp32"][name]] + [q.get(t) for t in QUALITY_TASKS])
        k = r["keras_int8"]
        rows.append([os.path.basename(model.rstrip("/")) or model, f"zoo_int8_keras ({k['sentences']} sentences, "
                     f"once: {k['speed_vs_zoo_fp32']:.2f}x zoo fp32)", round(k["sentences_per_second"]), None, None,
                     None, r["test_spearman"].get("zoo_int8_keras", {}).get("STS-B")])
    text = table(["model", "system", "sentences/s", "x transformers fp32"] +
                 [f"{t} test Spearman" for t in QUALITY_TASKS], rows)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    write_json_atomic(args.output + ".json", report)
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
