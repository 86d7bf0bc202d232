"""sentence-transformers CPU backends as a worker process for benchmark drivers.

Runs in its own virtualenv (torch CPU, sentence-transformers, optimum[onnxruntime],
optimum-intel[openvino], datasets), so that a driver in the zoo environment can time
zoo and sentence-transformers (ST) side by side:

    ../stenv/bin/python bench/st_worker.py --model HF_DIR --texts TEXTS_FILE \
        --work WORKDIR [--pooling cls|mean] [--maxlen 64] [--threads N] \
        [--backends torch_fp32,onnx_fp32,...] [--reuse]

Setup (CPU-only torch pinned so pip does not pull a CUDA build; huggingface-hub<1.0 keeps
datasets from upgrading it past what transformers 4.x accepts):

    python3 -m venv ../stenv
    ../stenv/bin/pip install "torch==2.13.0" "sentence-transformers[onnx,openvino]" \
        "optimum[onnxruntime]" datasets "huggingface-hub<1.0"

HF_DIR is a transformers BERT folder. If it has no modules.json, the ST model is built
from modules: Transformer(max_seq_length=--maxlen) + Pooling(--pooling) + Normalize.
Either way the model is saved to WORKDIR/st_fp32 (with max_seq_length = --maxlen) and
every export is written inside that folder; nothing is fetched from the network.

Backends (each a SentenceTransformer object):
  torch_fp32     backend="torch"
  onnx_fp32      backend="onnx" (exported by optimum to st_fp32/onnx/model.onnx)
  onnx_o1, onnx_o2, onnx_o3
                 export_optimized_onnx_model with optimum's O1 / O2 / O3 configurations
                 (ONNX Runtime's graph optimizations: basic, + transformer fusions, + GELU
                 approximation), onnx/model_O1.onnx ...
  onnx_int8      export_dynamic_quantized_onnx_model with the ORT config for this CPU
                 ("avx512_vnni" if the CPU has VNNI, else "avx512" if AVX-512F, else
                 "avx2"; "arm64" on ARM): dynamic quantisation, no calibration data
  onnx_int8_avx2 the same with the "avx2" configuration (u8 weights; what most x86 CPUs run)
  openvino_fp32  backend="openvino" (st_fp32/openvino/openvino_model.xml)
  openvino_int8  export_static_quantized_openvino_model with OVQuantizationConfig(num_samples=n)
                 (static post-training quantisation by NNCF), calibrated on the first
                 n = min(300, count) non-empty lines of TEXTS_FILE, written as a local "text"
                 dataset (WORKDIR/calib/train.txt) in place of ST's default hub set glue/sst2;
                 ST tokenises calibration texts padded to 384 tokens

Threads: --threads N (default: the CPUs this process may run on) is applied as
torch.set_num_threads(N), onnxruntime SessionOptions(intra_op_num_threads=N,
inter_op_num_threads=1) and OpenVINO ov_config {"INFERENCE_NUM_THREADS": N,
"PERFORMANCE_HINT": "LATENCY"}.

Prep seconds cover export/quantisation, loading and an 8-text warm-up encode; those of
torch_fp32 also include building WORKDIR/st_fp32. With --reuse, existing files in
WORKDIR/st_fp32 are loaded instead of rebuilt (so only loading is timed).

Protocol: one JSON object per line. stdout carries nothing but replies; all logging goes
to stderr (file descriptor 1 is redirected to 2 while working).
  startup  -> {"ready": [names], "seconds": {name: prep seconds}, "failed": {name: error}}
  {"cmd": "time", "backend": NAME, "batch_size": 64}
           -> {"backend": NAME, "seconds": wall seconds of model.encode over TEXTS_FILE, "n": count}
  {"cmd": "encode", "backend": NAME, "input": FILE, "output": OUT.npy, "batch_size": 64}
           -> {"ok": true, "output": OUT.npy}   (float32, rows in input order)
  {"cmd": "latency", "backend": NAME, "n": 200}
           -> {"backend": NAME, "ms": [wall ms of model.encode([text]) for each of the first n texts]}
  {"cmd": "quit"} -> exits 0 (so does end of input)
  anything that fails -> {"error": "message"}, and the worker keeps serving.
Texts are read one per line (UTF-8; the line break is dropped) and encoded with
normalize_embeddings=True.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
import traceback

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_var] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ALL_BACKENDS = ("torch_fp32", "onnx_fp32", "onnx_o1", "onnx_o2", "onnx_o3", "onnx_int8", "onnx_int8_avx2",
                "openvino_fp32", "openvino_int8")
CALIB_SAMPLES = 300
OV_INT8_FILE = "openvino/openvino_model_qint8_quantized.xml"


def log(*parts) -> None:
    print("[st_worker]", *parts, file=sys.stderr, flush=True)


def take_stdout():
    """Keep a private handle on stdout for replies and point fd 1 at stderr."""
    sys.stdout.flush()
    reply = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return reply


def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f]


def cpu_quant_config() -> str:
    """ORT dynamic-quantisation preset matching this CPU's instruction set."""
    if platform.machine().lower() in ("arm64", "aarch64"):
        return "arm64"
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags.update(line.split(":", 1)[1].split())
    except OSError:
        pass
    if "avx512_vnni" in flags or "avx512vnni" in flags:
        return "avx512_vnni"
    if "avx512f" in flags:
        return "avx512"
    return "avx2"


class Backends:
    """Builds ST models for each backend inside WORKDIR/st_fp32."""

    def __init__(self, args, texts: list[str]):
        self.args = args
        self.texts = texts
        self.st_dir = os.path.join(args.work, "st_fp32")
        self.threads = args.threads

    # --- runtime settings -------------------------------------------------
    def ort_kwargs(self) -> dict:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        return {"provider": "CPUExecutionProvider", "session_options": opts}

    def ov_kwargs(self) -> dict:
        return {"ov_config": {"INFERENCE_NUM_THREADS": self.threads, "PERFORMANCE_HINT": "LATENCY"}}

    def load(self, backend: str, model_kwargs: dict | None = None):
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(self.st_dir, device="cpu", backend=backend,
                                    model_kwargs=model_kwargs, local_files_only=True)
        model.max_seq_length = self.args.maxlen
        return model

    # --- base folder ------------------------------------------------------
    def build_base(self) -> None:
        """Write WORKDIR/st_fp32: the ST model in safetensors, max_seq_length = --maxlen."""
        from sentence_transformers import SentenceTransformer

        try:  # ST >= 5.x moved the modules; sentence_transformers.models still works, with a warning
            from sentence_transformers.sentence_transformer import modules as models
        except ImportError:
            from sentence_transformers import models

        if self.args.reuse and os.path.exists(os.path.join(self.st_dir, "modules.json")):
            return
        src = self.args.model
        if os.path.realpath(src) == os.path.realpath(self.st_dir):
            raise ValueError("--model must not be WORKDIR/st_fp32 (it is rebuilt); use --reuse")
        shutil.rmtree(self.st_dir, ignore_errors=True)
        if os.path.exists(os.path.join(src, "modules.json")):
            model = SentenceTransformer(src, device="cpu", local_files_only=True)
        else:
            word = models.Transformer(src, max_seq_length=self.args.maxlen)
            dim = getattr(word, "get_embedding_dimension", None) or word.get_word_embedding_dimension
            pool = models.Pooling(dim(), pooling_mode=self.args.pooling)
            model = SentenceTransformer(modules=[word, pool, models.Normalize()], device="cpu")
        model.max_seq_length = self.args.maxlen
        model.save(self.st_dir)

    # --- one preparer per backend ------------------------------------------
    def torch_fp32(self):
        return self.load("torch")

    def onnx_fp32(self):
        exists = os.path.exists(os.path.join(self.st_dir, "onnx", "model.onnx"))
        model = self.load("onnx", self.ort_kwargs())
        if not exists:
            model.save(self.st_dir)  # persists onnx/model.onnx for later runs
        return model

    def optimized(self, level):
        from sentence_transformers import export_optimized_onnx_model

        rel = f"onnx/model_{level}.onnx"
        if not os.path.exists(os.path.join(self.st_dir, rel)):
            export_optimized_onnx_model(self.load("onnx", self.ort_kwargs()), level, self.st_dir)
        return self.load("onnx", {**self.ort_kwargs(), "file_name": rel})

    def onnx_o1(self):
        return self.optimized("O1")

    def onnx_o2(self):
        return self.optimized("O2")

    def onnx_o3(self):
        return self.optimized("O3")

    def onnx_int8_avx2(self):
        return self.onnx_int8("avx2")

    def onnx_int8(self, preset=None):
        from optimum.onnxruntime.configuration import AutoQuantizationConfig
        from sentence_transformers import export_dynamic_quantized_onnx_model

        preset = preset or cpu_quant_config()
        config = getattr(AutoQuantizationConfig, preset)(is_static=False)
        # ST names the file model_{weights dtype}_{preset}.onnx, e.g. model_quint8_avx2.onnx
        rel = f"onnx/model_{config.weights_dtype.name.lower()}_{preset}.onnx"
        if not os.path.exists(os.path.join(self.st_dir, rel)):
            fp32 = self.load("onnx", self.ort_kwargs())
            export_dynamic_quantized_onnx_model(fp32, preset, self.st_dir)
        log(f"onnx_int8: ORT dynamic quantisation preset {preset!r} -> {rel}: {config}")
        return self.load("onnx", {**self.ort_kwargs(), "file_name": rel})

    def openvino_fp32(self):
        exists = os.path.exists(os.path.join(self.st_dir, "openvino", "openvino_model.xml"))
        model = self.load("openvino", self.ov_kwargs())
        if not exists:
            model.save(self.st_dir)  # persists openvino/openvino_model.xml
        return model

    def openvino_int8(self):
        from optimum.intel import OVQuantizationConfig
        from sentence_transformers import export_static_quantized_openvino_model

        if not os.path.exists(os.path.join(self.st_dir, OV_INT8_FILE)):
            calib_dir, n_calib = self.write_calibration()
            fp32 = self.load("openvino", self.ov_kwargs())
            export_static_quantized_openvino_model(
                fp32, OVQuantizationConfig(num_samples=n_calib), self.st_dir,
                dataset_name=calib_dir, dataset_config_name="default",
                dataset_split="train", column_name="text")
        return self.load("openvino", {**self.ov_kwargs(), "file_name": OV_INT8_FILE})

    def write_calibration(self) -> tuple[str, int]:
        """First CALIB_SAMPLES non-empty texts as a local 'text' dataset folder."""
        calib_dir = os.path.join(self.args.work, "calib")
        os.makedirs(calib_dir, exist_ok=True)
        lines = [t for t in self.texts if t.strip()][:CALIB_SAMPLES]
        with open(os.path.join(calib_dir, "train.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        log(f"openvino_int8: calibrating on {len(lines)} lines of {self.args.texts}")
        return calib_dir, len(lines)

    # --- all of them --------------------------------------------------------
    def prepare(self, names):
        ready, seconds, failed = {}, {}, {}
        t0 = time.perf_counter()
        try:
            self.build_base()
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            return {}, {}, {name: f"building st_fp32: {type(exc).__name__}: {exc}" for name in names}
        base_s = time.perf_counter() - t0
        warm = self.texts[:8]
        for name in names:
            t0 = time.perf_counter()
            try:
                model = getattr(self, name)()
                model.encode(warm, batch_size=8, show_progress_bar=False)
            except Exception as exc:  # keep the other backends going
                traceback.print_exc(file=sys.stderr)
                failed[name] = f"{type(exc).__name__}: {exc}"
                log(f"{name}: FAILED ({failed[name]})")
                continue
            ready[name] = model
            seconds[name] = round(time.perf_counter() - t0 + (base_s if name == "torch_fp32" else 0), 3)
            log(f"{name}: ready in {seconds[name]} s")
        log(f"ready: {list(ready)}; threads={self.threads}")
        return ready, seconds, failed


def encode(model, texts, batch_size):
    import numpy as np

    emb = model.encode(texts, batch_size=batch_size, convert_to_numpy=True,
                       normalize_embeddings=True, show_progress_bar=False)
    return np.asarray(emb, dtype=np.float32)


def handle(req: dict, models: dict, texts: list[str]):
    cmd = req.get("cmd")
    if cmd == "quit":
        return None
    if cmd not in ("time", "encode", "latency"):
        raise ValueError(f"unknown cmd {cmd!r}")
    name = req.get("backend")
    if name not in models:
        raise ValueError(f"backend {name!r} not ready (ready: {sorted(models)})")
    batch_size = int(req.get("batch_size", 64))
    if cmd == "latency":
        ms = []
        for text in texts[:int(req.get("n", 200))]:
            t0 = time.perf_counter()
            models[name].encode([text], batch_size=1, normalize_embeddings=True, show_progress_bar=False)
            ms.append(1000 * (time.perf_counter() - t0))
        return {"backend": name, "ms": ms}
    if cmd == "time":
        t0 = time.perf_counter()
        encode(models[name], texts, batch_size)
        return {"backend": name, "seconds": time.perf_counter() - t0, "n": len(texts)}
    import numpy as np

    emb = encode(models[name], read_lines(req["input"]), batch_size)
    np.save(req["output"], emb)
    return {"ok": True, "output": req["output"]}


def serve(reply, models: dict, texts: list[str]) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            out = handle(json.loads(line), models, texts)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            out = {"error": f"{type(exc).__name__}: {exc}"}
        if out is None:
            return
        reply.write(json.dumps(out, ensure_ascii=False) + "\n")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="transformers BERT folder (HF_DIR)")
    p.add_argument("--texts", required=True, help="UTF-8 file, one text per line")
    p.add_argument("--work", required=True, help="folder for the ST model and its exports")
    p.add_argument("--pooling", choices=("cls", "mean"), default="cls",
                   help="pooling when HF_DIR has no modules.json")
    p.add_argument("--maxlen", type=int, default=64, help="max_seq_length for every backend")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--backends", default=",".join(ALL_BACKENDS))
    p.add_argument("--reuse", action="store_true",
                   help="reuse WORKDIR/st_fp32 and exports from an earlier run")
    args = p.parse_args(argv)
    args.backends = [b for b in args.backends.split(",") if b]
    unknown = set(args.backends) - set(ALL_BACKENDS)
    if unknown:
        p.error(f"unknown backends {sorted(unknown)}; choose from {ALL_BACKENDS}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    reply = take_stdout()
    import torch

    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    texts = read_lines(args.texts)
    models, seconds, failed = Backends(args, texts).prepare(args.backends)
    reply.write(json.dumps({"ready": list(models), "seconds": seconds, "failed": failed}) + "\n")
    serve(reply, models, texts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
