"""Precision openvino-int8 (issue 38): the fused graph rewritten with standard ops equals it (ONNX Runtime and
OpenVINO float32, 1e-5), its int8 version runs on OpenVINO from the Keras path and the light runtime alike (the
same vectors, batch by batch or many batches at once, one text or many), it is lossy by choice only, and the
light runtime runs it without TensorFlow."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import zoo
from helpers import require_module
from helpers import (GRAPH_TEXTS, GRAPH_TOLERANCE, graph_batch, lcqmc_texts, ops_of,
                     run_graph, synthetic_vocab, tiny_backbone)
from zoo.inference import graphs, quantization, sessions
from zoo.inference.light import OnnxEncoder
from zoo.inference.pipeline import predict_sorted
from zoo.inference.fused_onnx import fused_graph
from zoo.inference.standard_onnx import standard_graph

ov = require_module("openvino", "pip install 'zoo[openvino]'")
ROOT = Path(__file__).resolve().parents[1]
TEXTS, TOLERANCE, TOKENIZER, BATCH = GRAPH_TEXTS, GRAPH_TOLERANCE, zoo.Tokenizer(synthetic_vocab()), graph_batch()
pytestmark = pytest.mark.usefixtures("fresh_graph_cache")  # every test: its own graph cache
CONTRIB = {"EmbedLayerNormalization", "Attention", "MultiHeadAttention", "SkipLayerNormalization", "BiasGelu",
           "FastGelu"}


def run_openvino(graph, batch):
    """The graph (a ModelProto) compiled by OpenVINO in float32 (no bf16 on any CPU), run on ``batch``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "graph.onnx")
        with open(path, "wb") as f:
            f.write(graph.SerializeToString())
        compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled({k: np.asarray(batch[k], "int32") for k in sessions.ID_INPUTS})[0]


@pytest.mark.parametrize("activation", ["gelu", "gelu_new", "relu"])
@pytest.mark.parametrize("pooling", ["cls", "mean", "first-last-avg"])
def test_standard_graph_equals_the_fused_graph(pooling, activation):
    """Every contrib op rewritten (BiasGelu, FastGelu, Attention, and MultiHeadAttention for [CLS] pooling), on a
    batch with padding and both segments: equal to the fused graph and to Keras in ONNX Runtime and OpenVINO."""
    encoder = zoo.SentenceEncoder(tiny_backbone(activation=activation,
                                                output_hidden_states=pooling == "first-last-avg"),
                                  TOKENIZER, pooling=pooling, maxlen=32)
    fused = fused_graph(encoder)
    standard = standard_graph(fused)
    assert not ops_of(standard) & CONTRIB and all(n.domain == "" for n in standard.graph.node)
    assert {"LayerNormalization", "Softmax"} <= ops_of(standard)
    assert ("Erf" in ops_of(standard)) == (activation == "gelu") and ("Tanh" in ops_of(standard)) == (
        activation == "gelu_new")
    splits = [sum(n.op_type == "Split" for n in g.graph.node) for g in (standard, fused)]
    assert splits[0] == splits[1] == (pooling == "cls"), splits  # Attention's Q, K, V: three products, no Split
    used = {i for n in standard.graph.node for i in n.input}
    assert all(w.name in used for w in standard.graph.initializer)  # the fused [H, 3H] kernels are not kept
    want = np.asarray(encoder.predict_on_batch(BATCH))
    np.testing.assert_allclose(run_graph(standard, BATCH), run_graph(fused, BATCH), atol=TOLERANCE)
    np.testing.assert_allclose(run_graph(standard, BATCH), want, atol=TOLERANCE)
    np.testing.assert_allclose(run_openvino(standard, BATCH), want, atol=TOLERANCE)


@pytest.mark.parametrize("zero_segments", [False, True])
def test_standard_graph_of_a_cross_encoder(zero_segments):
    scorer = zoo.CrossEncoder(tiny_backbone(seed=1), TOKENIZER, head="softmax", maxlen=32, zero_segments=zero_segments)
    fused = fused_graph(scorer)
    np.testing.assert_allclose(run_openvino(standard_graph(fused), BATCH), run_graph(fused, BATCH), atol=TOLERANCE)


def test_unknown_contrib_ops_are_named():
    graph = fused_graph(zoo.SentenceEncoder(tiny_backbone(), TOKENIZER, pooling="mean", maxlen=32))
    graph.graph.node[0].op_type = "GroupQueryAttention"
    with pytest.raises(ValueError, match="GroupQueryAttention"):
        standard_graph(graph)


@pytest.mark.parametrize("per_tensor", [True, False])
def test_transposes_after_quantization_keep_the_arithmetic(per_tensor):
    """A keys' transpose before its Q/DQ pair moves after it (per-tensor scale) or stays (per-channel scale); the
    product's result is the same either way."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    scale = np.array(0.05, "float32") if per_tensor else np.linspace(0.03, 0.06, 5).astype("float32")
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("QuantizeLinear", ["kt", "scale", "zero"], ["kq"], axis=3),
             helper.make_node("DequantizeLinear", ["kq", "scale", "zero"], ["kd"], axis=3),
             helper.make_node("MatMul", ["q", "kd"], ["scores"])]
    zero = np.zeros(scale.shape, "int8")
    graph = helper.make_graph(nodes, "keys", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 5, 4])
                                              for n in ("q", "k")],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(zero, "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {n: np.random.default_rng(i).normal(size=(1, 2, 5, 4)).astype("float32") for i, n in enumerate("qk")}

    def run(m):
        return onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)

    want = run(model)[0]
    moved = quantization.transposes_after_quantization(onnx.ModelProto.FromString(model.SerializeToString()))
    order = [n.op_type for n in moved.graph.node]
    assert order == (["QuantizeLinear", "DequantizeLinear", "Transpose", "MatMul"] if per_tensor else
                     ["Transpose", "QuantizeLinear", "DequantizeLinear", "MatMul"]), order
    np.testing.assert_array_equal(run(moved)[0], want)


def test_predict_sorted_queues_many_batches_and_keeps_their_order():
    """Several batches go to ``submit`` and come back, in any order, to their rows; one batch runs at once."""
    rows = [([1] * n, [0] * n) for n in (3, 9, 1, 7, 5, 2, 8)]
    calls = []

    class Engine:
        pending = []

        def __call__(self, batch):
            calls.append("run")
            return batch["n"]

        def submit(self, batch, done):
            calls.append("submit")
            self.pending.append((batch, done))

        def wait(self):
            for batch, done in reversed(self.pending):  # finished out of order
                done(batch["n"])
            self.pending.clear()

    def pad(batch):
        return {"n": np.asarray([[len(ids)] for ids, _ in batch], "float32")}

    out = predict_sorted(rows, Engine(), pad, batch_size=2)
    np.testing.assert_array_equal(out[:, 0], [len(ids) for ids, _ in rows])
    assert calls == ["submit"] * 4
    calls.clear()
    np.testing.assert_array_equal(predict_sorted(rows[:2], Engine(), pad, batch_size=2)[:, 0], [3, 9])
    assert calls == ["run"]


@pytest.mark.slow
def test_openvino_int8_of_the_shipped_preset():
    """zoo-embed-zh-L4 on 300 LCQMC test texts at openvino-int8: the Keras path and the light runtime give the
    same vectors, whether a text runs alone (latency configuration) or among many batches (OpenVINO's parallel
    streams); close to fp32 but not equal (lossy by choice); recorded as OpenVINO's."""
    encoder = zoo.from_preset("zoo-embed-zh-L4")
    texts = lcqmc_texts(300)
    vectors = encoder.encode(texts, engine="openvino-int8")
    light = OnnxEncoder.from_preset("zoo-embed-zh-L4", engine="openvino-int8")
    np.testing.assert_array_equal(light.encode(texts), vectors)
    np.testing.assert_allclose(np.stack([light.encode(t) for t in texts[:20]]), vectors[:20], atol=1e-6)
    cosines = np.sum(vectors * encoder.encode(texts, engine="fp32"), axis=1)  # the attention in int8 too: a
    assert cosines.min() > 0.995 and 0.999 < cosines.mean() < 1 - 1e-6, (cosines.min(), cosines.mean())  # bit further
    hint = light._runner.session._request.get_compiled_model().get_property("INFERENCE_PRECISION_HINT")
    assert str(hint) == "<Type: 'float32'>", hint  # float parts in float32 on every CPU, bf16 or not
    source = encoder.vector_source("openvino-int8")
    graph = Path(graphs.graph_path(encoder, "openvino-int8"))
    assert source == light.vector_source() == {"runtime": "openvino", "precision": "openvino-int8",
                                               "graph_sha256": zoo.paths.sha256_of(graph)}
    import onnx

    quantized = onnx.load(str(graph))
    assert "QuantizeLinear" in ops_of(quantized) and not ops_of(quantized) & CONTRIB
    zero_points = [i for i in quantized.graph.initializer if i.name.endswith("zero_point")]
    assert zero_points and all(i.data_type == onnx.TensorProto.INT8 and not onnx.numpy_helper.to_array(i).any()
                               for i in zero_points)  # symmetric int8 activations and weights
    used_by = {i: n.op_type for n in quantized.graph.node for i in n.input}
    products = [n for n in quantized.graph.node if n.op_type == "MatMul"]
    assert len(products) == 4 * 8 + 1  # per layer Q, K, V, scores, context, output, FFN in and out; the pooling
    dequantized = {o for n in quantized.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    keys = {n.output[0] for n in quantized.graph.node if n.op_type == "Transpose" and n.input[0] in dequantized}
    assert all(i in dequantized or i in keys for n in products for i in n.input)  # every product in int8
    assert sum(i in keys for n in products for i in n.input) == 4  # each layer's keys: transposed after their Q/DQ
    assert not any(used_by.get(n.output[0]) == "QuantizeLinear" for n in products)  # its output float (fused on)


def test_light_runtime_runs_openvino_without_the_backend(tmp_path):
    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(TEXTS[:4]), encoding="utf-8")
    from helpers import NO_BACKEND

    code = NO_BACKEND + f"""
from zoo.cli import main
assert main(["encode", "--input", {str(lines)!r}, "--output", {str(tmp_path / "v.npy")!r}, "--no-progress",
             "--precision", "openvino-int8"]) == 0
assert not {{"tensorflow", "keras", "jax"}} & set(sys.modules) and "openvino" in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "v.npy.json").read_text())["vector_source"]["runtime"] == "openvino"
    want = OnnxEncoder.from_preset("zoo-embed-zh-L4", engine="openvino-int8").encode(TEXTS[:4])
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), want, atol=1e-6)
