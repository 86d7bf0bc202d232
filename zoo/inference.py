"""Inference precisions for a task model's batched prediction (``encode(..., precision=...)``).

- ``fp32``: the Keras model itself (XLA-compiled on TensorFlow and JAX).
- ``bf16``: a bfloat16 copy of the model (weights and arithmetic). Only CPUs with AVX512-BF16 or AMX do bf16
  natively; elsewhere it would be emulated and slower, so zoo warns and runs fp32.
- ``onnx-fp32``: the model as a fused ONNX Runtime graph (``zoo.fused_onnx``: 7 fused kernels per layer),
  float32: the Keras model's outputs within ``PARITY_TOLERANCE`` (tested).
- ``int8``: the same fused graph with ONNX Runtime's dynamic quantization (int8 weights per output channel for
  every matrix product, QAttention for the attention projections; activations quantized per batch at run time).
- ``auto`` (the default): ``$ZOO_PRECISION`` when set, else the fastest path on this machine among those whose
  quality loss was measured small (``choose``). On a GPU that is Keras fp32; without ONNX Runtime
  (``pip install 'zoo[onnx]'``) fp32 as well. Otherwise, the first time a model (by the hash of its weights) is
  seen on a machine, zoo measures on a probe set -- the first ``PROBE_PAIRS`` pairs of LCQMC's valid split in
  zoo's data folder -- and keeps:
    * ``onnx-fp32`` when its outputs equal the Keras model's within ``PARITY_TOLERANCE`` on probe texts,
    * ``int8`` when, besides, its Spearman on the probe pairs is at most ``MAX_SPEARMAN_LOSS`` below onnx-fp32's,
  then times Keras fp32 and the kept ONNX paths on a probe workload -- ``PROBE_TIMED_ROWS`` probe rows in batches of
  64 (bulk encoding), then ``PROBE_SINGLE_ROWS`` of them one at a time (served requests) -- in interleaved rounds
  and picks the fastest (median seconds of the whole workload). Where int8's matrix products are no faster than
  float32 ones (AVX2 without VNNI) the batches take about as long on both ONNX paths and the single rows decide.
  bf16 is never picked: its quality loss is not measured here. The choice, with its numbers, is logged and
  recorded beside the cached graphs. Without the probe data (an installed wheel) int8's quality cannot be
  measured: auto then picks the faster of fp32 and onnx-fp32 on the probe texts.

The ONNX graphs are cached in ``zoo.paths.cache_dir("onnx")`` (``$ZOO_CACHE``), one folder per model keyed by the
sha256 of its weights, its head and the writer and ONNX Runtime versions, written atomically and checked against
their sha256 when read (a damaged file is rebuilt). The bf16 copy and ONNX sessions are built at first use and
kept per model; they follow the weights: a change (more training, ``set_weights``) is noticed from a sample of
the weights at the next call and they are rebuilt. ``forget(model)`` drops them at once.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
import weakref

import numpy as np

from .errors import CheckpointError
from .logs import log, root_logging_kept, stderr_silenced
from .paths import DATA_DIR, cache_dir, check_manifest, file_manifest, read_json_file, write_json_atomic

PRECISIONS = ("auto", "fp32", "bf16", "onnx-fp32", "int8")
ONNX_PRECISIONS = ("onnx-fp32", "int8")
ONNX_FILES = {"onnx-fp32": "model.onnx", "int8": "model.int8.onnx"}
ID_INPUTS = ("token_ids", "segment_ids", "padding_mask")
CACHE_INFO = "info.json"
# auto's bounds. PARITY_TOLERANCE: the largest |onnx-fp32 - Keras| accepted, the parity bound the fused graphs are
# tested to. MAX_SPEARMAN_LOSS: the largest Spearman loss (x100) accepted from a faster path, the bound the
# inference benchmark holds every system to (bench/bench_inference.py). PROBE_PAIRS: 1,000 probe texts.
PARITY_TOLERANCE = 1e-4
MAX_SPEARMAN_LOSS = 0.3
PROBE_PAIRS = 500
PROBE_ROUNDS = 3  # timed rounds of the probe workload per candidate, interleaved
PROBE_TIMED_ROWS = 320
PROBE_SINGLE_ROWS = 64  # of those, also run one at a time in each round
_RUNNERS = weakref.WeakKeyDictionary()  # model -> {"fingerprint": ..., precision: Runner, "auto": precision}
_WATCHED = weakref.WeakKeyDictionary()  # model -> the variables weights_fingerprint reads
_warned = set()


class Runner:
    """A callable batch dict -> output array at one precision. ``bucketed``: batches are padded to a multiple of
    ``zoo.tokenizer.BUCKET`` (XLA compiles one program per shape; ONNX Runtime takes any length as it is)."""

    def __init__(self, fn, precision, bucketed):
        self.fn, self.precision, self.bucketed = fn, precision, bucketed

    def __call__(self, batch):
        return self.fn(batch)


def cpu_flags():
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def bf16_supported():
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def check_precision(precision):
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def resolve_precision(precision, model=None):
    """The precision that will run: ``precision``, auto's choice for ``model``, or fp32 (with one warning) for bf16
    on a CPU without it."""
    check_precision(precision)
    if precision == "auto":
        precision = choose(model) if model is not None else "fp32"
    if precision == "bf16" and not bf16_supported():
        if "bf16" not in _warned:
            log.warning("precision='bf16' needs a CPU with AVX512-BF16 or AMX (this one has neither): running fp32")
            _warned.add("bf16")
        return "fp32"
    return precision


def runner(model, precision="auto"):
    """A ``Runner`` of ``model`` at ``precision`` (built once per model and weights)."""
    check_precision(precision)
    if precision == "auto" and os.environ.get("ZOO_PRECISION"):
        precision = forced_precision()
    state = _RUNNERS.setdefault(model, {})
    if precision != "fp32":  # every other runner is derived from the weights: rebuilt when they change
        fingerprint = weights_fingerprint(model)
        if state.get("fingerprint") != fingerprint:
            state.clear()
            state["fingerprint"] = fingerprint
    precision = resolve_precision(precision, model)
    if precision not in state:
        if precision == "fp32":
            state[precision] = Runner(model._predict_batch, "fp32", bucketed=True)
        elif precision == "bf16":
            state[precision] = Runner(bfloat16_copy(model).predict_on_batch, "bf16", bucketed=True)
        else:
            state[precision] = Runner(onnx_session(model, precision), precision, bucketed=False)
    return state[precision]


def forget(model):
    """Drop the bf16 copy, ONNX sessions and auto choice kept for ``model`` (rebuilt from its current weights)."""
    _RUNNERS.pop(model, None)


def weights_fingerprint(model, watched=4):
    """A cheap digest of ``model``'s weights: ``watched`` of its small (1-D) trainable variables, spread from the
    first layer to the head, read whole. Training and ``set_weights`` change every one of them; after changing a
    few weights by hand, call ``forget``."""
    import keras

    if model not in _WATCHED:
        small = [w for w in model.trainable_weights if len(w.shape) == 1] or \
            [w for w in model.weights if len(w.shape) == 1] or list(model.weights)
        _WATCHED[model] = [small[i] for i in sorted(set(np.linspace(0, len(small) - 1, watched).astype(int)))] \
            if small else []
    h = hashlib.sha256()
    for w in _WATCHED[model]:
        value = w.value
        # a TensorFlow variable's own read is ~10x faster than convert_to_numpy's generic path
        h.update((value.numpy() if keras.backend.backend() == "tensorflow" else keras.ops.convert_to_numpy(w))
                 .tobytes())
    return h.hexdigest()


def copy_with_dtype(model, dtype):
    """``model`` rebuilt with the ``dtype`` policy ("bfloat16", "float32", "mixed_bfloat16" ...), its weights cast."""
    config = model.get_config()
    config["backbone"] = dict(config["backbone"], config=dict(config["backbone"]["config"], dtype=dtype))
    copy = type(model).from_config(config)
    copy.tokenizer = model.tokenizer
    copy.set_weights(model.get_weights())
    return copy


def bfloat16_copy(model):
    """``model`` rebuilt with the bfloat16 dtype policy and its weights cast to bfloat16."""
    return copy_with_dtype(model, "bfloat16")


# ----------------------------------------------------------------------------------- ONNX Runtime
def require_onnx():
    """``onnxruntime`` (``MissingExtra`` naming ``zoo[onnx]`` when it or ``onnx`` is missing)."""
    from .errors import require

    require("onnx", "onnx", "ONNX Runtime graphs")
    return require("onnxruntime", "onnx", "ONNX Runtime graphs")


def quantize(source, target):
    """ONNX Runtime dynamic quantization of a fused graph file: int8 weights (per output channel) for every
    MatMul, QAttention for Attention; activations quantized per batch at run time."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with stderr_silenced(), root_logging_kept():  # its logging.warning(...) would give the root logger a handler
        quantize_dynamic(os.fspath(source), os.fspath(target), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Attention"],
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})  # contrib ops' outputs
    return target


def write_graphs(model, folder, served=False):
    """The fused fp32 graph and its int8 version of ``model`` as ``folder``/model.onnx and model.int8.onnx."""
    import onnx

    from .fused_onnx import fused_graph

    fp32 = os.path.join(folder, ONNX_FILES["onnx-fp32"])
    onnx.save(fused_graph(model, served=served), fp32)
    quantize(fp32, os.path.join(folder, ONNX_FILES["int8"]))
    return folder


def graph_key(model):
    """sha256 of what a model's cached graphs depend on: its weights and head, the writer and ONNX Runtime."""
    import keras
    import onnxruntime

    from .fused_onnx import WRITER_VERSION, describe

    backbone, spec, _ = describe(model)
    h = hashlib.sha256()
    settings = {"writer": WRITER_VERSION, "onnxruntime": onnxruntime.__version__, "class": type(model).__name__,
                "backbone": backbone.get_config(), "head": spec.to_record()}
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for w in model.weights:
        h.update(w.path.encode())
        h.update(np.ascontiguousarray(keras.ops.convert_to_numpy(w)).tobytes())
    return h.hexdigest()


def cached_graphs(model):
    """(folder, info) of ``model``'s fused graphs in the cache, written there first when missing or damaged. When
    the cache cannot be written, the graphs go to a temporary folder of this process."""
    key = graph_key(model)
    folder = cache_dir("onnx", key[:40])
    info_path = os.path.join(folder, CACHE_INFO)
    if os.path.isdir(folder):
        try:
            info = read_json_file(info_path, "a cached ONNX graph's description")
            check_manifest(folder, info.get("files"), CACHE_INFO)
            return folder, info
        except CheckpointError as e:
            log.warning("damaged ONNX cache, rebuilt: %s", e)
            shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    try:
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(folder))
    except OSError as e:
        log.warning("cannot write zoo's cache (%s): the ONNX graphs are rebuilt in every process", e)
        folder = tmp = tempfile.mkdtemp(prefix="zoo-onnx-")
    write_graphs(model, tmp)
    info = {"format": "zoo-fused-onnx", "model": type(model).__name__, "key": key,
            "files": file_manifest(tmp), "auto": {}}
    write_json_atomic(os.path.join(tmp, CACHE_INFO), info)
    if tmp != folder:
        try:
            os.rename(tmp, folder)  # atomic; another process may have written the same graphs first
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            info = read_json_file(info_path, "a cached ONNX graph's description")
    log.info("fused ONNX graphs of the %s written in %.1f s (%s)", type(model).__name__,
             time.perf_counter() - started, folder)
    return folder, info


def onnx_session(model, precision):
    """ONNX Runtime session of ``model``'s cached fused graph at ``precision`` -> callable(batch) -> array."""
    ort = require_onnx()
    folder, _ = cached_graphs(model)
    path = os.path.join(folder, ONNX_FILES[precision])
    try:
        session = new_session(path)
    except Exception as e:  # noqa: BLE001 -- a file that passed its sha256 but does not load: rebuild once
        log.warning("%s does not load in ONNX Runtime %s (%s): rebuilt", path, ort.__version__, e)
        shutil.rmtree(folder, ignore_errors=True)
        folder, _ = cached_graphs(model)
        session = new_session(os.path.join(folder, ONNX_FILES[precision]))

    def run(batch):
        return session.run(None, {k: np.asarray(batch[k], dtype="int32") for k in ID_INPUTS})[0]

    return run


def new_session(path):
    """An ONNX Runtime CPU session of ``path`` with TensorFlow's intra-op thread count when one is set (``zoo encode
    --processes``), else one thread per CPU this process may use."""
    import sys

    import onnxruntime as ort

    threads = 0
    if "tensorflow" in sys.modules:
        threads = sys.modules["tensorflow"].config.threading.get_intra_op_parallelism_threads()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                               else 0)
    options.inter_op_num_threads = 1
    # ONNX Runtime's default, kept: between a run's ops the pool's threads spin instead of sleeping. A small model's
    # ops take microseconds, and waking sleeping threads for each one measured slower at batch 64 and much slower
    # for one sentence on 2 idle cores. ``ZOO_ORT_SPIN=0`` makes them sleep (a machine crowded with other work).
    options.add_session_config_entry("session.intra_op.allow_spinning", os.environ.get("ZOO_ORT_SPIN", "1"))
    return ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])


# ----------------------------------------------------------------------------------- auto
def choose(model):
    """The precision ``auto`` runs for ``model`` (see the module's docstring); decided once per model and weights,
    recorded beside its cached graphs, logged."""
    state = _RUNNERS.setdefault(model, {})
    if "auto" in state:
        return state["auto"]
    choice, reason = _choose(model)
    log.info("precision auto: %s for this %s (%s)", choice, type(model).__name__, reason)
    state["auto"] = choice
    return choice


def forced_precision():
    """``$ZOO_PRECISION``: what ``auto`` runs when it is set (ValueError for an unknown name)."""
    forced = os.environ.get("ZOO_PRECISION")
    if forced not in PRECISIONS[1:]:
        raise ValueError(f"ZOO_PRECISION must be one of {PRECISIONS[1:]}, got {forced!r}")
    return forced


def _choose(model):
    if os.environ.get("ZOO_PRECISION"):
        return forced_precision(), "set by ZOO_PRECISION"
    device = accelerator()
    if device:
        return "fp32", f"Keras on the {device}"
    try:
        require_onnx()
        from .fused_onnx import describe

        describe(model)
    except (ImportError, TypeError) as e:
        return "fp32", str(e)
    folder, info = cached_graphs(model)
    machine = machine_id()
    record = info.get("auto", {}).get(machine)
    if record is None:
        record = measure(model)
        info.setdefault("auto", {})[machine] = record
        try:
            write_json_atomic(os.path.join(folder, CACHE_INFO), info)
        except OSError as e:
            log.warning("cannot record auto's measurement in %s: %s", folder, e)
    return record["choice"], record["reason"]


def accelerator():
    """The GPU (or TPU) the Keras backend computes on, or None on a CPU-only machine."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return "GPU" if tf.config.list_logical_devices("GPU") else None
    if backend == "jax":
        import jax

        platform_name = jax.devices()[0].platform
        return platform_name.upper() if platform_name != "cpu" else None
    if backend == "torch":
        import torch

        return "GPU" if torch.cuda.is_available() else None
    return None


def machine_id():
    """What auto's speed measurement depends on: the CPU, the cores this process may use, ONNX Runtime."""
    import onnxruntime

    model_name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model_name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{platform.machine()} {model_name or platform.processor()}, {cpus} cpus, onnxruntime {onnxruntime.__version__}"


def probe_pairs(limit=PROBE_PAIRS):
    """(texts_a, texts_b, labels) of the first ``limit`` LCQMC valid pairs in zoo's data folder, or None."""
    path = os.path.join(DATA_DIR, "LCQMC", "LCQMC.valid.data.gz")
    if not os.path.exists(path):
        return None
    a, b, labels = [], [], []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 3:
                a.append(fields[0])
                b.append(fields[1])
                labels.append(float(fields[2]))
            if len(a) == limit:
                break
    return a, b, np.asarray(labels)


PARITY_TEXTS = ("今天天气不错", "今天天气很好", "花呗怎么开通", "如何开通花呗", "我想买一部新手机，有什么推荐吗？",
                "zoo 的句向量", "", "北京到上海的高铁要多久")


def probe_rows(model, a, b):
    """Rows of the probe: one per pair for a pair model; one per distinct text otherwise (+ the text index)."""
    if model.head_spec().pairs:
        return model.encode_pairs(a, b), None
    texts = list(dict.fromkeys(a + b))
    tok = model.tokenizer
    return [tok.assemble(p, None, model.maxlen) for p in tok.piece_ids(texts)], {t: i for i, t in enumerate(texts)}


def pair_scores(model, outputs, index, a, b):
    """Similarity of each probe pair from the model's outputs on ``probe_rows``."""
    served = model.head_spec().serve_numpy(outputs)  # scores, or L2-normalised vectors
    if index is None:
        return served
    return np.sum(served[[index[t] for t in a]] * served[[index[t] for t in b]], axis=1)


def measure(model):
    """auto's measurement for ``model`` on this machine -> {"choice", "reason", and the numbers}."""
    import keras
    from scipy.stats import spearmanr

    pairs = probe_pairs()
    texts = list(pairs[0][:len(PARITY_TEXTS)]) if pairs else list(PARITY_TEXTS)
    rows, _ = probe_rows(model, texts, texts[::-1])
    batch = model.tokenizer.pad(rows)
    keras_out = np.asarray(keras.ops.convert_to_numpy(model(batch, training=False)), "float32")
    diff = float(np.max(np.abs(keras_out - runner(model, "onnx-fp32")(batch))))
    record = {"parity_max_abs_diff": diff, "parity_rows": len(rows)}
    if not diff <= PARITY_TOLERANCE:
        return dict(record, choice="fp32", reason=f"the fused graph differs from Keras by {diff:.2g} "
                                                  f"> {PARITY_TOLERANCE:g} on probe texts")
    if pairs is None:  # no labelled pairs: int8's quality cannot be measured; the float paths are timed
        timed = (rows * (PROBE_TIMED_ROWS // len(rows) + 1))[:PROBE_TIMED_ROWS]
        candidates, quality = ("fp32", "onnx-fp32"), "int8 not measured: no probe pairs (LCQMC valid in zoo's data folder)"
    else:
        a, b, labels = pairs
        rows, index = probe_rows(model, a, b)
        spearman = {}
        for p in ONNX_PRECISIONS:
            out = model.predict_rows(rows, show_progress_bar=False, precision=p)
            spearman[p] = 100 * float(spearmanr(labels, pair_scores(model, out, index, a, b)).statistic)
        loss = spearman["onnx-fp32"] - spearman["int8"]
        candidates = ("fp32", "onnx-fp32") + (("int8",) if loss <= MAX_SPEARMAN_LOSS else ())
        quality = (f"int8 loses {loss:.2f} Spearman on the probe (> {MAX_SPEARMAN_LOSS})" if "int8" not in candidates
                   else f"Spearman {spearman['int8']:.2f} int8 vs {spearman['onnx-fp32']:.2f} fp32")
        timed = rows[:PROBE_TIMED_ROWS]
        record.update(probe=f"first {len(a)} pairs of LCQMC valid", spearman=spearman)
    singles = timed[:PROBE_SINGLE_ROWS]

    def workload(precision):  # -> (seconds in batches of 64, seconds one row at a time)
        start = time.perf_counter()
        model.predict_rows(timed, show_progress_bar=False, precision=precision)
        middle = time.perf_counter()
        for row in singles:
            model.predict_rows([row], batch_size=1, show_progress_bar=False, precision=precision)
        return middle - start, time.perf_counter() - middle

    workload("fp32")  # XLA compiles the probe's shapes
    batched, single = {p: [] for p in candidates}, {p: [] for p in candidates}
    for r in range(PROBE_ROUNDS):
        for p in candidates[r % len(candidates):] + candidates[:r % len(candidates)]:
            b, o = workload(p)
            batched[p].append(b)
            single[p].append(o)
    median = {p: float(np.median(np.add(batched[p], single[p]))) for p in candidates}
    record.update(timed_rows=len(timed), single_rows=len(singles), seconds=median,
                  seconds_batched={p: float(np.median(v)) for p, v in batched.items()},
                  seconds_single={p: float(np.median(v)) for p, v in single.items()})
    choice = min(candidates, key=median.get)

    def speeds(seconds):
        return ", ".join(f"{p} {seconds['fp32'] / seconds[p]:.2f}x" for p in candidates if p != "fp32")

    return dict(record, choice=choice, reason=f"fastest on the probe (Keras fp32 = 1: {speeds(median)}; in batches "
                                              f"{speeds(record['seconds_batched'])}; one row at a time "
                                              f"{speeds(record['seconds_single'])}); {quality}; parity {diff:.1g}")
