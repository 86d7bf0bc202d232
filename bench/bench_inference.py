"""CPU inference, side by side in one run: zoo's precisions against transformers and sentence-transformers.

    python bench/bench_inference.py --model zoo-embed-zh-L4 --st-python PATH
    python bench/bench_inference.py --model ../shared/models/chinese_L-6_H-384_A-6/google --pooling mean \
        --st-python PATH

PATH: the python of a virtualenv with sentence-transformers (bench/st_worker.py's docstring says how to make it).
Each run adds its model to bench/results/inference.json (and rewrites inference.md from all models in it).

The model (a saved SentenceEncoder, or a checkpoint with ``--pooling``) is also written as a transformers /
sentence-transformers folder, so every system runs the same weights. Systems: zoo ``fp32`` (Keras, XLA),
``bf16`` (on CPUs with AVX512-BF16/AMX), ``onnx-fp32`` and ``int8`` (the fused ONNX Runtime graph,
``zoo.inference.fused_onnx``), ``openvino-int8`` (its standard-op int8 version on OpenVINO, where installed), each through
Keras's ``SentenceEncoder.encode`` and, as ``zoo_light_*``, through the light runtime (``zoo.inference.light``, what
``zoo encode`` runs: no per-call check of the Keras weights); transformers fp32 (BertModel, PyTorch); sentence-transformers' torch, ONNX (plain, optimum's
O1-O3 optimized exports, dynamic int8 with this CPU's and with the avx2 configuration) and OpenVINO fp32 / int8
backends (bench/st_worker.py, in its own interpreter). sentence-transformers has no first-last-avg pooling: for
a first-last-avg model its systems pool with mean (the same work; other vectors, so their Spearman is not the
model's).

- Throughput: the first ``--sentences`` LCQMC test sentences at batch 64; every system first runs once (XLA
  compiles each padded length, exports load); then ``--rounds`` rounds, each timing every system once in a
  rotated order. Reported: median seconds, sentences/s, and speed ratios to transformers fp32 and to the fastest
  sentence-transformers backend, each the median of the per-round ratios.
- Latency: one sentence at a time (batch 1) over the first ``--latency-sentences`` sentences, after 20
  warm-up calls, in ``--rounds`` rounds of every system in a rotated order: the median and p90 milliseconds
  per system of its median round.
- Quality: LCQMC, BQ and STS-B test Spearman (x100) of each system (on the first ``--quality-pairs`` pairs of
  each test set when given).
- Tokenizing: the share of ``encode``'s time (at the fastest zoo precision) spent in the tokenizer (Rust word
  pieces) and in Python rows (assembly of [CLS] a [SEP], length sort, padding), and the Rust pipeline that would
  replace pieces + assembly (a TemplateProcessing post-processor with truncation; the same ids, checked), medians.
- engine="fastest": its choice for this model on this machine and why, and the start-up of a first call (graphs
  written, choice measured) and of a later process (read from the cache), each in a fresh process.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import zoo
from zoo import inference
from zoo.inference import autotune
from zoo.checkpoints import save_transformers
from zoo.data.tasks import load_task
from zoo.inference.light import OnnxEncoder
from zoo.inference.graphs import graph_path
from zoo.inference.openvino_engine import openvino_available
from zoo.evaluation import spearman
from zoo.logs import log, setup_cli
from zoo.paths import write_json_atomic, write_text_atomic
from zoo.presets import preset_class_name
from zoo.train.results import table, versions

HERE = os.path.dirname(os.path.abspath(__file__))
QUALITY_TASKS = ("LCQMC", "BQ", "STS-B")
ZOO_PRECISIONS = ("fp32", "bf16", "onnx-fp32", "int8", "openvino-int8")
LIGHT_PRECISIONS = ("onnx-fp32", "int8", "openvino-int8")  # also timed on the light runtime (zoo.inference.light)
STARTUP = """
import json, sys, time
t0 = time.perf_counter()
import zoo
from zoo import inference
encoder = zoo.from_preset(sys.argv[1], **json.loads(sys.argv[2]))
t1 = time.perf_counter()
encoder.encode(["今天天气不错"], engine="fastest")
t2 = time.perf_counter()
print(json.dumps({"load_s": t1 - t0, "first_encode_s": t2 - t1, "choice": inference.choose(encoder, "fastest")}))
"""


class STWorker:
    """bench/st_worker.py in another interpreter, one JSON line per command."""

    def __init__(self, python, folder, texts_file, work, maxlen, pooling):
        self.proc = subprocess.Popen([python, os.path.join(HERE, "st_worker.py"), "--model", folder, "--texts",
                                      texts_file, "--work", work, "--maxlen", str(maxlen), "--pooling", pooling],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        startup = self._reply()
        self.ready, self.failed = [f"st_{b}" for b in startup["ready"]], startup["failed"]

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
                batch = {k: torch.tensor(np.asarray(v, dtype="int64"))
                         for k, v in tokenizer.pad([rows[i] for i in index]).items()}
                result = model(input_ids=batch["token_ids"], token_type_ids=batch["segment_ids"],
                               attention_mask=batch["padding_mask"], output_hidden_states=pooling == "first-last-avg")
                if pooling == "cls":
                    vectors = result.last_hidden_state[:, 0]
                else:
                    hidden = result.last_hidden_state if pooling == "mean" else \
                        (result.hidden_states[1] + result.hidden_states[-1]) / 2
                    mask = batch["padding_mask"][..., None].float()
                    vectors = (hidden * mask).sum(1) / mask.sum(1)
                out[index] = vectors.numpy()
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    return encode


def local_systems(encoder, folder):
    """name -> callable(texts) -> vectors, for zoo's precisions (Keras's ``SentenceEncoder``, and
    ``zoo_light_*``: the light runtime's ``OnnxEncoder`` on the same graph files, what ``zoo encode`` runs) and
    transformers."""
    systems = {}
    for precision in ZOO_PRECISIONS:
        if precision == "bf16" and not inference.bf16_supported() or \
                precision == "openvino-int8" and not openvino_available():
            continue
        systems[f"zoo_{precision}"] = lambda texts, p=precision: encoder.encode(texts, batch_size=64, engine=p,
                                                                                   show_progress_bar=False)
    for precision in LIGHT_PRECISIONS:
        if f"zoo_{precision}" in systems:
            light = OnnxEncoder(graph_path(encoder, precision), encoder.tokenizer, encoder.maxlen, dim=encoder.dim,
                                precision=precision)
            systems[f"zoo_light_{precision}"] = lambda texts, e=light: e.encode(texts, batch_size=64,
                                                                                show_progress_bar=False)
    systems["transformers_fp32"] = transformers_encoder(folder, encoder.tokenizer, encoder.maxlen, encoder.pooling)
    return systems


def rust_template(tokenizer, maxlen):
    """The alternative to ``piece_ids`` + ``assemble``: the Rust tokenizer adding [CLS]/[SEP] and truncating
    itself (a TemplateProcessing post-processor), for single texts the same rows."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers.processors import TemplateProcessing

    rust = RustTokenizer.from_str(tokenizer._rust.to_str())
    rust.post_processor = TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", tokenizer.cls_id), ("[SEP]", tokenizer.sep_id)])
    rust.enable_truncation(maxlen)
    return lambda texts: [(e.ids, e.type_ids) for e in rust.encode_batch(texts)]


def tokenizing_share(encoder, texts, precision, rounds):
    """Where encode's time goes besides the model, at ``precision``: Rust word pieces, Python rows (assembly,
    length sort, padding), and the Rust template pipeline that would replace pieces + assembly."""
    tok = encoder.tokenizer
    template = rust_template(tok, encoder.maxlen)
    rows = [tok.assemble(p, None, encoder.maxlen) for p in tok.piece_ids(texts)]
    assert [(list(a), list(b)) for a, b in template(texts)] == [(list(a), list(b)) for a, b in rows]
    times = {"encode": [], "rust_pieces": [], "python_rows": [], "rust_template": []}
    for _ in range(rounds):
        start = time.perf_counter()
        encoder.encode(texts, engine=precision, show_progress_bar=False)
        times["encode"].append(time.perf_counter() - start)
        start = time.perf_counter()
        pieces = tok.piece_ids(texts)
        times["rust_pieces"].append(time.perf_counter() - start)
        start = time.perf_counter()
        rows = [tok.assemble(p, None, encoder.maxlen) for p in pieces]
        order = np.argsort([-len(r[0]) for r in rows], kind="stable")
        for s in range(0, len(rows), 64):
            tok.pad([rows[i] for i in order[s:s + 64]])
        times["python_rows"].append(time.perf_counter() - start)
        start = time.perf_counter()
        template(texts)
        times["rust_template"].append(time.perf_counter() - start)
    median = {k: float(np.median(v)) for k, v in times.items()}
    return {"precision": precision, "median_seconds": median,
            "share_of_encode": (median["rust_pieces"] + median["python_rows"]) / median["encode"],
            "rust_share_of_encode": median["rust_pieces"] / median["encode"],
            "template_vs_pieces": median["rust_template"] / median["rust_pieces"]}


def run_system(name, systems, st, texts=None, path=None):
    if name.startswith("st_"):
        out = os.path.join(os.path.dirname(path), f"{name}.npy")
        st.ask(cmd="encode", backend=name[3:], input=path, output=out, batch_size=64)
        return np.load(out)
    return systems[name](texts)


def write_lines(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(t.replace("\n", " ") for t in texts) + "\n")
    return path


def startup(model, kwargs):
    """fastest's first call (fresh cache: graphs written, choice measured) and a later process's (cached)."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "ZOO_CACHE": cache, "TF_CPP_MIN_LOG_LEVEL": "3"}
        env.pop("ZOO_PRECISION", None)
        for key in ("first_call", "cached"):
            done = subprocess.run([sys.executable, "-c", STARTUP, model, json.dumps(kwargs)], capture_output=True,
                                  text=True, env=env, timeout=1800)
            if done.returncode:
                raise RuntimeError(f"fastest start-up run failed: {done.stderr[-2000:]}")
            out[key] = json.loads(done.stdout.strip().splitlines()[-1])
        [record] = [json.load(open(os.path.join(cache, "onnx", "fastest", name), encoding="utf-8"))
                    for name in os.listdir(os.path.join(cache, "onnx", "fastest"))]
    out["record"] = record
    return out


def shown(path):
    """A path as recorded: relative to the repository when below it, else as given when relative, else its name."""
    if not os.path.isabs(path):
        return path
    rel = os.path.relpath(path, os.path.dirname(HERE))
    return rel if not rel.startswith("..") else os.path.basename(path.rstrip("/"))


def bench_model(args, model):
    kwargs = {} if preset_class_name(model) == "SentenceEncoder" else {"pooling": args.pooling}
    encoder = zoo.SentenceEncoder.from_preset(model, **kwargs)
    work = tempfile.mkdtemp(prefix="model-", dir=args.work)
    folder = save_transformers(encoder.backbone, os.path.join(work, "hf"), encoder.tokenizer,
                               pooling=encoder.pooling if encoder.pooling in ("cls", "mean") else None,
                               maxlen=encoder.maxlen)
    test = load_task("LCQMC", "test", args.data_dir)
    texts = (test.texts_a + test.texts_b)[:args.sentences]
    texts_file = write_lines(os.path.join(work, "texts.txt"), texts)
    st_pooling = encoder.pooling if encoder.pooling in ("cls", "mean") else "mean"
    st = STWorker(args.st_python, folder, texts_file, os.path.join(work, "st"), encoder.maxlen, st_pooling) \
        if args.st_python else None
    systems = local_systems(encoder, folder)
    names = list(systems) + (st.ready if st else [])
    for name in systems:  # warm-up on every text: XLA compiles each padded length once, graphs are written
        systems[name](texts)
    seconds = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name.startswith("st_"):
                seconds[name].append(st.ask(cmd="time", backend=name[3:], batch_size=64)["seconds"])
            else:
                start = time.perf_counter()
                systems[name](texts)
                seconds[name].append(time.perf_counter() - start)
            log.info("round %d %s: %.1f s (%.0f sentences/s)", r + 1, name, seconds[name][-1],
                     len(texts) / seconds[name][-1])
    st_names = [n for n in names if n.startswith("st_")]

    def ratio_to(reference):  # per round: reference seconds / system seconds; median over rounds
        return {name: float(np.median([ref / own for own, ref in zip(seconds[name], reference)])) for name in names}

    best_st_per_round = [min(seconds[n][r] for n in st_names) for r in range(args.rounds)] if st_names else None
    fastest_zoo = min((n for n in systems if n.startswith("zoo_") and not n.startswith("zoo_light_")),
                      key=lambda n: np.median(seconds[n]))
    tokenizing = tokenizing_share(encoder, texts, fastest_zoo[4:], args.rounds)
    log.info("tokenizing: %.1f%% of encode at %s (Rust word pieces %.1f%%); the Rust template pipeline takes "
             "%.2fx the time of the word pieces alone", 100 * tokenizing["share_of_encode"], fastest_zoo,
             100 * tokenizing["rust_share_of_encode"], tokenizing["template_vs_pieces"])
    rounds_ms = {name: [] for name in names}  # per round, each system's ms per sentence
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name.startswith("st_"):
                st.ask(cmd="latency", backend=name[3:], n=20)
                ms = st.ask(cmd="latency", backend=name[3:], n=args.latency_sentences)["ms"]
            else:
                for text in texts[:20]:
                    systems[name]([text])
                ms = []
                for text in texts[:args.latency_sentences]:
                    start = time.perf_counter()
                    systems[name]([text])
                    ms.append(1000 * (time.perf_counter() - start))
            rounds_ms[name].append(ms)
    latency = {}
    for name, rounds in rounds_ms.items():  # the median round (by its median), and its p90
        middle = sorted(rounds, key=np.median)[len(rounds) // 2]
        latency[name] = {"median_ms": float(np.median(middle)), "p90_ms": float(np.percentile(middle, 90)),
                         "round_medians_ms": [float(np.median(ms)) for ms in rounds]}
        log.info("latency %s: median %.2f ms", name, latency[name]["median_ms"])
    quality = {}
    if not args.no_quality:
        for task in QUALITY_TASKS:
            data = load_task(task, "test", args.data_dir).head(args.quality_pairs)
            unique = list(dict.fromkeys(data.texts_a + data.texts_b))
            path = write_lines(os.path.join(work, f"{task}.txt"), unique)
            row = {t: i for i, t in enumerate(unique)}
            for name in names:
                v = run_system(name, systems, st, unique, path)
                cos = np.sum(v[[row[t] for t in data.texts_a]] * v[[row[t] for t in data.texts_b]], axis=1)
                quality.setdefault(name, {})[task] = 100 * spearman(cos, data.labels)
            log.info("quality %s: %s", task, {n: round(q[task], 2) for n, q in quality.items()})
    if st:
        st.close()
    median = {k: float(np.median(v)) for k, v in seconds.items()}
    return {"class": type(encoder).__name__, "pooling": encoder.pooling, "st_pooling": st_pooling,
            "layers": encoder.backbone.num_layers, "hidden": encoder.dim, "maxlen": encoder.maxlen,
            "sentences": len(texts), "seconds": seconds, "median_seconds": median,
            "sentences_per_second": {k: len(texts) / v for k, v in median.items()},
            "speed_vs_transformers_fp32": ratio_to(seconds["transformers_fp32"]),
            "speed_vs_best_st": ratio_to(best_st_per_round) if st_names else {},
            "latency_batch1": latency, "tokenizing": tokenizing, "test_spearman": quality, "quality_pairs": args.quality_pairs or "all",
            "st_failed": st.failed if st else {}, "fastest": startup(model, kwargs)}


def tokenizing_note(t):
    text = f"Text to padded batches: {100 * t['share_of_encode']:.1f}% of encode's time at {t['precision']}"
    if "rust_share_of_encode" not in t:  # a result written before the breakdown was measured
        return text + "."
    return (text + f" ({100 * t['rust_share_of_encode']:.1f}% in the Rust word pieces; Rust adding [CLS]/[SEP] "
            f"and truncating itself takes {t['template_vs_pieces']:.2f}x their time).")


def markdown(report):
    rows = []
    for model, r in report["models"].items():
        for name, sps in r["sentences_per_second"].items():
            q = r["test_spearman"].get(name, {})
            rows.append([model, name, round(sps), r["speed_vs_transformers_fp32"][name],
                         r["speed_vs_best_st"].get(name), round(r["latency_batch1"][name]["median_ms"], 2)]
                        + [q.get(t) for t in QUALITY_TASKS])
    text = table(["model", "system", "sentences/s (batch 64)", "x transformers fp32", "x best sentence-transformers",
                  "batch-1 ms (median)"] + [f"{t} test Spearman" for t in QUALITY_TASKS], rows)
    notes = []
    for model, r in report["models"].items():
        a = r.get("fastest") or r["auto"]  # "auto": files measured before auto became lossless (it measured then)
        notes.append(f"- {model}: precision fastest picks **{a['record']['choice']}** ({a['record']['reason']}); "
                     f"start-up to the first vector: {a['first_call']['first_encode_s']:.1f} s on the first call "
                     f"(graphs written and the choice measured), {a['cached']['first_encode_s']:.1f} s in a later "
                     f"process (cached). sentence-transformers pooling: {r['st_pooling']}"
                     + (f" (the model's own is {r['pooling']})" if r["st_pooling"] != r["pooling"] else "") + ". "
                     + tokenizing_note(r["tokenizing"]) + " Load average "
                     f"{r['load_average_before'][0]:.1f} before, {r['load_average_after'][0]:.1f} after, on "
                     f"{r['cpu']}.")
    return text + "\n\n" + "\n".join(notes) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, help="a saved SentenceEncoder or a checkpoint")
    parser.add_argument("--pooling", default="mean", help="pooling for a checkpoint (cls, mean, first-last-avg)")
    parser.add_argument("--data-dir", default=os.path.join(HERE, "..", "..", "shared", "data"))
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-sentences", type=int, default=200)
    parser.add_argument("--st-python", default=None, help="interpreter of the sentence-transformers virtualenv")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--quality-pairs", type=int, default=None, help="first N pairs of each test set")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "inference"))
    args = parser.parse_args()
    setup_cli()
    os.environ.pop("ZOO_PRECISION", None)
    scratch = tempfile.TemporaryDirectory() if args.work is None else None
    args.work = args.work or scratch.name
    os.makedirs(args.work, exist_ok=True)
    try:
        with open(args.output + ".json", encoding="utf-8") as f:
            report = json.load(f)
    except FileNotFoundError:
        report = {"models": {}}
    command = [shown(a) if os.path.sep in a else a for a in sys.argv]
    if args.st_python:
        command[command.index(shown(args.st_python))] = "PATH"
    cpu = autotune.machine_id().split(", onnxruntime")[0]
    load_before = os.getloadavg()
    for model in args.model:
        result = bench_model(args, model)
        result.update(command=" ".join(command), versions=versions(), cpu=cpu,
                      cpu_flags=sorted(inference.cpu_flags() & {"avx2", "avx512f", "avx512_vnni", "avx_vnni",
                                                                "avx512_bf16", "amx_bf16"}),
                      load_average_before=[round(x, 2) for x in load_before],
                      load_average_after=[round(x, 2) for x in os.getloadavg()])
        report["models"][shown(model)] = result
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
        write_json_atomic(args.output + ".json", report)
    text = markdown(report)
    write_text_atomic(args.output + ".md", text)
    print(text)
    if scratch is not None:
        scratch.cleanup()


if __name__ == "__main__":
    main()
