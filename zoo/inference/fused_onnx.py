"""zoo models as fused ONNX Runtime graphs, written straight from their weights.

zoo owns the architecture (``zoo.backbones.bert``: post-LayerNorm BERT, GELU, the poolings of ``zoo.pooling``), so the
graph is written here op by op with ONNX Runtime's fused transformer kernels (``com.microsoft`` contrib ops)
instead of converting the Keras graph and hoping an optimizer recognises the result:

- ``EmbedLayerNormalization``: token + position + segment embeddings and their LayerNorm, one kernel;
- ``Attention`` per layer: the Q, K, V projections as one [H, 3H] product, the masked softmax and the heads;
- ``SkipLayerNormalization``: bias + residual + LayerNorm after each projection;
- ``BiasGelu`` (exact erf GELU, zoo's default) or ``FastGelu`` (the tanh form) after the intermediate product.

When only [CLS] is read (``cls`` and ``pooler`` pooling, the cross-encoder), the last layer runs its query, its
output projection and its feed-forward block for position 0 only (``MultiHeadAttention`` with a one-token query),
as ``BertBackbone(first_token_only=True)`` does. ``mean`` and ``first-last-avg`` pool with a masked mean written
as one batched product.

The graph takes ``token_ids``, ``segment_ids`` and ``padding_mask`` (int32 [batch, length], any padding) and
returns the model's output (``output``): a SentenceEncoder's un-normalised vector, a CrossEncoder's logits,
SimBERT's retrieval vector (its ``encoder``). With ``served=True`` it returns what ``zoo.export`` serves instead
(``embedding``, L2-normalised; ``score``). Parity with the Keras model: tests/test_fused_onnx.py.
"""

from __future__ import annotations

import numpy as np

from ..checkpoints import backbone_arrays

WRITER_VERSION = 1  # part of the cache key of written graphs: bump it when the graph written changes
OPSET = 17
INPUTS = ("token_ids", "segment_ids", "padding_mask")
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu", "swish", "tanh")
FUSED_POOLINGS = ("cls", "mean", "first-last-avg", "pooler")  # the poolings ``_pool`` writes


class _Graph:
    """Nodes and initializers of the graph being written; ``op`` returns the output name(s) of a new node."""

    def __init__(self, prefix=""):
        self.nodes, self.initializers, self._count, self.prefix = [], [], 0, prefix

    def name(self, hint):
        self._count += 1
        return f"{self.prefix}{hint}_{self._count}"

    def const(self, hint, array):
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.require(array, requirements="C"), name))  # 0-d kept
        return name

    def op(self, op_type, inputs, outputs=1, domain=None, **attrs):
        from onnx import helper

        names = [self.name(op_type) for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self.name(op_type + "_node"),
                                           domain=domain, **attrs))
        return names[0] if len(names) == 1 else names

    def ms(self, op_type, inputs, outputs=1, **attrs):
        """A ``com.microsoft`` contrib op."""
        return self.op(op_type, inputs, outputs, domain="com.microsoft", **attrs)


def describe(model):
    """(backbone, HeadSpec, classifier) of a zoo task model's served part (SimBERT: its retrieval encoder):
    ``classifier`` is a score head's (kernel, bias) as float32 arrays, None for an embedding. TypeError for a
    model without a fused graph."""
    spec = model.head_spec() if hasattr(model, "head_spec") else None
    model = model.served_model() if spec is not None else model
    backbone = getattr(model, "backbone", None)
    if spec is None or type(backbone).__name__ != "BertBackbone":
        raise TypeError(f"no fused graph for a {type(model).__name__} on a {type(backbone).__name__}: the fused "
                        f"writer takes zoo task models (SentenceEncoder, CrossEncoder, SimBERT) on a BERT backbone; "
                        f"other families run on Keras")
    if spec.output == "embedding":
        if spec.pooling not in FUSED_POOLINGS or getattr(model, "dense", None):
            reason = f"pooling {spec.pooling!r}" if spec.pooling not in FUSED_POOLINGS else "Dense layers after the " \
                "pooling"
            raise TypeError(f"no fused graph for a {type(model).__name__} with {reason} (the fused ONNX graph "
                            f"pools with {', '.join(FUSED_POOLINGS)} and has no Dense layers): use precision "
                            f"'fp32' or 'bf16', and a SavedModel export")
        return backbone, spec, None
    from keras import ops

    dense = model.get_layer("classifier")
    return backbone, spec, tuple(np.asarray(ops.convert_to_numpy(w), "float32") for w in (dense.kernel, dense.bias))


def fused_graph(model, served=False):
    """The fused ONNX graph (an ``onnx.ModelProto``) of a SentenceEncoder, CrossEncoder or SimBERT's retrieval
    head. ``served``: end with what ``zoo.export`` serves (an L2-normalised ``embedding``; a ``score``: P(similar)
    of a softmax head, the raw score of a CoSENT head) instead of the raw ``output``."""
    from onnx import TensorProto, helper

    backbone, spec, classifier = describe(model)
    if backbone.activation not in ACTIVATIONS:
        raise ValueError(f"no fused graph for activation {backbone.activation!r}; known: {ACTIVATIONS}")
    embedding = backbone.get_layer("token_embedding")
    if (embedding.compute_dtype, embedding.variable_dtype) != ("float32", "float32"):
        raise ValueError(f"fused graphs are written from float32 models, not {embedding.dtype_policy.name}")
    arrays = {k: np.asarray(v, "float32") for k, v in backbone_arrays(backbone).items()}
    g = _Graph()
    eps = float(backbone.layer_norm_epsilon)
    zero_segments = spec.zero_segments
    mask = "padding_mask"
    word = g.const("word_embeddings", arrays["bert/embeddings/word_embeddings"])
    position_table = arrays["bert/embeddings/position_embeddings"]
    segment_table = arrays["bert/embeddings/token_type_embeddings"]
    if zero_segments:  # every segment id counts as 0 (bojone's interact.py): segment row 0 joins the positions
        position = g.const("position_embeddings", position_table + segment_table[0])
        embed_inputs = ["token_ids", "", word, position, ""]
    else:
        embed_inputs = ["token_ids", "segment_ids", word, g.const("position_embeddings", position_table),
                        g.const("segment_embeddings", segment_table)]
    x = g.ms("EmbedLayerNormalization", embed_inputs + [g.const("gamma", arrays["bert/embeddings/LayerNorm/gamma"]),
                                                        g.const("beta", arrays["bert/embeddings/LayerNorm/beta"])],
             outputs=2, epsilon=eps)[0]
    first_token_only = classifier is not None or spec.pooling in ("cls", "pooler")
    layers = []
    for i in range(backbone.num_layers):
        last = i == backbone.num_layers - 1
        x = _layer(g, arrays, f"bert/encoder/layer_{i}", x, mask, backbone, eps, first_token_only and last)
        layers.append(x)
    if classifier is not None:
        cls = g.op("Squeeze", [x, g.const("axis", np.array([1], "int64"))])
        output = g.op("Add", [g.op("MatMul", [cls, g.const("classifier_kernel", classifier[0])]),
                              g.const("classifier_bias", classifier[1])])
    else:
        output = _pool(g, arrays, spec.pooling, layers, mask, backbone)
    if served:
        output = spec.write_onnx(g, output)
    name = spec.output if served else "output"
    g.op("Identity", [output], outputs=[name])
    dims = ["batch", "length"]
    graph = helper.make_graph(
        g.nodes, f"zoo_{type(model).__name__}",
        [helper.make_tensor_value_info(n, TensorProto.INT32, dims) for n in INPUTS],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)], g.initializers)
    onnx_model = helper.make_model(graph, producer_name="zoo", opset_imports=[
        helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)])
    onnx_model.ir_version = 8
    return onnx_model


def unfused_qkv(graph):
    """``graph`` (an ``onnx.ModelProto`` written here) with each ``Attention`` node split into its [H, 3H] product
    (a plain MatMul) and ``MultiHeadAttention`` on the Q, K, V it gives (with the bias and mask) -- the form the
    first-token-only layer already has. The same arithmetic (float32 rounding apart); what the int8 quantizer
    needs to run the Q, K, V products in int8, since ONNX Runtime's ``Attention`` has no static int8 form."""
    from onnx import helper

    g = _Graph(prefix="unfused_")
    for node in graph.graph.node:
        if node.op_type != "Attention" or node.domain != "com.microsoft":
            g.nodes.append(node)
            continue
        x, kernel, bias, mask = node.input[:4]
        query, key, value = g.op("Split", [g.op("MatMul", [x, kernel])], outputs=3, axis=2)
        g.nodes.append(helper.make_node("MultiHeadAttention", [query, key, value, bias, mask], list(node.output),
                                        name=node.name, domain="com.microsoft", **{
                                            a.name: helper.get_attribute_value(a) for a in node.attribute}))
    new = helper.make_graph(g.nodes, graph.graph.name, graph.graph.input, graph.graph.output,
                            list(graph.graph.initializer) + g.initializers)
    model = helper.make_model(new, producer_name=graph.producer_name, opset_imports=graph.opset_import)
    model.ir_version = graph.ir_version
    return model


def _layer(g, arrays, prefix, x, mask, backbone, eps, first_token_only):
    """One post-LayerNorm transformer layer on ``x`` [B, T, H] -> [B, T, H] (or [B, 1, H]: position 0 only)."""
    w = {k[len(prefix) + 1:]: v for k, v in arrays.items() if k.startswith(prefix + "/")}
    parts = [f"attention/self/{p}" for p in ("query", "key", "value")]
    heads = backbone.num_heads
    if first_token_only:
        query_in = g.op("Slice", [x, g.const("start", np.array([0], "int64")), g.const("end", np.array([1], "int64")),
                                  g.const("axis", np.array([1], "int64"))])
        query = g.op("MatMul", [query_in, g.const("query_kernel", w[parts[0] + "/kernel"])])
        kv_kernel = np.concatenate([w[p + "/kernel"] for p in parts[1:]], axis=1)
        kv = g.op("MatMul", [x, g.const("kv_kernel", kv_kernel)])
        key, value = g.op("Split", [kv], outputs=2, axis=2)
        bias = np.concatenate([w[p + "/bias"] for p in parts])
        attended = g.ms("MultiHeadAttention", [query, key, value, g.const("qkv_bias", bias), mask], num_heads=heads)
        residual = query_in
    else:
        kernel = np.concatenate([w[p + "/kernel"] for p in parts], axis=1)
        bias = np.concatenate([w[p + "/bias"] for p in parts])
        attended = g.ms("Attention", [x, g.const("qkv_kernel", kernel), g.const("qkv_bias", bias), mask],
                        num_heads=heads)
        residual = x
    projected = g.op("MatMul", [attended, g.const("attention_output_kernel", w["attention/output/dense/kernel"])])
    h = g.ms("SkipLayerNormalization", [projected, residual, g.const("gamma", w["attention/output/LayerNorm/gamma"]),
                                        g.const("beta", w["attention/output/LayerNorm/beta"]),
                                        g.const("attention_output_bias", w["attention/output/dense/bias"])],
             epsilon=eps)
    inner = g.op("MatMul", [h, g.const("intermediate_kernel", w["intermediate/dense/kernel"])])
    inner = _biased_activation(g, inner, g.const("intermediate_bias", w["intermediate/dense/bias"]),
                               backbone.activation)
    out = g.op("MatMul", [inner, g.const("output_kernel", w["output/dense/kernel"])])
    return g.ms("SkipLayerNormalization", [out, h, g.const("gamma", w["output/LayerNorm/gamma"]),
                                           g.const("beta", w["output/LayerNorm/beta"]),
                                           g.const("output_bias", w["output/dense/bias"])], epsilon=eps)


def _biased_activation(g, x, bias, activation):
    """activation(x + bias): BiasGelu (erf), FastGelu (tanh form), else the plain ONNX ops."""
    if activation == "gelu":
        return g.ms("BiasGelu", [x, bias])
    if activation in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return g.ms("FastGelu", [x, bias])
    x = g.op("Add", [x, bias])
    if activation == "relu":
        return g.op("Relu", [x])
    if activation == "tanh":
        return g.op("Tanh", [x])
    return g.op("Mul", [x, g.op("Sigmoid", [x])])  # silu / swish


def _pool(g, arrays, mode, layers, mask, backbone):
    """The pooled [B, H] vector (``zoo.pooling.Pooling``) from each layer's output."""
    if mode in ("cls", "pooler"):
        cls = g.op("Squeeze", [layers[-1], g.const("axis", np.array([1], "int64"))])
        if mode == "cls":
            return cls
        pooled = g.op("Add", [g.op("MatMul", [cls, g.const("pooler_kernel", arrays["bert/pooler/dense/kernel"])]),
                              g.const("pooler_bias", arrays["bert/pooler/dense/bias"])])
        return g.op("Tanh", [pooled]) if backbone.pooler_activation == "tanh" else pooled
    hidden = layers[-1] if mode == "mean" else g.op("Mul", [g.op("Add", [layers[0], layers[-1]]),
                                                            g.const("half", np.array(0.5, "float32"))])
    weights = g.op("Cast", [mask], to=1)  # float32 [B, T]
    summed = g.op("MatMul", [g.op("Unsqueeze", [weights, g.const("axis", np.array([1], "int64"))]), hidden])
    summed = g.op("Squeeze", [summed, g.const("axis", np.array([1], "int64"))])  # [B, H]
    count = g.op("ReduceSum", [weights, g.const("axis", np.array([1], "int64"))], keepdims=1)
    return g.op("Div", [summed, g.op("Max", [count, g.const("one", np.array(1.0, "float32"))])])
