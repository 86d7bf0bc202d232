"""Inference precisions for a task model's batched prediction (``encode(..., precision=...)``).

- ``fp32``: the Keras model itself (XLA-compiled on TensorFlow and JAX).
- ``bf16``: a bfloat16 copy of the model (weights and arithmetic). Only CPUs with AVX512-BF16 or AMX do bf16
  natively; elsewhere it would be emulated and slower, so zoo warns and runs fp32.
- ``int8``: the model's graph in ONNX Runtime (converted with tf2onnx), weights int8 per channel and activations
  quantized per batch at run time (ONNX Runtime's dynamic quantization of every MatMul). Keras's own
  ``quantize("int8")`` keeps the activations in float on TensorFlow's CPU kernels and measured slower than fp32
  here (bench/bench_inference.py), so ONNX Runtime is the int8 engine.

The bf16 copy and the int8 session are built from the weights at first use and kept per model; after changing
the weights (more training) call ``forget(model)``.
"""

from __future__ import annotations

import os
import tempfile
import weakref

import numpy as np

from .logs import log, root_logging_kept, stderr_silenced

PRECISIONS = ("fp32", "bf16", "int8")
ID_INPUTS = ("token_ids", "segment_ids", "padding_mask")
_RUNNERS = weakref.WeakKeyDictionary()  # model -> {precision: callable(batch dict) -> array}
_warned = set()


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


def resolve_precision(precision):
    """The precision that will run: ``precision``, or fp32 (with one warning) for bf16 on a CPU without it."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "bf16" and not bf16_supported():
        if "bf16" not in _warned:
            log.warning("precision='bf16' needs a CPU with AVX512-BF16 or AMX (this one has neither): running fp32")
            _warned.add("bf16")
        return "fp32"
    return precision


def runner(model, precision):
    """A callable batch dict -> output array running ``model`` at ``precision`` (built once per model)."""
    precision = resolve_precision(precision)
    runners = _RUNNERS.setdefault(model, {})
    if precision not in runners:
        runners[precision] = {"fp32": lambda: model._predict_batch, "bf16": lambda: bfloat16_copy(model).predict_on_batch,
                              "int8": lambda: int8_session(model)}[precision]()
    return runners[precision]


def forget(model):
    """Drop the bf16 copy / int8 session built for ``model`` (they are rebuilt from its current weights)."""
    _RUNNERS.pop(model, None)


def bfloat16_copy(model):
    """``model`` rebuilt with the bfloat16 dtype policy and its weights cast to bfloat16."""
    config = model.get_config()
    config["backbone"] = dict(config["backbone"], config=dict(config["backbone"]["config"], dtype="bfloat16"))
    copy = type(model).from_config(config)
    copy.tokenizer = model.tokenizer
    copy.set_weights(model.get_weights())
    return copy


def onnx_graph(model, path, postprocess=None, opset=17):
    """Write ``model`` (ids in: ``token_ids``, ``segment_ids``, ``padding_mask`` int32 [batch, length]) as an
    ONNX file with tf2onnx; ``postprocess``: (name, fn) applied to the model's output, else its raw output."""
    try:
        import tf2onnx
    except ImportError:
        raise ImportError("ONNX needs tf2onnx and onnx: pip install 'zoo[onnx]' "
                          "(or pip install tf2onnx onnx onnxruntime)") from None
    import tensorflow as tf

    name, fn = postprocess or ("output", lambda y: y)
    specs = [tf.TensorSpec([None, None], tf.int32, name=n) for n in ID_INPUTS]

    @tf.function(input_signature=specs)
    def from_ids(token_ids, segment_ids, padding_mask):
        ids = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
        return {name: fn(model(ids, training=False))}

    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with stderr_silenced():
        tf2onnx.convert.from_function(from_ids, input_signature=specs, opset=opset, output_path=path,
                                      custom_op_handlers={"Erfc": (_onnx_erfc, [])})
    return path


def _onnx_erfc(ctx, node, name, args):
    """ONNX has no Erfc (exact GELU uses it): rewrite erfc(x) as 1 - erf(x)."""
    import tf2onnx

    erf = ctx.make_node("Erf", [node.input[0]])
    one = ctx.make_const(tf2onnx.utils.make_name("one"), np.array(1, np.float32))
    node.type = "Sub"
    ctx.replace_inputs(node, [one.output[0], erf.output[0]])
    return node


def quantize_onnx(source, target):
    """ONNX Runtime dynamic quantization: int8 weights (per output channel) for every matrix product, uint8
    activations scaled per batch at run time. The graph is first folded (ONNX Runtime's basic optimizations) and
    its Gemm nodes rewritten as MatMul (+ Add), the form the dynamic quantizer handles: tf2onnx writes half of
    BERT's dense layers as Gemm, which would otherwise stay float."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = target + ".folded.onnx"
    ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    graph = onnx.load(options.optimized_model_filepath)
    _gemm_as_matmul(graph)
    onnx.save(graph, options.optimized_model_filepath)
    with stderr_silenced(), root_logging_kept():  # its logging.warning(...) would give the root logger a handler
        quantize_dynamic(options.optimized_model_filepath, target, weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])
    os.remove(options.optimized_model_filepath)
    return target


def _gemm_as_matmul(graph):
    """Rewrite each Gemm(A, B, C) (alpha 1, no transA) of an ONNX model in place as MatMul(A, B) + C, with B's
    initializer transposed when transB."""
    from onnx import helper, numpy_helper

    initializers = {i.name: i for i in graph.graph.initializer}
    uses = {}
    for node in graph.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    nodes = []
    for node in graph.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type != "Gemm" or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0
                or attrs.get("beta", 1.0) not in (0.0, 1.0) or node.input[1] not in initializers
                or uses[node.input[1]] > 1):
            nodes.append(node)
            continue
        weight = initializers[node.input[1]]
        if attrs.get("transB", 0):
            weight.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(weight).T),
                                                    weight.name))
        with_bias = len(node.input) > 2 and node.input[2] and attrs.get("beta", 1.0) == 1.0
        product = node.output[0] + "_matmul" if with_bias else node.output[0]
        nodes.append(helper.make_node("MatMul", node.input[:2], [product], name=node.name + "_matmul"))
        if with_bias:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]], name=node.name + "_bias"))
    del graph.graph.node[:]
    graph.graph.node.extend(nodes)


def int8_session(model):
    """An ONNX Runtime session of ``model`` quantized to int8 -> callable(batch dict) -> float32 array."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        graph = onnx_graph(model, os.path.join(tmp, "model.onnx"))
        session = ort.InferenceSession(quantize_onnx(graph, os.path.join(tmp, "model.int8.onnx")),
                                       providers=["CPUExecutionProvider"])
    log.info("int8: %s quantized with ONNX Runtime %s", type(model).__name__, ort.__version__)

    def run(batch):
        return session.run(None, {k: np.asarray(batch[k], dtype="int32") for k in ID_INPUTS})[0]

    return run
