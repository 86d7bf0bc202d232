"""int8 versions of the fused ONNX graphs: ONNX Runtime's static (QDQ) quantization with fixed scales calibrated on
texts shipped with zoo (``calibration_texts.txt``), so that a text's vector never depends on the texts in its
batch; OpenVINO's form of it (``openvino=True``). What each int8 means is named by ``QUANTIZATION`` and
``OPENVINO_QUANTIZATION``, part of the cache keys of the graphs written."""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np

from ..logs import root_logging_kept, stderr_silenced
from .sessions import ID_INPUTS

CALIBRATION_TEXTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration_texts.txt")


QUANTIZATION = "static-qdq-minmax-qkv-4"  # what int8 means; part of the cache key


# what openvino-int8 means (part of its cache key): the standard-op graph (Q, K, V as three products, the keys'
# transpose after their quantization), symmetric int8 activations, the inputs of every product quantized (their
# outputs float)
OPENVINO_QUANTIZATION = "standard-ops-3/static-qdq-s8s8-every-matmul-inputs-minmax-3"


CALIBRATION_BATCH = 32


def calibration_batches(tokenizer, maxlen, pairs=False):
    """Token-id batches of the calibration texts: 256 LCQMC train questions shipped with zoo, and passages of
    them joined to reach ``maxlen`` tokens (the late positions' activations); single texts for an encoder,
    consecutive texts as pairs for a score head (``pairs``)."""
    with open(CALIBRATION_TEXTS, encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f if line.strip()]
    maxlen = int(maxlen)
    per_passage = math.ceil(maxlen / np.mean([len(t) for t in texts])) + 1  # passages that fill maxlen tokens,
    texts += ["，".join(texts[i:i + per_passage]) for i in range(0, len(texts), per_passage)]  # for late positions
    batches = []
    for start in range(0, len(texts), CALIBRATION_BATCH):
        chunk = texts[start:start + CALIBRATION_BATCH]
        second = chunk[1:] + chunk[:1] if pairs else None
        batch = tokenizer(chunk, second, maxlen=maxlen)
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


def quantize(source, target, tokenizer, maxlen, pairs=False, openvino=False):
    """int8 version of the fused graph file ``source`` at ``target``: ONNX Runtime static (QDQ)
    quantization -- int8 weights per output channel, uint8 activations with fixed scales calibrated (min/max) on
    ``calibration_batches`` -- for every product of an activation with a weight matrix, the Q, K, V projections
    included (taken out of the fused ``Attention``, which has no static int8 form: ``zoo.inference.fused_onnx.unfused_qkv``);
    the attention's scores and the pooling's products of hidden states stay float. Fixed scales make each text's
    vector independent of the texts that share its batch (dynamic quantization's per-batch scales do not).
    ``openvino``: OpenVINO's form -- int8 activations with a zero point of 0 (ONNX Runtime's x86 kernels prefer
    uint8); the attention's and the pooling's products quantized too; only the products' inputs quantized, their
    outputs left in float, so that OpenVINO runs a product, its bias, its GELU and the next product's
    quantization as one kernel (quantized outputs are what ONNX Runtime's QLinearMatMul needs instead); the keys'
    transpose after their Q/DQ pair (``transposes_after_quantization``)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(calibration_batches(tokenizer, maxlen, pairs))

        def get_next(self):
            return next(self.batches, None)

    from .fused_onnx import unfused_qkv

    graph = unfused_qkv(onnx.load(os.fspath(source)))
    weights = {w.name for w in graph.graph.initializer}
    products = [n.name for n in graph.graph.node if n.op_type == "MatMul" and (openvino or n.input[1] in weights)]
    with tempfile.TemporaryDirectory() as tmp:
        typed = os.path.join(tmp, "typed.onnx")
        onnx.save(with_contrib_output_types(graph), typed)
        with stderr_silenced(), root_logging_kept():  # its logging.warning(...) would give root a handler
            quantize_static(typed, os.fspath(target), Reader(), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QInt8 if openvino else QuantType.QUInt8,
                            weight_type=QuantType.QInt8, per_channel=True,
                            op_types_to_quantize=["MatMul"], nodes_to_quantize=products,
                            calibrate_method=CalibrationMethod.MinMax,
                            extra_options={"ActivationSymmetric": openvino, "WeightSymmetric": True,
                                           "OpTypesToExcludeOutputQuantization": ["MatMul"] if openvino else []})
    if openvino:
        onnx.save(transposes_after_quantization(onnx.load(os.fspath(target))), os.fspath(target))
    return target


def transposes_after_quantization(graph):
    """``graph`` (a QDQ ModelProto) with each Transpose of the last two axes that is quantized for a product
    (Transpose -> QuantizeLinear -> DequantizeLinear -> MatMul) moved after its Q/DQ pair, where OpenVINO runs it
    inside the product (its ``transpose_b``; behind a Q/DQ pair it is a separate copy of the keys). The same
    arithmetic: a per-tensor scale commutes with a transpose."""
    from onnx import numpy_helper

    nodes = list(graph.graph.node)
    made_by = {o: n for n in nodes for o in n.output}
    users = {}
    for n in nodes:
        for i in n.input:
            users.setdefault(i, []).append(n)
    scales = {w.name: numpy_helper.to_array(w) for w in graph.graph.initializer}
    for product in [n for n in nodes if n.op_type == "MatMul"]:
        for slot, name in enumerate(product.input):
            chain = [made_by.get(name)]  # the DequantizeLinear, QuantizeLinear and Transpose before the product
            while len(chain) < 3 and chain[-1] is not None:
                chain.append(made_by.get(chain[-1].input[0]))
            if [getattr(n, "op_type", None) for n in chain] != ["DequantizeLinear", "QuantizeLinear", "Transpose"]:
                continue
            _, quantize_, transpose = chain
            scale = scales.get(quantize_.input[1])
            if scale is None or scale.size != 1:  # only a per-tensor scale commutes with the transpose
                continue
            perm = list(next(a.ints for a in transpose.attribute if a.name == "perm"))
            if perm != list(range(len(perm) - 2)) + [len(perm) - 1, len(perm) - 2] or any(
                    len(users[o]) != 1 for o in (transpose.output[0], quantize_.output[0], name)):
                continue
            quantize_.input[0] = transpose.input[0]
            transpose.input[0] = name
            product.input[slot] = transpose.output[0]
            nodes.remove(transpose)
            nodes.insert(nodes.index(product), transpose)
    del graph.graph.node[:]
    graph.graph.node.extend(nodes)
    return graph
