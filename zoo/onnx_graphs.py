"""zoo's fused ONNX Runtime graphs on disk and in sessions: written from a model's weights (``zoo.fused_onnx``)
and its int8 version (ONNX Runtime's static quantization, calibrated on texts shipped with zoo), cached in ``zoo.paths.cache_dir("onnx")``
(``$ZOO_CACHE``), one folder per model keyed by the sha256 of its weights, its head and the writer and ONNX
Runtime versions, written atomically and checked against their sha256 when read (a damaged file is rebuilt)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
import time

import numpy as np

from .errors import CheckpointError
from .logs import log, root_logging_kept, stderr_silenced
from .paths import cache_dir, check_manifest, file_manifest, read_json_file, sha256_of, write_json_atomic

ONNX_PRECISIONS = ("onnx-fp32", "int8")
ONNX_FILES = {"onnx-fp32": "model.onnx", "int8": "model.int8.onnx"}
ID_INPUTS = ("token_ids", "segment_ids", "padding_mask")
CACHE_INFO = "info.json"


def require_onnx():
    """``onnxruntime`` (``MissingExtra`` naming ``zoo[onnx]`` when it or ``onnx`` is missing)."""
    from .errors import require

    require("onnx", "onnx", "ONNX Runtime graphs")
    return require("onnxruntime", "onnx", "ONNX Runtime graphs")


CALIBRATION_TEXTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration_texts.txt")
QUANTIZATION = "static-qdq-minmax-3"  # what int8 means; part of the cache key
CALIBRATION_BATCH = 32


def calibration_batches(model, maxlen=None):
    """Token-id batches of the calibration texts for ``model``: 256 LCQMC train questions shipped with zoo, and
    passages of them joined to reach ``maxlen`` tokens (the late positions' activations); single texts for an
    encoder, consecutive texts as pairs for a score head."""
    from .fused_onnx import describe

    _, spec, _ = describe(model)
    with open(CALIBRATION_TEXTS, encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f if line.strip()]
    maxlen = int(maxlen or model.maxlen)
    per_passage = math.ceil(maxlen / np.mean([len(t) for t in texts])) + 1  # passages that fill maxlen tokens,
    texts += ["，".join(texts[i:i + per_passage]) for i in range(0, len(texts), per_passage)]  # for late positions
    batches = []
    for start in range(0, len(texts), CALIBRATION_BATCH):
        chunk = texts[start:start + CALIBRATION_BATCH]
        second = chunk[1:] + chunk[:1] if spec.pairs else None
        batch = model.tokenizer(chunk, second, maxlen=maxlen)
        batches.append({k: np.asarray(batch[k], dtype="int32") for k in ID_INPUTS})
    return batches


def with_contrib_output_types(graph):
    """``graph`` with the element types of its ONNX Runtime contrib ops' outputs declared (float, but
    EmbedLayerNormalization's int32 mask index), which ONNX's shape inference cannot infer and the quantizer needs."""
    import onnx

    known = {v.name for v in graph.graph.value_info} | {o.name for o in graph.graph.output}
    for node in graph.graph.node:
        if node.domain != "com.microsoft":
            continue
        for i, name in enumerate(node.output):
            if name and name not in known:
                int_mask = node.op_type == "EmbedLayerNormalization" and i == 1
                kind = onnx.TensorProto.INT32 if int_mask else onnx.TensorProto.FLOAT
                graph.graph.value_info.append(onnx.helper.make_tensor_value_info(name, kind, None))
    return graph


def quantize(source, target, model, maxlen=None):
    """int8 version of the fused graph file ``source`` of ``model`` at ``target``: ONNX Runtime static (QDQ)
    quantization -- int8 weights per output channel, uint8 activations with fixed scales calibrated (min/max) on
    ``calibration_batches`` -- for every product of an activation with a weight matrix (the pooling's products of
    hidden states, and the attention, stay float). Fixed scales make each text's vector independent of the texts
    that share its batch (dynamic quantization's per-batch scales do not)."""
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(calibration_batches(model, maxlen))

        def get_next(self):
            return next(self.batches, None)

    graph = onnx.load(os.fspath(source))
    weights = {w.name for w in graph.graph.initializer}
    products = [n.name for n in graph.graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    with tempfile.TemporaryDirectory() as tmp:
        typed = os.path.join(tmp, "typed.onnx")
        onnx.save(with_contrib_output_types(graph), typed)
        with stderr_silenced(), root_logging_kept():  # its logging.warning(...) would give root a handler
            quantize_static(typed, os.fspath(target), Reader(), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                            op_types_to_quantize=["MatMul"], nodes_to_quantize=products,
                            calibrate_method=CalibrationMethod.MinMax,
                            extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})
    return target


def write_graphs(model, folder, served=False):
    """The fused fp32 graph and its int8 version of ``model`` as ``folder``/model.onnx and model.int8.onnx."""
    import onnx

    from .fused_onnx import fused_graph

    fp32 = os.path.join(folder, ONNX_FILES["onnx-fp32"])
    onnx.save(fused_graph(model, served=served), fp32)
    quantize(fp32, os.path.join(folder, ONNX_FILES["int8"]), model)
    return folder


def graph_key(model):
    """sha256 of what a model's cached graphs depend on: its weights and head, the writer and ONNX Runtime."""
    import keras
    import onnxruntime

    from .fused_onnx import WRITER_VERSION, describe

    backbone, spec, _ = describe(model)
    h = hashlib.sha256()
    settings = {"writer": WRITER_VERSION, "onnxruntime": onnxruntime.__version__, "class": type(model).__name__,
                "int8": QUANTIZATION, "calibration": sha256_of(CALIBRATION_TEXTS),
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
