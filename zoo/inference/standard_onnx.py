"""A fused graph (``zoo.inference.fused_onnx``) rewritten with standard ONNX ops only, for runtimes that do not read ONNX
Runtime's ``com.microsoft`` contrib ops (OpenVINO, ``zoo.inference.openvino_engine``).

Each contrib op is replaced by the standard ops it stands for -- the same arithmetic, so the result equals the
fused graph within float32 rounding (tests/test_openvino.py):

- ``EmbedLayerNormalization``: Gather of the word (and segment) rows, the first T position rows, LayerNormalization;
- ``Attention`` / ``MultiHeadAttention``: the biased Q, K, V products (three products of the hidden states, not one
  of three times the width and a Split: OpenVINO runs each as one int8 kernel with its bias), heads, scaled
  scores with -10000 on padded keys (the keys' transpose of their last two axes an op of its own, which OpenVINO
  runs inside the scores' product), Softmax, the weighted values;
- ``SkipLayerNormalization``: LayerNormalization(x + bias + skip);
- ``BiasGelu`` / ``FastGelu``: the erf and tanh forms of GELU on x + bias.

The rewrite reads only the graph file (no Keras), so it serves shipped presets and ONNX exports alike.
"""

from __future__ import annotations

import math

import numpy as np

from .fused_onnx import _Graph

MASKED = -10000.0  # what ONNX Runtime's attention kernels add to the scores of padded keys


def standard_graph(fused):
    """``fused`` (an ``onnx.ModelProto`` written by ``zoo.inference.fused_onnx``) with standard ops in place of its contrib
    ops -> a new ModelProto with the same inputs and outputs. ValueError names a contrib op it cannot rewrite."""
    from onnx import helper, numpy_helper

    weights = {w.name: w for w in fused.graph.initializer}
    g = _Graph(prefix="standard_")
    for node in fused.graph.node:
        if node.domain != "com.microsoft":
            g.nodes.append(node)
            continue
        if node.op_type not in _REWRITES:
            raise ValueError(f"cannot rewrite the contrib op {node.op_type} ({node.name}) with standard ops; "
                             f"known: {sorted(_REWRITES)}")
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        result = _REWRITES[node.op_type](g, list(node.input), attrs,
                                         lambda name: numpy_helper.to_array(weights[name]))
        g.op("Identity", [result], outputs=[node.output[0]])
    used = {name for n in g.nodes for name in n.input}  # the fused Q, K, V kernels are replaced
    graph = helper.make_graph(g.nodes, fused.graph.name, fused.graph.input, fused.graph.output,
                              [w for w in list(fused.graph.initializer) + g.initializers if w.name in used])
    opsets = [o for o in fused.opset_import if o.domain not in ("com.microsoft",)]
    model = helper.make_model(graph, producer_name="zoo", opset_imports=opsets)
    model.ir_version = fused.ir_version
    return model


def _layer_norm(g, x, gamma, beta, epsilon):
    return g.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=float(epsilon))


def _embed(g, inputs, attrs, array):
    token_ids, segment_ids, word, position, segment, gamma, beta = (inputs + [""] * 7)[:7]
    length = g.op("Shape", [token_ids], start=1, end=2)
    positions = g.op("Slice", [position, g.const("start", np.array([0], "int64")), length,
                               g.const("axis", np.array([0], "int64"))])
    x = g.op("Add", [g.op("Gather", [word, token_ids]), positions])
    if segment_ids and segment:
        x = g.op("Add", [x, g.op("Gather", [segment, segment_ids])])
    return _layer_norm(g, x, gamma, beta, attrs.get("epsilon", 1e-12))


def _attend(g, query, key, value, mask, heads, hidden):
    """Scaled dot-product attention of [B, Tq, H] queries over [B, T, H] keys and values, padded keys (mask 0)
    scored ``MASKED`` -> [B, Tq, H]."""
    size = hidden // heads
    split = g.const("heads_shape", np.array([0, -1, heads, size], "int64"))
    q, k, v = (g.op("Transpose", [g.op("Reshape", [t, split])], perm=[0, 2, 1, 3]) for t in (query, key, value))
    keys = g.op("Transpose", [k], perm=[0, 1, 3, 2])  # its own op: OpenVINO runs it inside the product
    scores = g.op("Mul", [g.op("MatMul", [q, keys]), g.const("scale", np.array(1 / math.sqrt(size), "float32"))])
    keep = g.op("Cast", [mask], to=1)  # float32 [B, T]
    penalty = g.op("Mul", [g.op("Sub", [g.const("one", np.array(1.0, "float32")), keep]),
                           g.const("masked", np.array(MASKED, "float32"))])
    penalty = g.op("Unsqueeze", [penalty, g.const("axes", np.array([1, 2], "int64"))])  # [B, 1, 1, T]
    probs = g.op("Softmax", [g.op("Add", [scores, penalty])], axis=-1)
    context = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    return g.op("Reshape", [context, g.const("merged_shape", np.array([0, -1, hidden], "int64"))])


def _attention(g, inputs, attrs, array):
    x, kernel, bias, mask = inputs[:4]
    w, b = array(kernel), array(bias)
    hidden = w.shape[0]
    q, k, v = (g.op("Add", [g.op("MatMul", [x, g.const("kernel", w[:, i * hidden:(i + 1) * hidden])]),
                            g.const("bias", b[i * hidden:(i + 1) * hidden])]) for i in range(3))
    return _attend(g, q, k, v, mask, attrs["num_heads"], hidden)


def _multi_head_attention(g, inputs, attrs, array):
    query, key, value, bias, mask = inputs[:5]
    b = array(bias)
    hidden = b.shape[0] // 3
    q, k, v = (g.op("Add", [t, g.const("bias", b[i * hidden:(i + 1) * hidden])])
               for i, t in enumerate((query, key, value)))
    return _attend(g, q, k, v, mask, attrs["num_heads"], hidden)


def _skip_layer_norm(g, inputs, attrs, array):
    x, skip, gamma, beta, bias = (inputs + [""] * 5)[:5]
    if bias:
        x = g.op("Add", [x, bias])
    return _layer_norm(g, g.op("Add", [x, skip]), gamma, beta, attrs.get("epsilon", 1e-12))


def _bias_gelu(g, inputs, attrs, array):
    y = g.op("Add", inputs[:2])
    erf = g.op("Erf", [g.op("Div", [y, g.const("sqrt2", np.array(math.sqrt(2.0), "float32"))])])
    half = g.op("Mul", [y, g.const("half", np.array(0.5, "float32"))])
    return g.op("Mul", [half, g.op("Add", [erf, g.const("one", np.array(1.0, "float32"))])])


def _fast_gelu(g, inputs, attrs, array):
    y = g.op("Add", inputs[:2])
    cube = g.op("Mul", [g.op("Mul", [y, y]), y])
    inner = g.op("Add", [y, g.op("Mul", [cube, g.const("c", np.array(0.044715, "float32"))])])
    tanh = g.op("Tanh", [g.op("Mul", [inner, g.const("k", np.array(math.sqrt(2 / math.pi), "float32"))])])
    half = g.op("Mul", [y, g.const("half", np.array(0.5, "float32"))])
    return g.op("Mul", [half, g.op("Add", [tanh, g.const("one", np.array(1.0, "float32"))])])


_REWRITES = {"EmbedLayerNormalization": _embed, "Attention": _attention, "MultiHeadAttention": _multi_head_attention,
             "SkipLayerNormalization": _skip_layer_norm, "BiasGelu": _bias_gelu, "FastGelu": _fast_gelu}
