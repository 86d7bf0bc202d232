"""Fused ONNX Runtime graphs (zoo.inference.fused_onnx): parity with the Keras model for every graph and pooling, int8 on the
fused ops, precision "auto" (its measurement, its rules, its record), the graph cache, and an ONNX export served
behind the same APIs as a SavedModel."""

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import zoo
from helpers import (GRAPH_TEXTS, GRAPH_TOLERANCE, graph_batch, lcqmc_texts, ops_of,
                     require_module, run_graph, synthetic_vocab, tiny_backbone, weight_products)
from zoo.inference import autotune, graphs
from zoo.inference import precisions as inference

ort = require_module("onnxruntime", "pip install 'zoo[onnx]'")
onnx = require_module("onnx", "pip install 'zoo[onnx]'")
from zoo.inference.fused_onnx import fused_graph, unfused_qkv  # noqa: E402
from zoo.inference.openvino_engine import openvino_available  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OPENVINO = {"openvino-int8"} if openvino_available() else set()  # fastest's candidate where OpenVINO is installed
TOLERANCE = GRAPH_TOLERANCE  # tiny models: float32 round-off is ~1e-6 (zoo-embed-zh-L4 is held to auto's 1e-4 below)
TEXTS = GRAPH_TEXTS
VOCAB = synthetic_vocab()
TOKENIZER = zoo.Tokenizer(VOCAB)
BATCH = graph_batch()
pytestmark = pytest.mark.usefixtures("fresh_graph_cache")  # every test: its own graph cache





@pytest.mark.parametrize("activation", ["gelu", "gelu_new", "relu"])
@pytest.mark.parametrize("pooling", ["cls", "mean", "first-last-avg", "pooler"])
def test_sentence_encoder_graph_equals_keras(pooling, activation):
    encoder = zoo.SentenceEncoder(tiny_backbone(activation=activation,
                                                output_hidden_states=pooling == "first-last-avg"),
                                  TOKENIZER, pooling=pooling, maxlen=32)
    graph = fused_graph(encoder)
    want = np.asarray(encoder.predict_on_batch(BATCH))
    got = run_graph(graph, BATCH)
    assert got.shape == want.shape == (5, 32)
    assert np.abs(got - want).max() <= TOLERANCE, np.abs(got - want).max()
    fused = {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization"}
    assert fused <= ops_of(graph) and not ops_of(graph) & {"LayerNormalization", "Softmax", "Erf", "Transpose"}
    assert ("BiasGelu" in ops_of(graph)) == (activation == "gelu") and ("FastGelu" in ops_of(graph)) == (
        activation == "gelu_new")
    # [CLS] pooling: the last layer runs its query and feed-forward for position 0 only
    assert ("MultiHeadAttention" in ops_of(graph)) == (pooling in ("cls", "pooler"))
    served = run_graph(fused_graph(encoder, served=True), BATCH)
    np.testing.assert_allclose(served, want / np.linalg.norm(want, axis=1, keepdims=True), atol=TOLERANCE)
    unfused = unfused_qkv(graph)  # what int8 quantizes: the Q, K, V product outside Attention, the same result
    assert "Attention" not in ops_of(unfused) and "MultiHeadAttention" in ops_of(unfused)
    assert np.abs(run_graph(unfused, BATCH) - want).max() <= TOLERANCE


@pytest.mark.parametrize("head,zero_segments", [("softmax", False), ("cosent", False), ("softmax", True)])
def test_cross_encoder_graph_equals_keras(head, zero_segments):
    scorer = zoo.CrossEncoder(tiny_backbone(seed=1), TOKENIZER, head=head, maxlen=32, zero_segments=zero_segments)
    want = np.asarray(scorer.predict_on_batch(
        {**BATCH, "segment_ids": np.zeros_like(BATCH["segment_ids"])} if zero_segments else BATCH))
    assert np.abs(run_graph(fused_graph(scorer), BATCH) - want).max() <= TOLERANCE
    assert np.abs(run_graph(unfused_qkv(fused_graph(scorer)), BATCH) - want).max() <= TOLERANCE
    pairs = [(a, b) for a, b in zip(TEXTS, TEXTS[::-1]) if a and b]
    ids = TOKENIZER([a for a, _ in pairs], [b for _, b in pairs], maxlen=32)  # segments 0/1: zeroed in the graph
    np.testing.assert_allclose(run_graph(fused_graph(scorer, served=True), ids),
                               scorer.score(pairs, engine="fp32"), atol=TOLERANCE)
    np.testing.assert_allclose(scorer.score(pairs, engine="onnx-fp32"), scorer.score(pairs, engine="fp32"),
                               atol=TOLERANCE)


def test_simbert_retrieval_graph_equals_keras():
    sim = zoo.SimBERT(tiny_backbone(seed=2, with_mlm=True, pooler_activation="linear"), TOKENIZER, maxlen=32)
    want = np.asarray(sim.encoder.predict_on_batch(BATCH))
    assert np.abs(run_graph(fused_graph(sim), BATCH) - want).max() <= TOLERANCE
    ids = TOKENIZER(TEXTS, maxlen=32)
    np.testing.assert_allclose(run_graph(fused_graph(sim, served=True), ids), sim.encode(TEXTS, engine="fp32"),
                               atol=TOLERANCE)
    np.testing.assert_allclose(sim.encode(TEXTS, engine="onnx-fp32"), sim.encode(TEXTS, engine="fp32"),
                               atol=TOLERANCE)


def test_unsupported_models_are_refused():
    with pytest.raises(TypeError, match="no fused graph for a BertBackbone"):
        fused_graph(tiny_backbone())
    half = zoo.SentenceEncoder(zoo.BertBackbone(len(VOCAB), 1, 2, 32, 64, dtype="bfloat16"), TOKENIZER)
    with pytest.raises(ValueError, match="float32 models"):
        fused_graph(half)


@pytest.mark.slow
def test_shipped_preset_on_1000_lcqmc_texts_fp32_parity_and_int8():
    """zoo-embed-zh-L4 (first-last-avg) on 1,000 LCQMC test texts: the fused graph equals Keras within 1e-4 (raw
    vectors); int8 multiplies by every weight matrix (the Q, K, V projections included) in int8 with fixed scales,
    close to fp32 but not equal."""
    encoder = zoo.from_preset("zoo-embed-zh-L4")
    texts = lcqmc_texts(1000)
    rows = [encoder.tokenizer.assemble(p, None, encoder.maxlen) for p in encoder.tokenizer.piece_ids(texts)]
    keras_out = encoder.predict_rows(rows, precision="fp32")
    fused = encoder.predict_rows(rows, precision="onnx-fp32")
    assert fused.shape == (1000, 256) and np.abs(fused - keras_out).max() <= autotune.PARITY_TOLERANCE
    int8 = encoder.encode(texts, engine="int8")
    cosines = np.sum(int8 * encoder.encode(texts, engine="fp32"), axis=1)
    assert cosines.min() > 0.999 and cosines.mean() < 1 - 1e-6, (cosines.min(), cosines.mean())
    int8_file = Path(graphs.graph_path(encoder, "int8"))  # quantized from the shipped fp32 graph, cached
    assert {"EmbedLayerNormalization", "SkipLayerNormalization", "QuantizeLinear"} <= ops_of(onnx.load(str(int8_file)))
    products = weight_products(int8_file)
    assert len(products) == 4 * 4 and all(products.values()), products  # Q/K/V, output, FFN in and out per layer


def tiny_encoder(seed=3, pooling="mean"):
    return zoo.SentenceEncoder(tiny_backbone(seed=seed, output_hidden_states=pooling == "first-last-avg"),
                               TOKENIZER, pooling=pooling, maxlen=32)


def test_auto_is_lossless(fresh_graph_cache, monkeypatch, caplog):
    """auto never changes a vector beyond float32 rounding: the fused fp32 graph where its parity with Keras was
    recorded when it was written, Keras fp32 otherwise; never int8, however fast it measures."""
    encoder = tiny_encoder(seed=6)
    monkeypatch.setattr(autotune, "measure", lambda model: pytest.fail("auto measured speeds"))
    with caplog.at_level(logging.INFO, logger="zoo"):
        vectors = encoder.encode(TEXTS)
    assert inference._RUNNERS[encoder]["auto"] == "onnx-fp32" and "precision auto: onnx-fp32" in caplog.text
    np.testing.assert_allclose(vectors, encoder.encode(TEXTS, engine="fp32"), atol=TOLERANCE)
    [info_path] = fresh_graph_cache.glob("onnx/*/info.json")
    info = json.loads(info_path.read_text())
    assert info["parity_max_abs_diff"] <= TOLERANCE and info["parity_texts"] == len(graphs.PARITY_TEXTS)
    assert encoder.vector_source() == {"runtime": "onnxruntime", "precision": "onnx-fp32", "graph_sha256":
                                       info["files"]["model.onnx"]["sha256"]}
    info["parity_max_abs_diff"] = 1.0  # a graph that did not match Keras when written: Keras itself
    info_path.write_text(json.dumps(info))
    inference.forget(encoder)
    assert inference.choose(encoder) == "fp32"
    assert encoder.vector_source("auto") == {"runtime": "keras", "precision": "fp32", "graph_sha256": None}


def test_fastest_measures_once_records_logs_and_follows_the_weights(fresh_graph_cache, monkeypatch, caplog):
    encoder = tiny_encoder()
    with caplog.at_level(logging.INFO, logger="zoo"):
        vectors = encoder.encode(TEXTS, engine="fastest")
    choice = inference._RUNNERS[encoder]["fastest"]
    assert choice in ("fp32", "onnx-fp32", "int8", "openvino-int8") and f"precision fastest: {choice}" in caplog.text
    np.testing.assert_array_equal(vectors, encoder.encode(TEXTS, engine=choice))
    [record_path] = fresh_graph_cache.glob("onnx/fastest/*.json")
    record = json.loads(record_path.read_text())
    assert record["choice"] == choice and record["parity_max_abs_diff"] <= autotune.PARITY_TOLERANCE
    assert set(record["spearman"]) == {"onnx-fp32", "int8"} | OPENVINO and {"fp32", "onnx-fp32"} <= set(record["seconds_batched"])
    assert record["probe"] == "first 500 pairs of LCQMC valid"
    # another model with the same weights reads the recorded choice: nothing is measured again
    twin = zoo.SentenceEncoder.from_config(encoder.get_config())
    twin.set_weights(encoder.get_weights())
    twin.tokenizer = TOKENIZER
    monkeypatch.setattr(autotune, "measure", lambda model: pytest.fail("measured again"))
    np.testing.assert_array_equal(twin.encode(TEXTS, engine="fastest"), vectors)
    # new weights: new graphs (the runners follow), measured again
    encoder.set_weights([w + 0.05 for w in encoder.get_weights()])
    with pytest.raises(pytest.fail.Exception, match="measured again"):
        encoder.encode(TEXTS, engine="fastest")
    np.testing.assert_allclose(encoder.encode(TEXTS, engine="onnx-fp32"), encoder.encode(TEXTS, engine="fp32"),
                               atol=TOLERANCE)
    assert len(list(fresh_graph_cache.glob("onnx/*/info.json"))) == 2


def test_auto_rules(monkeypatch):
    encoder = tiny_encoder(seed=5)  # a random model: its probe Spearman moves by tenths for a 1e-4 cosine change
    record = autotune.measure(encoder)
    # int8 is close on the probe: all are timed (OpenVINO's int8 too where it is installed)
    assert all(record["spearman"]["onnx-fp32"] - s <= autotune.MAX_SPEARMAN_LOSS for s in record["spearman"].values())
    assert set(record["seconds_batched"]) == {"fp32", "onnx-fp32", "int8"} | OPENVINO
    # bulk work decides: the fastest in batches of 64; one row at a time is measured and reported
    assert record["choice"] == min(record["seconds_batched"], key=record["seconds_batched"].get)
    assert record["rule"] == autotune.DECISION_RULE and "one row at a time, reported only" in record["reason"]
    assert record["single_rows"] == min(autotune.PROBE_SINGLE_ROWS, record["timed_rows"]) > 0
    assert all(record["seconds_batched"][p] > 0 and record["seconds_single"][p] > 0 for p in record["seconds_batched"])
    monkeypatch.setattr(autotune, "MAX_SPEARMAN_LOSS", -1.0)  # int8 always loses too much: a float path
    record = autotune.measure(encoder)
    assert "int8" not in record["seconds_batched"] and record["choice"] in ("fp32", "onnx-fp32"), record
    assert "openvino-int8" not in record["seconds_batched"]
    monkeypatch.setattr(autotune, "PARITY_TOLERANCE", -1.0)  # the graph never matches Keras: Keras itself
    assert autotune.measure(encoder)["choice"] == "fp32"
    monkeypatch.setattr(autotune, "probe_pairs", lambda: None)  # no labelled probe (a wheel): int8 unmeasured
    monkeypatch.setattr(autotune, "PARITY_TOLERANCE", 1e-4)
    record = autotune.measure(encoder)
    assert set(record["seconds_batched"]) == {"fp32", "onnx-fp32"} and "int8 not measured" in record["reason"]

    def fresh():  # a model auto has not decided for yet
        inference.forget(encoder)
        return inference.choose(encoder)

    monkeypatch.setenv("ZOO_PRECISION", "int8")
    assert fresh() == "int8"
    monkeypatch.setenv("ZOO_PRECISION", "fp64")
    with pytest.raises(ValueError, match="ZOO_PRECISION must be one of"):
        fresh()
    monkeypatch.delenv("ZOO_PRECISION")
    monkeypatch.setattr(autotune, "accelerator", lambda: "GPU")
    assert fresh() == "fp32"
    monkeypatch.setattr(autotune, "accelerator", lambda: None)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    assert fresh() == "fp32"
    with pytest.raises(ImportError, match=r"pip install 'zoo\[onnx\]'"):
        encoder.encode(TEXTS, engine="int8")


def test_fastest_is_decided_by_bulk_work_not_by_single_rows(monkeypatch):
    """A path fast in batches but slow one row at a time (openvino-int8 on a VNNI CPU) is fastest's choice: bulk
    work (encode, index builds, the Ray path) never pays for a latency it does not have."""
    encoder = tiny_encoder(seed=5)
    real = type(encoder).predict_rows
    bulk_delay = {"fp32": 0.5, "onnx-fp32": 0.25, "int8": 0.0, "openvino-int8": 0.4}  # seconds per batched call
    single_delay = {"int8": 0.008}  # per row: 64 rows cost int8 ~0.5 s, more than onnx-fp32's whole batches

    def timed(self, rows, *args, precision="fp32", **kwargs):
        time.sleep(bulk_delay.get(precision, 0.0) if len(rows) > 1 else single_delay.get(precision, 0.0))
        return real(self, rows, *args, precision=precision, **kwargs)

    monkeypatch.setattr(type(encoder), "predict_rows", timed)
    record = autotune.measure(encoder)
    assert "int8" in record["seconds_batched"], record  # int8 qualified on quality
    assert record["seconds_single"]["int8"] > record["seconds_single"]["onnx-fp32"]  # slower one row at a time
    assert record["choice"] == "int8", record


def test_remeasure_replaces_the_recorded_choice(fresh_graph_cache, monkeypatch, tmp_path, capsys):
    """A recorded choice is read, not measured again, until ``remeasure`` (``zoo encode --remeasure``) measures anew;
    the record's key holds the CPU's instruction sets."""
    encoder = tiny_encoder(seed=5)
    calls, real = [], autotune.measure
    monkeypatch.setattr(autotune, "measure", lambda model: calls.append(1) or real(model))
    inference.choose(encoder, "fastest")
    inference.forget(encoder)
    inference.choose(encoder, "fastest")
    assert len(calls) == 1
    inference.remeasure(encoder)
    assert len(calls) == 2 and len(list(fresh_graph_cache.glob("onnx/fastest/*.json"))) == 1
    from zoo.hardware import instruction_sets

    assert " ".join(instruction_sets()) in autotune.machine_id() and instruction_sets(set()) == []
    assert autotune.record_path(encoder, "x86_64 same name (avx2 fma)") != autotune.record_path(
        encoder, "x86_64 same name (avx2 avx512_vnni fma)")  # another CPU kind: another record
    (tmp_path / "in.txt").write_text("你好\n", encoding="utf-8")
    assert zoo.cli.main(["encode", "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "v.npy"),
                         "--remeasure"]) == 2
    assert "--remeasure is for precision 'fastest'" in capsys.readouterr().err


def test_fastest_for_a_cross_encoder_scores_the_probe_pairs(fresh_graph_cache):
    scorer = zoo.CrossEncoder(tiny_backbone(seed=8), TOKENIZER, head="cosent", maxlen=32)
    pairs = [(a, b) for a, b in zip(TEXTS, TEXTS[::-1]) if a and b]
    scores = scorer.score(pairs, engine="fastest")  # measured on the probe pairs, recorded
    [info] = fresh_graph_cache.glob("onnx/fastest/*.json")
    record = json.loads(info.read_text())
    assert record["parity_max_abs_diff"] <= TOLERANCE and set(record["spearman"]) == {"onnx-fp32", "int8"} | OPENVINO
    assert record["choice"] == min(record["seconds_batched"], key=record["seconds_batched"].get)
    np.testing.assert_array_equal(scores, scorer.score(pairs, engine=record["choice"]))


def test_a_damaged_cache_is_rebuilt(fresh_graph_cache, caplog):
    encoder = tiny_encoder(seed=5)
    want = encoder.encode(TEXTS, engine="int8")
    [folder] = [p.parent for p in fresh_graph_cache.glob("onnx/*/info.json")]
    damaged = folder / graphs.ONNX_FILES["int8"]
    damaged.write_bytes(damaged.read_bytes()[:-100])  # truncated
    inference.forget(encoder)
    with caplog.at_level(logging.WARNING, logger="zoo"):
        np.testing.assert_array_equal(encoder.encode(TEXTS, engine="int8"), want)
    assert "damaged ONNX cache, rebuilt" in caplog.text and "model.int8.onnx" in caplog.text
    (folder / graphs.CACHE_INFO).write_text("{not json", encoding="utf-8")
    inference.forget(encoder)
    np.testing.assert_array_equal(encoder.encode(TEXTS, engine="int8"), want)
    assert json.loads((folder / graphs.CACHE_INFO).read_text())["format"] == "zoo-fused-onnx"


# ---------------------------------------------------------------------------------- served ONNX exports
@pytest.mark.slow
def test_an_onnx_export_is_served_like_the_saved_model(tmp_path):
    """`zoo export --format onnx` (fp32) served by zoo serve: REST and gRPC answers, the tokenize and ids
    signatures and the metadata as for the SavedModel of the same model; bad ids get 400."""
    require_module("tensorflow_serving.apis", "pip install tensorflow-serving-api")
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    import grpc
    from helpers import predict, request
    from zoo.cli import main as cli
    from zoo.serving import ModelServer

    encoder = tiny_encoder(seed=6, pooling="cls")
    encoder.save(str(tmp_path / "enc.keras"))
    for fmt in ("saved_model", "onnx"):
        assert cli(["export", "--model", str(tmp_path / "enc.keras"), "--output", str(tmp_path / fmt), "--format", fmt,
                    "--quantize", "none"]) == 0
    manifest = json.loads((tmp_path / "onnx" / "default" / "1" / "zoo_manifest.json").read_text())
    assert manifest["format"] == "zoo-onnx" and manifest["precision"] == "onnx-fp32"
    answers = {}
    for fmt in ("saved_model", "onnx"):
        with ModelServer(tmp_path / fmt / "default", port=0, grpc_port=0, max_chars=2000, long_text="truncate") as server:
            status, rows = predict(server, {"instances": TEXTS})
            assert status == 200, rows
            status, ids = predict(server, {"inputs": TEXTS, "signature_name": "tokenize"})
            status, from_ids = predict(server, {"inputs": ids["outputs"], "signature_name": "ids"})
            assert status == 200, from_ids
            stub = prediction_service_pb2_grpc.PredictionServiceStub(
                grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))
            req = predict_pb2.PredictRequest()
            req.model_spec.name = "default"
            req.inputs["text"].CopyFrom(tf.make_tensor_proto(TEXTS))
            reply = stub.Predict(req, timeout=60)
            status, meta = request(server, "GET", "/v1/models/default/metadata")
            bad = predict(server, {"inputs": {"token_ids": [[99999]], "segment_ids": [[0]], "padding_mask": [[1]]},
                                   "signature_name": "ids"})
            answers[fmt] = {"rows": np.array(rows["predictions"], "float32"), "ids": ids["outputs"],
                            "from_ids": np.array(from_ids["outputs"], "float32"),
                            "grpc": tf.make_ndarray(reply.outputs["embedding"]),
                            "signature": reply.model_spec.signature_name,
                            "meta": meta["metadata"]["signature_def"]["signature_def"], "bad": bad}
    saved, served = answers["saved_model"], answers["onnx"]
    for key in ("rows", "from_ids", "grpc"):
        np.testing.assert_allclose(served[key], saved[key], atol=TOLERANCE, err_msg=key)
    np.testing.assert_allclose(served["rows"], encoder.encode(TEXTS, engine="fp32"), atol=TOLERANCE)
    assert served["ids"] == saved["ids"] and served["signature"] == saved["signature"] == "serving_default"
    assert set(served["meta"]) == set(saved["meta"]) - {"__saved_model_init_op"} == {"serving_default", "text", "ids",
                                                                                      "tokenize"}
    assert served["meta"]["serving_default"]["inputs"]["text"]["dtype"] == "DT_STRING"
    assert served["meta"]["text"]["outputs"]["embedding"]["tensorShape"] == \
        saved["meta"]["text"]["outputs"]["embedding"]["tensorShape"]
    assert served["bad"][0] == saved["bad"][0] == 400 and "99999" in served["bad"][1]["error"]


def test_an_int8_onnx_export_of_a_cross_encoder_is_served(tmp_path):
    from helpers import predict
    from zoo.export.onnx import export_onnx_folder
    from zoo.serving import ModelServer

    scorer = zoo.CrossEncoder(tiny_backbone(seed=7), TOKENIZER, head="softmax", maxlen=24)
    export_onnx_folder(scorer, tmp_path / "pair" / "1", quantize="int8")
    products = weight_products(tmp_path / "pair" / "1" / "model.onnx")
    assert products and all(products.values()), products
    pairs = [(a, b) for a, b in zip(TEXTS, TEXTS[::-1]) if a and b]
    with ModelServer(tmp_path / "pair", port=0, long_text="truncate") as server:  # TEXTS' long pair: cut
        status, reply = predict(server, {"instances": [{"text_a": a, "text_b": b} for a, b in pairs]})
    assert status == 200, reply
    want = scorer.score(pairs, engine="fp32")
    got = np.array(reply["predictions"], "float32")
    assert np.abs(got - want).max() < 0.02 and not np.allclose(got, want, atol=1e-6)
