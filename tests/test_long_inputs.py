"""Inputs over a served model's limit are never cut silently (zoo.serving.lengths): /v1/embeddings, TF Serving's
predict (REST and gRPC) and /rerank refuse them with an error naming the length and the limit, cut them when the
request (or the server's --long-text truncate) asks, and --long-text chunk embeds them as encode(long_text="chunk")
does; /v1/models shows the limit and usage counts the tokens embedded. A SavedModel export, an ONNX export and a
preset served with Keras, side by side."""

import http.client
import json
import os

import keras
import numpy as np
import pytest

import zoo
from helpers import require_module, tiny_sentence_encoder
from zoo.export.onnx import export_onnx_folder
from zoo.export.saved_model import export_saved_model
from zoo.serving import ModelServer

pytestmark = pytest.mark.slow  # exports models and starts servers

SHORT = ["今天天气很好", "我们在中国"]
LONG = "今天天气很好" * 5 + "他说你是谁我不知道" * 6  # 84 pieces, over the tiny models' maxlen (32); its first
# window differs from the rest, so that its chunked vector is not the cut text's
TEXTS = [SHORT[0], LONG, SHORT[1]]


def tokens(models, texts):
    """Each text's tokens before any cut: [CLS] pieces [SEP]."""
    return [len(p) + 2 for p in models["encoder"].tokenizer.piece_ids(texts)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    require_module("onnxruntime", "pip install 'zoo[onnx]'")
    base = tmp_path_factory.mktemp("long")
    encoder = tiny_sentence_encoder(seed=5)
    encoder.max_input_tokens = 64  # weights good for longer inputs than maxlen: every path still cuts at maxlen
    keras.utils.set_random_seed(6)
    tok = encoder.tokenizer
    cross = zoo.CrossEncoder(zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=64, dropout=0.0),
                             tok, head="softmax", maxlen=24)
    export_saved_model(encoder, base / "saved" / "1")
    export_onnx_folder(encoder, base / "onnx" / "1")
    export_saved_model(cross, base / "ce" / "1")
    encoder.save_to_preset(base / "preset")
    return {"base": base, "encoder": encoder, "cross": cross}


def sources(models):
    base = models["base"]
    return {"saved": base / "saved", "onnx": base / "onnx", "preset": base / "preset", "ce": base / "ce"}


@pytest.fixture(scope="module")
def refusing(models):
    with ModelServer(models=sources(models), port=0, grpc_port=0, poll_seconds=0) as server:
        yield server


@pytest.fixture(scope="module")
def chunking(models):
    with ModelServer(models=sources(models), port=0, poll_seconds=0, long_text="chunk") as server:
        yield server


def call(server, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=60)
    try:
        conn.request("POST" if body is not None else "GET", path, body=None if body is None else json.dumps(body))
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


ENCODERS = ("saved", "onnx", "preset")


@pytest.mark.parametrize("name", ENCODERS)
def test_embeddings_refuse_an_overlong_input_naming_its_length_and_the_limit(refusing, models, name):
    status, reply = call(refusing, "/v1/embeddings", {"model": name, "input": TEXTS})
    assert status == 400, reply
    error = reply["error"]
    assert (error["param"], error["code"], error["type"]) == ("input", "context_length_exceeded",
                                                               "invalid_request_error")
    n = tokens(models, [LONG])[0]
    assert n > 32 and f"'input'[1] has {n} tokens" in error["message"] and "at most 32 tokens" in error["message"]
    assert '"truncate": true' in error["message"] and "long_text='chunk'" in error["message"]  # a Python server
    status, reply = call(refusing, "/v1/embeddings", {"model": name, "input": SHORT})  # inputs that fit: served
    assert status == 200 and reply["usage"]["prompt_tokens"] == sum(tokens(models, SHORT))


@pytest.mark.parametrize("name", ENCODERS)
def test_truncate_true_cuts_as_encode_does_and_usage_counts_the_tokens_kept(refusing, models, name):
    status, reply = call(refusing, "/v1/embeddings", {"model": name, "input": TEXTS, "truncate": True})
    assert status == 200, reply
    got = np.array([d["embedding"] for d in reply["data"]], "float32")
    np.testing.assert_allclose(got, models["encoder"].encode(TEXTS), atol=1e-5)
    assert reply["usage"]["prompt_tokens"] == sum(tokens(models, SHORT)) + 32


@pytest.mark.parametrize("name", ENCODERS)
def test_long_text_chunk_embeds_windows_exactly_as_encode(chunking, models, name):
    status, reply = call(chunking, "/v1/embeddings", {"model": name, "input": TEXTS})
    assert status == 200, reply
    got = np.array([d["embedding"] for d in reply["data"]], "float32")
    want = models["encoder"].encode(TEXTS, long_text="chunk")
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.abs(got[1] - models["encoder"].encode(LONG)).max() > 1e-3  # not the cut text's vector
    from zoo.tokenizer.wordpiece import chunk_pieces

    windows, _, _ = chunk_pieces(models["encoder"].tokenizer.piece_ids([LONG]), 30)  # the rows embedded
    assert len(windows) > 1
    assert reply["usage"]["prompt_tokens"] == sum(tokens(models, SHORT)) + sum(len(w) + 2 for w in windows)
    status, reply = call(chunking, "/v1/embeddings", {"model": name, "input": TEXTS, "truncate": True})
    np.testing.assert_allclose(np.array([d["embedding"] for d in reply["data"]]), models["encoder"].encode(TEXTS),
                               atol=1e-5)


def test_models_show_each_limit_and_no_path(refusing, models):
    """One maxlen per model (its ``maxlen``, not the longer ``max_input_tokens`` its weights were trained for); a
    model is named by its name, version and sha256, never by where its files lie."""
    status, reply = call(refusing, "/v1/models", None)
    assert status == 200
    limits = {m["id"]: m["zoo"]["max_input_tokens"] for m in reply["data"]}
    assert limits == {"saved": 32, "onnx": 32, "preset": 32, "ce": 24}
    assert str(models["base"]) not in json.dumps(reply) and os.sep + "tmp" not in json.dumps(reply)
    described = {m["id"]: m["zoo"] for m in reply["data"]}
    assert {described[n]["version"] for n in ("saved", "onnx", "ce")} == {1} and described["preset"]["version"] is None
    assert all(len(d["sha256"]) == 64 for d in described.values()), described
    for name in ("preset", "nothing"):  # TF Serving's API on a Keras model, or a model it does not serve
        status, reply = call(refusing, f"/v1/models/{name}/metadata", None)
        assert status == 404 and str(models["base"]) not in json.dumps(reply), reply


@pytest.mark.parametrize("name", ("saved", "onnx"))
def test_tf_serving_predict_refuses_over_rest_and_grpc(refusing, models, name):
    n = tokens(models, [LONG])[0]
    status, reply = call(refusing, f"/v1/models/{name}:predict", {"instances": TEXTS})
    assert status == 400 and f"input 'text'[1] has {n} tokens" in reply["error"], reply
    assert "long_text='truncate' or 'chunk'" in reply["error"]
    status, reply = call(refusing, f"/v1/models/{name}:predict", {"instances": SHORT})
    np.testing.assert_allclose(reply["predictions"], models["encoder"].encode(SHORT), atol=1e-5)

    grpc = require_module("grpc", "pip install 'zoo[serve]'")
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    stub = prediction_service_pb2_grpc.PredictionServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{refusing.grpc_port}"))
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(np.array([t.encode() for t in TEXTS], object)))
    with pytest.raises(grpc.RpcError) as error:
        stub.Predict(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and f"{n} tokens" in error.value.details()


def test_predict_under_chunk_and_truncate(chunking, models, tmp_path):
    status, reply = call(chunking, "/v1/models/saved:predict", {"instances": TEXTS})
    assert status == 200, reply
    np.testing.assert_allclose(reply["predictions"], models["encoder"].encode(TEXTS, long_text="chunk"), atol=1e-5)
    with ModelServer(models={"saved": models["base"] / "saved"}, port=0, poll_seconds=0,
                     long_text="truncate") as cutting:
        status, reply = call(cutting, "/v1/models/saved:predict", {"instances": TEXTS})
    assert status == 200
    np.testing.assert_allclose(reply["predictions"], models["encoder"].encode(TEXTS), atol=1e-5)


def test_rerank_refuses_an_overlong_pair_unless_truncate(refusing, chunking, models):
    body = {"model": "ce", "query": "天气", "texts": TEXTS}
    for server in (refusing, chunking):  # a pair is never chunked
        status, reply = call(server, "/rerank", body)
        assert status == 413 and reply["error_type"] == "Validation", reply
        assert "texts[1]" in reply["error"] and "at most 24" in reply["error"] and '"truncate": true' in reply["error"]
    status, reply = call(refusing, "/rerank", {**body, "truncate": True})
    assert status == 200, reply
    scores = models["cross"].score([("天气", t) for t in TEXTS])
    np.testing.assert_allclose([r["score"] for r in sorted(reply, key=lambda r: r["index"])], scores, atol=1e-5)


def test_zoo_encode_logs_how_many_inputs_were_cut(models, tmp_path, caplog):
    from zoo.jobs.encode import EncodeConfig, run

    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    with caplog.at_level("INFO", logger="zoo"):
        run(EncodeConfig(model=str(models["base"] / "preset"), input=str(tmp_path / "in.txt"),
                         output=str(tmp_path / "out.npy")))
    assert "1 of 3 inputs were longer than 32 tokens and were cut" in caplog.text, caplog.text
    assert json.loads((tmp_path / "out.npy.json").read_text())["inputs_over_maxlen"] == 1


def test_models_state_the_longest_input_they_were_trained_for(tmp_path):
    """A preset records max_input_tokens (the shipped ones: their backbone's pretraining length, above the 64 their
    figures were measured at); a model built on a preset's backbone keeps it; exports default to maxlen, as
    encode() does (one length per model)."""
    import json as json_

    from zoo.export.exportable import load_exportable
    from zoo.paths import resolve

    with open(os.path.join(resolve("zoo-embed-zh-L4"), "zoo_config.json"), encoding="utf-8") as f:
        recorded = json_.load(f)["metadata"]
    shipped = zoo.SentenceEncoder.from_preset("zoo-embed-zh-L4")
    assert shipped.max_input_tokens == recorded["max_input_tokens"] > shipped.maxlen
    built = zoo.SentenceEncoder.from_preset(zoo.DEFAULT_PRESET, pooling="mean")
    assert built.max_input_tokens == shipped.max_input_tokens
    built.save_to_preset(tmp_path / "mine")
    assert zoo.SentenceEncoder.from_preset(tmp_path / "mine").max_input_tokens == shipped.max_input_tokens
    assert load_exportable("zoo-embed-zh-L4").maxlen == shipped.maxlen
    assert load_exportable("zoo-embed-zh-L4", maxlen=48).maxlen == 48
    tiny = tiny_sentence_encoder()
    assert tiny.max_input_tokens == tiny.maxlen
