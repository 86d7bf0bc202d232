"""zoo's fused ONNX Runtime graphs on disk and in sessions: written from a model's weights (``zoo.inference.fused_onnx``)
and its int8 version (ONNX Runtime's static quantization, calibrated on texts shipped with zoo), cached in ``zoo.paths.cache_dir("onnx")``
(``$ZOO_CACHE``), one folder per model keyed by the sha256 of its weights, its head and the writer and ONNX
Runtime versions, written atomically and checked against their sha256 when read (a damaged file is rebuilt).

A graph folder holds ``model.onnx`` (float32), ``model.int8.onnx`` where written, and ``info.json``: the sha256
of each file, what the light runtime needs to encode (``encoder``), the largest difference from the Keras model
measured when it was written (``parity_max_abs_diff``), the quantization of its int8 graph (``quantization``: an
older zoo's int8 is not used) and, for a model loaded from a preset, the sha256 of the
preset's weights file. A shipped preset carries its folder as ``PRESET/onnx/``; another preset finds its cached
folder through a link (``link_preset``). Light at import: nothing here imports TensorFlow, Keras or JAX at the
top, and the functions that read graphs (``find_graphs``, ``int8_graph``, ``new_session``) never do."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time

import numpy as np

from ..errors import CheckpointError
from ..logs import log
from ..paths import (
    EXPORT_MANIFEST,
    PRESET_CONFIG,
    PRESET_WEIGHTS,
    cache_dir,
    check_manifest,
    file_manifest,
    read_json_file,
    resolve,
    sha256_of,
    write_json_atomic,
)
from .quantization import CALIBRATION_TEXTS, OPENVINO_QUANTIZATION, QUANTIZATION, quantize
from .sessions import ID_INPUTS, GraphRunner, new_session, open_session, require_onnx

ONNX_PRECISIONS = ("onnx-fp32", "int8", "openvino-int8")  # what runs a graph derived from the fused one
FP32_GRAPH, INT8_GRAPH, OPENVINO_GRAPH = "model.onnx", "model.int8.onnx", "model.openvino-int8.onnx"
ONNX_FILES = {"onnx-fp32": FP32_GRAPH, "int8": INT8_GRAPH, "openvino-int8": OPENVINO_GRAPH}


CACHE_INFO = GRAPH_INFO = "info.json"
GRAPH_FOLDER = "onnx"  # a preset's shipped graphs: PRESET/onnx/{model.onnx, info.json}
# The largest |fused fp32 - Keras| (on ``PARITY_TEXTS``, measured when a graph is written) under which the default
# precision runs the fused graph: the bound the fused graphs are tested to.
PARITY_TOLERANCE = 1e-4
PARITY_TEXTS = ("今天天气不错", "今天天气很好", "花呗怎么开通", "如何开通花呗", "我想买一部新手机，有什么推荐吗？",
                "zoo 的句向量", "", "北京到上海的高铁要多久")


def write_graphs(model, folder):
    """The fused fp32 graph and its int8 version of ``model`` as ``folder``/model.onnx and model.int8.onnx ->
    the graph folder's description (``info.json`` without its file list): ``encoder_record`` and the fp32
    graph's largest difference from the Keras model on ``PARITY_TEXTS``."""
    import onnx

    from .fused_onnx import describe, fused_graph

    fp32 = os.path.join(folder, FP32_GRAPH)
    onnx.save(fused_graph(model), fp32)
    _, spec, _ = describe(model)
    quantize(fp32, os.path.join(folder, INT8_GRAPH), model.tokenizer, model.maxlen, spec.pairs)
    return {"format": "zoo-fused-onnx", "model": type(model).__name__, "encoder": encoder_record(model),
            "parity_max_abs_diff": parity(model, fp32), "parity_texts": len(PARITY_TEXTS),
            "quantization": {"int8": QUANTIZATION}}


def parity(model, graph):
    """max |graph - Keras model| over the outputs of ``PARITY_TEXTS`` (pairs of them for a score head)."""
    import keras

    from .fused_onnx import describe

    _, spec, _ = describe(model)
    texts = list(PARITY_TEXTS)
    batch = model.tokenizer(texts, texts[::-1] if spec.pairs else None, maxlen=model.maxlen)
    batch = {k: np.asarray(batch[k], dtype="int32") for k in ID_INPUTS}
    keras_out = np.asarray(keras.ops.convert_to_numpy(model(batch, training=False)), "float32")
    graph_out = new_session(graph).run(None, batch)[0]
    return float(np.max(np.abs(keras_out - graph_out)))


def graph_key(model):
    """sha256 of what a model's cached graphs depend on: its weights and head, the writer and ONNX Runtime."""
    import keras
    import onnxruntime

    from .fused_onnx import WRITER_VERSION, describe

    backbone, spec, _ = describe(model)
    h = hashlib.sha256()
    settings = {"writer": WRITER_VERSION, "onnxruntime": onnxruntime.__version__, "class": type(model).__name__,
                "int8": QUANTIZATION, "calibration": sha256_of(CALIBRATION_TEXTS),
                "backbone": backbone.get_config(), "head": spec.to_record(), "maxlen": int(model.maxlen)}
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for w in model.weights:
        h.update(w.path.encode())
        h.update(np.ascontiguousarray(keras.ops.convert_to_numpy(w)).tobytes())
    return h.hexdigest()


def loaded_preset(model):
    """(preset folder, sha256 of its weights file) of a model loaded from a zoo preset whose weights have not
    changed since (``zoo.presets.load_saved`` records the source; SimBERT's encoder shares its model's), else
    None."""
    from ..fingerprints import weights_fingerprint

    source = getattr(model, "_zoo_source", None)
    if not source:
        return None
    directory, weights_sha256, fingerprint, owner = source
    owner = owner() if owner is not None else model
    if owner is None or weights_fingerprint(owner) != fingerprint:
        return None
    return directory, weights_sha256


def cached_graphs(model):
    """(folder, info) of ``model``'s fused graphs: a shipped preset's own (``PRESET/onnx``) when the model was
    loaded unchanged from it, else zoo's cache, written there first when missing or damaged (and linked to the
    model's preset, so the light runtime finds it). When the cache cannot be written, the graphs go to a
    temporary folder of this process."""
    preset = loaded_preset(model)
    if preset is not None:
        shipped = find_graphs(preset[0])
        if shipped is not None and os.path.basename(shipped[0]) == GRAPH_FOLDER and \
                shipped[1].get("encoder", {}).get("maxlen") == int(model.maxlen):
            return shipped[0], shipped[1]
    key = graph_key(model)
    folder = cache_dir("onnx", key[:40])
    info_path = os.path.join(folder, CACHE_INFO)
    info = None
    if os.path.isdir(folder):
        try:
            info = read_json_file(info_path, "a cached ONNX graph's description")
            check_manifest(folder, info.get("files"), CACHE_INFO)
            if "parity_max_abs_diff" not in info:  # written by an older zoo
                info = None
                shutil.rmtree(folder, ignore_errors=True)
        except CheckpointError as e:
            log.warning("damaged ONNX cache, rebuilt: %s", e)
            shutil.rmtree(folder, ignore_errors=True)
            info = None
    if info is None:
        folder, info = _write_cached(model, key, folder)
    if preset is not None and info.get("encoder", {}).get("maxlen") == _preset_maxlen(preset[0]):
        if info.get("weights_sha256") != preset[1]:
            info["weights_sha256"] = preset[1]
            try:
                write_json_atomic(os.path.join(folder, CACHE_INFO), info)
            except OSError:
                pass
        link_preset(folder, preset[0], preset[1])
    return folder, info


def _preset_maxlen(directory):
    try:
        config = read_json_file(os.path.join(directory, PRESET_CONFIG), "a zoo preset's config")
        return int(config["model"]["config"]["maxlen"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return None


def _write_cached(model, key, folder):
    started = time.perf_counter()
    try:
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(folder))
    except OSError as e:
        log.warning("cannot write zoo's cache (%s): the ONNX graphs are rebuilt in every process", e)
        folder = tmp = tempfile.mkdtemp(prefix="zoo-onnx-")
    info = dict(write_graphs(model, tmp), key=key, auto={})
    info["files"] = file_manifest(tmp)
    write_json_atomic(os.path.join(tmp, CACHE_INFO), info)
    if tmp != folder:
        try:
            os.rename(tmp, folder)  # atomic; another process may have written the same graphs first
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            info = read_json_file(os.path.join(folder, CACHE_INFO), "a cached ONNX graph's description")
    log.info("fused ONNX graphs of the %s written in %.1f s (%s)", type(model).__name__,
             time.perf_counter() - started, folder)
    return folder, info


def write_preset_graphs(model, directory):
    """Ship ``model``'s fused fp32 graph inside the preset folder it was loaded from, as ``directory``/onnx/
    (``model.onnx`` and ``info.json``, recording the preset's weights sha256): the light runtime then needs no
    conversion, and the Keras path uses it too while the weights are unchanged. Returns the folder."""
    import onnx

    from .fused_onnx import fused_graph

    weights = preset_weights_sha256(directory)
    if weights is None:
        raise CheckpointError(f"{directory}: not a zoo preset with a weights manifest")
    target = os.path.join(directory, GRAPH_FOLDER)
    tmp = target + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    onnx.save(fused_graph(model), os.path.join(tmp, FP32_GRAPH))
    info = {"format": "zoo-fused-onnx", "model": type(model).__name__, "encoder": encoder_record(model),
            "parity_max_abs_diff": parity(model.served_model() if hasattr(model, "served_model") else model,
                                          os.path.join(tmp, FP32_GRAPH)),
            "parity_texts": len(PARITY_TEXTS), "weights_sha256": weights, "files": file_manifest(tmp)}
    write_json_atomic(os.path.join(tmp, GRAPH_INFO), info)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target


def graph_path(model, precision):
    """The graph file ``model`` runs at ``precision`` (``ONNX_PRECISIONS``)."""
    folder, info = cached_graphs(model)
    if precision != "onnx-fp32":
        return int8_graph(folder, info, model.tokenizer, precision)
    return os.path.join(folder, FP32_GRAPH)


def onnx_session(model, precision):
    """A ``GraphRunner`` of ``model``'s fused graph at ``precision`` (``ONNX_PRECISIONS``)."""
    require_onnx()
    path = graph_path(model, precision)
    try:
        return GraphRunner(open_session(path, precision))
    except Exception as e:  # noqa: BLE001 -- a file that passed its sha256 but does not load: rebuild once
        log.warning("%s does not load (%s): rebuilt", path, e)
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        return GraphRunner(open_session(graph_path(model, precision), precision))


# ------------------------------------------------------------------------- where graphs are
def preset_weights_sha256(directory):
    """The sha256 of a zoo preset folder's weights file as its ``zoo_config.json`` records it (None when it
    records none)."""
    try:
        config = read_json_file(os.path.join(directory, PRESET_CONFIG), "a zoo preset's config")
    except (OSError, CheckpointError):
        return None
    return ((config.get("files") or {}).get(PRESET_WEIGHTS) or {}).get("sha256")


def link_folder(weights_sha256):
    """The cache folder that points a preset (by its weights' sha256) at the graphs the Keras path wrote."""
    return cache_dir("onnx", "presets", weights_sha256[:40])


def encoder_record(model):
    """What the light runtime needs to encode like ``model`` (a SentenceEncoder, or SimBERT's retrieval head):
    its class, vector width, maxlen, normalisation, prompts and similarity function."""
    served = model.served_model() if hasattr(model, "served_model") else model
    spec = served.head_spec()
    return {"class": type(model).__name__, "output": spec.output, "pooling": spec.pooling,
            "dim": int(getattr(served, "dim", 0) or 0), "maxlen": int(served.maxlen),
            "max_input_tokens": getattr(model, "max_input_tokens", None),
            "normalize": spec.normalize, "query_prefix": getattr(served, "query_prefix", ""),
            "prompts": dict(getattr(served, "prompts", {})),
            "default_prompt_name": getattr(served, "default_prompt_name", None),
            "similarity_fn_name": getattr(served, "similarity_fn_name", "cosine")}


def link_preset(folder, directory, weights_sha256):
    """Record in the cache that the preset at ``directory`` (weights ``weights_sha256``) has its graphs in
    ``folder`` (``zoo.inference.graphs.cached_graphs`` calls this for a model loaded unchanged from a preset)."""
    target = link_folder(weights_sha256)
    try:
        os.makedirs(target, exist_ok=True)
        write_json_atomic(os.path.join(target, "link.json"), {"graphs": os.path.abspath(folder),
                                                              "preset": os.path.abspath(directory),
                                                              "weights_sha256": weights_sha256})
    except OSError as e:
        log.warning("cannot link %s to its ONNX graphs in zoo's cache (%s): later calls load it with Keras",
                    directory, e)


def find_graphs(path):
    """(graph folder, its info, tokenizer folder) of the fused graph written for the model at ``path`` (a preset
    name or folder, a run folder, an ONNX export), or None where none exists for its current weights (the
    Keras path then writes one). A damaged graph file raises CheckpointError naming it."""
    try:
        directory = resolve(path)
    except (OSError, CheckpointError):
        return None
    if not os.path.isdir(directory):
        return None
    export = os.path.join(directory, EXPORT_MANIFEST)
    if os.path.exists(os.path.join(directory, FP32_GRAPH)) and os.path.exists(export):  # zoo export --format onnx
        manifest = read_json_file(export, "an ONNX export's manifest")
        if manifest.get("format") != "zoo-onnx" or manifest.get("output") != "embedding":
            return None
        check_manifest(directory, manifest.get("files"), EXPORT_MANIFEST)
        return directory, export_info(manifest), directory
    weights = preset_weights_sha256(directory)
    if weights is None:
        return None
    candidates = [os.path.join(directory, GRAPH_FOLDER)]
    link = os.path.join(link_folder(weights), "link.json")
    if os.path.exists(link):
        try:
            candidates.append(read_json_file(link, "a link to cached ONNX graphs")["graphs"])
        except (CheckpointError, KeyError, TypeError):
            pass
    for folder in candidates:
        info_path = os.path.join(folder, GRAPH_INFO)
        if not os.path.exists(info_path):
            continue
        info = read_json_file(info_path, "a fused ONNX graph's description")
        if info.get("weights_sha256") != weights or (info.get("encoder") or {}).get("output") != "embedding":
            continue  # written for other weights (the preset was retrained) or not an encoder
        check_manifest(folder, {k: v for k, v in info.get("files", {}).items() if k == FP32_GRAPH}, GRAPH_INFO)
        return folder, info, directory
    return None


def export_info(manifest):
    """An ONNX export's manifest as a graph folder's info (its graph ends as its HeadSpec serves: ``served``)."""
    model = manifest.get("model") or {}
    return {"encoder": {"class": model.get("class"), "output": "embedding",
                        "maxlen": int(manifest["maxlen"]), "normalize": model.get("normalize", True), "query_prefix": "",
                        "prompts": model.get("prompts"), "default_prompt_name": model.get("default_prompt_name"),
                        "similarity_fn_name": model.get("similarity_fn_name", "cosine"),
                        "dim": manifest.get("dim"), "max_input_tokens": int(manifest["maxlen"])},
            "precision": manifest.get("precision", "onnx-fp32"), "served": True,
            "parity_max_abs_diff": manifest.get("parity_max_abs_diff"), "files": manifest.get("files", {})}


def int8_graph(folder, info, tokenizer, precision="int8"):
    """The ``precision`` ("int8" or "openvino-int8") graph of the fp32 graph in ``folder``: written beside it with
    today's quantization (``info["quantization"]``; a folder written by an older zoo holds an older int8), or
    quantized once into zoo's cache (``quantize``, calibrated on the texts shipped with zoo; openvino-int8 from
    the fused graph rewritten with standard ops, ``zoo.inference.standard_onnx``) -> path."""
    name = ONNX_FILES[precision]
    scheme = QUANTIZATION if precision == "int8" else OPENVINO_QUANTIZATION
    if name in info.get("files", {}) and (info.get("quantization") or {}).get(precision) == scheme:
        check_manifest(folder, {name: info["files"][name]}, GRAPH_INFO)
        return os.path.join(folder, name)
    fp32 = os.path.join(folder, FP32_GRAPH)
    encoder = info["encoder"]
    key = hashlib.sha256(json.dumps([sha256_of(fp32), scheme, encoder["maxlen"]]).encode()).hexdigest()
    target = cache_dir("onnx", precision, key[:40])
    graph = os.path.join(target, name)
    if os.path.exists(os.path.join(target, GRAPH_INFO)):
        try:
            check_manifest(target, read_json_file(os.path.join(target, GRAPH_INFO), "an int8 graph's description")
                           .get("files"), GRAPH_INFO)
            return graph
        except CheckpointError as e:
            log.warning("damaged int8 graph in the cache, rebuilt: %s", e)
    tmp = target + f".tmp-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    source = fp32
    if precision == "openvino-int8":
        import onnx

        from .standard_onnx import standard_graph

        source = os.path.join(tmp, "standard.onnx")
        onnx.save(standard_graph(onnx.load(fp32)), source)
    quantize(source, os.path.join(tmp, name), tokenizer, encoder["maxlen"], pairs=encoder.get("output") == "score",
             openvino=precision == "openvino-int8")
    if source != fp32:
        os.remove(source)
    write_json_atomic(os.path.join(tmp, GRAPH_INFO), {"from": fp32, "files": file_manifest(tmp)})
    if os.path.isdir(target):
        shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    log.info("%s graph of %s written to %s", precision, fp32, target)
    return graph
