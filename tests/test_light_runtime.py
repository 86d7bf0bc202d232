"""The light runtime (zoo.inference.light, issue 38): `zoo encode`, `zoo index build`, `zoo search`, `OnnxEncoder` and `zoo
serve` of an ONNX export run without ever importing TensorFlow, Keras or JAX, and give the Keras path's vectors
(fp32 within 1e-5; int8 equal to the Keras path's int8). The precision and graph hash are recorded where vectors
are kept or served; an index refuses queries of another model's graph."""

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from helpers import NO_BACKEND
import zoo
from zoo.inference import graphs, quantization
from zoo.inference.light import OnnxEncoder, light_encoder

pytest.importorskip("onnxruntime", reason="pip install 'zoo[onnx]'")

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["花呗怎么开通", "如何开通花呗", "今天天气不错，" * 20, "", "zoo 的句向量"]


@pytest.fixture
def light_env(tmp_path, monkeypatch):
    """A fresh cache; precision auto deciding for itself (conftest pins ZOO_PRECISION=fp32 for Keras tests)."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ZOO_PRECISION", raising=False)
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def run_without_backend(code, env, cwd):
    done = subprocess.run([sys.executable, "-c", NO_BACKEND + code], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_zoo_encode_index_and_search_never_import_the_backend(light_env, tmp_path):
    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(TEXTS), encoding="utf-8")
    run_without_backend(f"""
from zoo.cli import main
assert main(["encode", "--input", {str(lines)!r}, "--output", {str(tmp_path / "v.npy")!r}, "--no-progress"]) == 0
assert main(["encode", "--input", {str(lines)!r}, "--output", {str(tmp_path / "q.npy")!r}, "--no-progress",
             "--precision", "int8"]) == 0
assert main(["index", "build", "--input", {str(lines)!r}, "--output", {str(tmp_path / "index")!r}]) == 0
assert main(["search", "--index", {str(tmp_path / "index")!r}, "--query", "花呗如何开通", "--topk", "2"]) == 0
assert not {{"tensorflow", "keras", "jax"}} & set(sys.modules)
""", light_env, tmp_path)
    keras_model = zoo.from_preset("zoo-embed-zh-L4")
    want = keras_model.encode(TEXTS, engine="fp32")
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), want, atol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "q.npy"), keras_model.encode(TEXTS, engine="int8"), atol=1e-5)
    source = json.loads((tmp_path / "v.npy.json").read_text())["vector_source"]
    shipped = json.loads((Path(zoo.paths.PRESETS_DIR) / "zoo-embed-zh-L4/onnx/info.json").read_text())
    assert source == {"runtime": "onnxruntime", "precision": "onnx-fp32",
                      "graph_sha256": shipped["files"]["model.onnx"]["sha256"]}  # the shipped graph: no conversion
    assert json.loads((tmp_path / "q.npy.json").read_text())["vector_source"]["precision"] == "int8"
    assert json.loads((tmp_path / "index/index.json").read_text())["vector_source"] == source
    assert keras_model.vector_source() == source  # the Keras path runs the same shipped graph by default


def test_onnx_encoder_equals_the_keras_path(light_env):
    keras_model = zoo.from_preset("zoo-embed-zh-L4")
    light = OnnxEncoder.from_preset("zoo-embed-zh-L4")
    assert light.precision == "onnx-fp32" and light.dim == keras_model.dim
    for kwargs in ({}, {"long_text": "chunk", "maxlen": 16}, {"truncate_dim": 64}, {"normalize_embeddings": False},
                   {"batch_size": 2}):
        np.testing.assert_allclose(light.encode(TEXTS, **kwargs), keras_model.encode(TEXTS, engine="fp32", **kwargs),
                                   atol=1e-5, err_msg=str(kwargs))
    assert light.encode("花呗怎么开通").shape == (keras_model.dim,)
    int8 = OnnxEncoder.from_preset("zoo-embed-zh-L4", engine="int8")
    keras_int8 = keras_model.encode(TEXTS, engine="int8")
    np.testing.assert_allclose(int8.encode(TEXTS), keras_int8, atol=1e-5)
    assert np.min(np.sum(int8.encode(TEXTS) * light.encode(TEXTS), axis=1)) > 0.999  # int8: lossy, by choice
    with pytest.raises(ValueError, match="runs onnx-fp32"):
        light.encode(TEXTS, engine="int8")
    # the tokenizer is the Keras path's: the same ids for pairs and cut texts
    for a, b in (("花呗怎么开通" * 30, "如何开通花呗"), ("zoo 的 Sentence 向量", None)):
        assert light.tokenizer.encode(a, b, maxlen=32) == keras_model.tokenizer.encode(a, b, maxlen=32)
    # SimBERT's retrieval head ships its graph too
    simbert = OnnxEncoder.from_preset("zoo-simbert-zh-L4")
    np.testing.assert_allclose(simbert.encode(TEXTS), zoo.from_preset("zoo-simbert-zh-L4").encode(TEXTS, engine="fp32"),
                               atol=1e-5)


def test_a_graph_is_only_used_for_the_weights_it_was_written_from(light_env, tmp_path):
    preset = tmp_path / "preset"
    shutil.copytree(Path(zoo.paths.PRESETS_DIR) / "zoo-embed-zh-L4", preset)
    assert graphs.find_graphs(preset) is not None
    info = json.loads((preset / "onnx/info.json").read_text())
    (preset / "onnx/info.json").write_text(json.dumps(dict(info, parity_max_abs_diff=0.5)))  # did not match Keras
    assert light_encoder(preset) is None  # auto: lossless only where parity was shown; Keras runs it
    assert OnnxEncoder.from_preset(preset, "onnx-fp32").precision == "onnx-fp32"  # asked for: it runs
    (preset / "onnx/info.json").write_text(json.dumps(dict(info, weights_sha256="0" * 64)))  # retrained since
    assert graphs.find_graphs(preset) is None and light_encoder(preset) is None
    shutil.rmtree(preset / "onnx")
    # the Keras path writes the graph into the cache once and links the preset to it: the next call is light
    model = zoo.from_preset(preset)
    vectors = model.encode(TEXTS)
    light = OnnxEncoder.from_preset(preset)
    np.testing.assert_allclose(light.encode(TEXTS), vectors, atol=1e-6)
    assert graphs.loaded_preset(model) == (str(preset), info["weights_sha256"])
    model.set_weights([w * 1.01 for w in model.get_weights()])  # changed after loading: not the preset's graph
    assert graphs.loaded_preset(model) is None
    with pytest.raises(FileNotFoundError, match="no fused ONNX graph"):
        OnnxEncoder.from_preset(tmp_path)


def test_an_index_refuses_queries_of_another_model(light_env, tmp_path, caplog):
    index = zoo.retrieval.SemanticIndex(OnnxEncoder.from_preset("zoo-embed-zh-L4"), model="zoo-embed-zh-L4")
    index.add(TEXTS)
    index.save(tmp_path / "index")
    other = OnnxEncoder.from_preset("zoo-simbert-zh-L4")  # also 256-d
    with pytest.raises(zoo.ConfigError, match="another model's graph"):
        zoo.retrieval.SemanticIndex.load(tmp_path / "index", other).search("花呗")
    int8 = OnnxEncoder.from_preset("zoo-embed-zh-L4", engine="int8")
    with caplog.at_level(logging.WARNING, logger="zoo"):
        hits = zoo.retrieval.SemanticIndex.load(tmp_path / "index", int8).search("花呗如何开通", topk=1)
    assert "holds onnx-fp32 vectors; these texts are encoded at int8" in caplog.text
    assert hits[0][0][0] in TEXTS[:2]


def test_queries_of_an_int8_index_are_encoded_at_int8(light_env, tmp_path):
    """One vector per index: an index whose vectors were made at a lossy precision encodes later queries at that
    precision, whichever default the searching encoder has; a caller's explicit precision still wins."""
    int8 = OnnxEncoder.from_preset("zoo-embed-zh-L4", engine="int8")
    zoo.retrieval.SemanticIndex(int8, model="zoo-embed-zh-L4").add(TEXTS).save(tmp_path / "index")
    keras_model = zoo.from_preset("zoo-embed-zh-L4")  # its default: lossless (onnx-fp32)
    index = zoo.retrieval.SemanticIndex.load(tmp_path / "index", keras_model)
    query = "花呗如何开通"
    got = index._query_vectors(query)[0]
    np.testing.assert_allclose(got, int8.encode(query), atol=1e-6)
    assert np.abs(got - keras_model.encode(query)).max() > 1e-5  # the float vector would differ
    assert json.loads((tmp_path / "index" / "index.json").read_text())["vector_source"]["precision"] == "int8"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serving_an_onnx_export_loads_no_tensorflow(light_env, tmp_path):
    pytest.importorskip("starlette", reason="pip install 'zoo[serve]'")
    grpc = pytest.importorskip("grpc", reason="pip install 'zoo[serve]'")
    assert zoo.job("export").run(zoo.job("export").parse(
        ["--model", "zoo-embed-zh-L4", "--output", str(tmp_path / "export"), "--format", "onnx"]))
    port, grpc_port = free_port(), free_port()
    server = subprocess.Popen([sys.executable, "-c", NO_BACKEND + f"""
from zoo.cli import main
main(["serve", "--model", {str(tmp_path / "export/default")!r}, "--port", "{port}", "--grpc-port", "{grpc_port}"])
"""], env=light_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}/v1"
        for _ in range(600):
            try:
                models = json.load(urllib.request.urlopen(base + "/models", timeout=2))
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                time.sleep(0.1)

        def post(path, body):
            request = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
            return json.load(urllib.request.urlopen(request, timeout=30))

        want = zoo.from_preset("zoo-embed-zh-L4").encode(TEXTS[:2], engine="fp32")
        openai = [d["embedding"] for d in post("/embeddings", {"input": TEXTS[:2], "model": "default"})["data"]]
        rest = post("/models/default:predict", {"instances": TEXTS[:2]})["predictions"]
        metadata = json.load(urllib.request.urlopen(base + "/models/default/metadata", timeout=30))
        import tensorflow as tf  # the client side only
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

        request = predict_pb2.PredictRequest()
        request.model_spec.name = "default"
        request.inputs["text"].CopyFrom(tf.make_tensor_proto(TEXTS[:2]))
        stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{grpc_port}"))
        answer = tf.make_ndarray(stub.Predict(request, timeout=30).outputs["embedding"])
        for vectors in (openai, rest, answer):
            np.testing.assert_allclose(np.asarray(vectors), want, atol=1e-5)
        assert set(metadata["metadata"]["signature_def"]["signature_def"]) >= {"serving_default", "text", "ids"}
        [model] = models["data"]
        manifest = json.loads((tmp_path / "export/default/1/zoo_manifest.json").read_text())
        assert model["zoo"]["vector_source"] == {"runtime": "onnxruntime", "precision": "onnx-fp32",
                                                 "graph_sha256": manifest["files"]["model.onnx"]["sha256"]}
        maps = Path(f"/proc/{server.pid}/maps")
        if maps.exists():
            assert "tensorflow" not in maps.read_text()
    finally:
        server.terminate()
        server.wait(30)


def test_an_older_zoos_int8_graph_is_not_used(light_env, tmp_path):
    """A cached graph folder written by an older zoo, found through its preset's link, holds an int8 graph of an
    older quantization: the light runtime quantizes the fp32 graph again, as the Keras path does."""
    preset = tmp_path / "preset"
    shutil.copytree(Path(zoo.paths.PRESETS_DIR) / "zoo-embed-zh-L4", preset, ignore=shutil.ignore_patterns("onnx"))
    want = zoo.from_preset(preset).encode(TEXTS, engine="int8")  # writes fp32 and int8 into the cache, links
    folder, info, _ = graphs.find_graphs(preset)
    assert info["quantization"] == {"int8": quantization.QUANTIZATION}
    beside = os.path.join(folder, graphs.INT8_GRAPH)
    assert OnnxEncoder.from_preset(preset, "int8").graph == beside
    info_path = Path(folder) / graphs.GRAPH_INFO
    for older in ({k: v for k, v in info.items() if k != "quantization"}, dict(info, quantization={"int8": "old"})):
        info_path.write_text(json.dumps(older))
        light = OnnxEncoder.from_preset(preset, "int8")
        assert light.graph != beside
        np.testing.assert_allclose(light.encode(TEXTS), want, atol=1e-5)
