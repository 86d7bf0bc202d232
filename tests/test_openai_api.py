"""zoo serve's APIs for retrieval stacks: OpenAI's embeddings (driven by the official ``openai`` client),
text-embeddings-inference's rerank, /v1/search over an index, SimBERT paraphrases, the API key, and their errors;
an encoder export, a cross-encoder export and a cross-encoder and a SimBERT served from presets, side by side."""

import base64

import keras
import numpy as np
import pytest

import zoo
from helpers import KEY, call
from helpers import require_module, tiny_sentence_encoder
from zoo.export.saved_model import export_saved_model
from zoo.retrieval.base import SemanticIndex
from zoo.serving import ModelServer, ServeConfig

pytestmark = pytest.mark.slow  # exports four models and starts servers

openai = require_module("openai", "pip install openai")

TEXTS = ["今天天气很好", "", "hello world", "他说：你是谁？我不知道。", "我们在中国" * 30, "好"]
CORPUS = ["今天天气很好", "明天天气不好", "我们在中国", "他是谁", "你好世界", "中国人民", "天气预报说明天下雨",
          "我不知道他说什么", "好的好的", "大家都来了"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("api")
    encoder = tiny_sentence_encoder(seed=3)
    tok = encoder.tokenizer
    keras.utils.set_random_seed(4)
    softmax = zoo.CrossEncoder(zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=64, dropout=0.0),
                               tok, head="softmax", maxlen=24)
    cosent = zoo.CrossEncoder(zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=64, dropout=0.0),
                              tok, head="cosent", maxlen=24)
    simbert = zoo.SimBERT(zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=64, dropout=0.0,
                                           with_mlm=True, pooler_activation="linear"), tok, maxlen=16)
    export_saved_model(encoder, base / "enc" / "1")
    export_saved_model(softmax, base / "ce" / "1")
    cosent.save_to_preset(base / "cosent")
    simbert.save_to_preset(base / "sim")
    index = SemanticIndex(encoder)
    index.add(CORPUS, ids=[f"doc{i}" for i in range(len(CORPUS))])
    index.save(base / "index")
    return {"base": base, "encoder": encoder, "softmax": softmax, "cosent": cosent, "index": index}


@pytest.fixture(scope="module")
def server(models):
    base = models["base"]
    sources = {"enc": base / "enc", "ce": base / "ce", "cosent": base / "cosent", "sim": base / "sim"}
    with ModelServer(models=sources, port=0, grpc_port=0, api_key=KEY, index=base / "index", max_request_batch=16,
                     max_chars=200, poll_seconds=0) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=60)




def test_openai_client_embeddings_equal_encode(client, models):
    encoder = models["encoder"]
    expected = encoder.encode(TEXTS)
    # the client asks for base64 and decodes it; "truncate": TEXTS' 150-character text is cut as encode cuts it
    # (without it the input is refused: tests/test_long_inputs.py)
    reply = client.embeddings.create(model="enc", input=TEXTS, extra_body={"truncate": True})
    got = np.array([d.embedding for d in reply.data], "float32")
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [d.index for d in reply.data] == list(range(len(TEXTS))) and reply.model == "enc"
    tokens = int(encoder.tokenizer(TEXTS, maxlen=encoder.maxlen)["padding_mask"].sum())
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == tokens
    as_floats = client.embeddings.create(model="enc", input=TEXTS, encoding_format="float",
                                         extra_body={"truncate": True})
    np.testing.assert_allclose([d.embedding for d in as_floats.data], expected, atol=1e-5)
    one = client.embeddings.create(model="enc", input="今天天气很好", dimensions=8)
    np.testing.assert_allclose(one.data[0].embedding, encoder.encode(["今天天气很好"], truncate_dim=8)[0], atol=1e-5)
    assert abs(np.linalg.norm(one.data[0].embedding) - 1) < 1e-5


def test_base64_is_little_endian_float32(server, models):
    status, reply = call(server, "POST", "/v1/embeddings", {"model": "enc", "input": ["你好"], "encoding_format":
                                                            "base64"})
    assert status == 200, reply
    vector = np.frombuffer(base64.b64decode(reply["data"][0]["embedding"]), "<f4")
    np.testing.assert_allclose(vector, models["encoder"].encode(["你好"])[0], atol=1e-5)


def test_models_lists_every_served_name(client, server):
    listed = {m.id: m for m in client.models.list().data}
    assert sorted(listed) == ["ce", "cosent", "enc", "sim"]
    status, reply = call(server, "GET", "/v1/models")
    kinds = {m["id"]: (m["zoo"]["kind"], m["zoo"]["head"], m["zoo"]["paraphrases"]) for m in reply["data"]}
    assert kinds == {"enc": ("embedding", None, False), "ce": ("cross-encoder", "softmax", False),
                     "cosent": ("cross-encoder", "cosent", False), "sim": ("embedding", None, True)}
    assert reply["index"] == {"texts": len(CORPUS), "dim": 32, "model": None, "encoder": "enc"}


def test_api_key_is_checked_on_every_endpoint(server, client):
    bad = openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.embeddings.create(model="enc", input="你好")
    for method, path, body in (("POST", "/v1/embeddings", {"model": "enc", "input": "x"}),
                               ("GET", "/v1/models", None), ("POST", "/v1/search", {"query": "x"}),
                               ("POST", "/v1/paraphrases", {"text": "x"})):
        status, reply = call(server, method, path, body, key=None)
        assert status == 401 and reply["error"]["code"] == "invalid_api_key", (path, reply)
    status, reply = call(server, "POST", "/rerank", {"query": "x", "texts": ["y"]}, key="wrong")
    assert status == 401 and set(reply) == {"error", "error_type"}
    status, reply = call(server, "POST", "/v1/models/enc:predict", {"instances": ["x"]}, key=None)
    assert status == 401 and "API key" in reply["error"]
    assert call(server, "POST", "/v1/models/enc:predict", {"instances": ["x"]})[0] == 200

    grpc = require_module("grpc", "pip install grpcio")
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "enc"
    req.inputs["text"].CopyFrom(tf.make_tensor_proto(["你好"]))
    with pytest.raises(grpc.RpcError) as error:
        stub.Predict(req, timeout=30)
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert stub.Predict(req, timeout=30, metadata=[("authorization", f"Bearer {KEY}")]).outputs["embedding"]


BAD_EMBEDDINGS = [
    ({"input": "x"}, "model", 400),
    ({"model": "enc"}, "input", 400),
    ({"model": "nope", "input": "x"}, "model", 404),
    ({"model": "ce", "input": "x"}, "model", 400),
    ({"model": "enc", "input": []}, "input", 400),
    ({"model": "enc", "input": [1, 2, 3]}, "input", 400),
    ({"model": "enc", "input": [[1, 2]]}, "input", 400),
    ({"model": "enc", "input": ["a", None]}, "input", 400),
    ({"model": "enc", "input": ["a"] * 17}, "input", 400),
    ({"model": "enc", "input": "长" * 201}, "input", 400),
    ({"model": "enc", "input": "x", "encoding_format": "int8"}, "encoding_format", 400),
    ({"model": "enc", "input": "x", "dimensions": 0}, "dimensions", 400),
    ({"model": "enc", "input": "x", "dimensions": 33}, "dimensions", 400),
    ({"model": "enc", "input": "x", "dimensions": True}, "dimensions", 400),
    ({"model": "enc", "input": "x", "temperature": 1}, "temperature", 400),
    (b'{"model": "enc", "input": "\\ud800"}', "input", 400),
    (b'{"model": "enc", "input": ', None, 400),
    ([1, 2], None, 400),
]


@pytest.mark.parametrize("body, param, status", BAD_EMBEDDINGS, ids=[str(b)[:40] for b, *_ in BAD_EMBEDDINGS])
def test_bad_embedding_requests_get_openai_errors(server, body, param, status):
    got, reply = call(server, "POST", "/v1/embeddings", body)
    assert got == status, reply
    assert set(reply) == {"error"} and set(reply["error"]) == {"message", "type", "param", "code"}, reply
    assert reply["error"]["param"] == param and reply["error"]["message"], reply
    assert call(server, "POST", "/v1/embeddings", {"model": "enc", "input": "还在吗"})[0] == 200


def test_openai_client_raises_on_bad_requests(client):
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="nope", input="x")
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        client.embeddings.create(model="enc", input="x", dimensions=1000)


def test_rerank_matches_cross_encoder_predict(server, models):
    query, texts = "今天天气很好", ["明天天气不好", "我们在中国", "你好世界", "天气预报说明天下雨"]
    pairs = [(query, t) for t in texts]
    status, reply = call(server, "POST", "/rerank", {"model": "ce", "query": query, "texts": texts,
                                                     "return_text": True})
    assert status == 200, reply
    p = models["softmax"].score(pairs)
    assert [r["index"] for r in reply] == list(np.argsort(-p, kind="stable"))
    np.testing.assert_allclose([r["score"] for r in reply], np.sort(p)[::-1], atol=1e-5)
    assert [r["text"] for r in reply] == [texts[r["index"]] for r in reply]
    status, raw = call(server, "POST", "/rerank", {"model": "ce", "query": query, "texts": texts, "raw_scores": True})
    logits = models["softmax"].predict({k: np.asarray(v) for k, v in models["softmax"].tokenizer(
        [a for a, _ in pairs], [b for _, b in pairs], maxlen=24).items()}, verbose=0)
    np.testing.assert_allclose(sorted(r["score"] for r in raw), sorted(logits[:, 1] - logits[:, 0]), atol=1e-4)
    assert "text" not in raw[0]
    # a cosent head served from its preset: raw scores are predict's, the default their sigmoid
    s = models["cosent"].score(pairs)
    status, raw = call(server, "POST", "/rerank", {"model": "cosent", "query": query, "texts": texts,
                                                   "raw_scores": True})
    np.testing.assert_allclose([r["score"] for r in raw], np.sort(s)[::-1], atol=1e-5)
    status, default = call(server, "POST", "/rerank", {"model": "cosent", "query": query, "texts": texts})
    np.testing.assert_allclose([r["score"] for r in default], 1 / (1 + np.exp(-np.sort(s)[::-1])), atol=1e-5)
    status, first = call(server, "POST", "/rerank", {"query": query, "texts": texts})  # the first cross-encoder
    assert first == [{k: r[k] for k in ("index", "score")} for r in reply]


BAD_RERANKS = [
    ({"texts": ["a"]}, 422),
    ({"query": "a"}, 422),
    ({"query": "", "texts": ["a"]}, 422),
    ({"query": "a", "texts": []}, 422),
    ({"query": "a", "texts": ["b", ""]}, 422),
    ({"query": "a", "texts": ["b"] * 17}, 422),
    ({"query": "a", "texts": ["b"], "raw_scores": "yes"}, 422),
    ({"query": "a", "texts": ["b"], "truncation_direction": "Left"}, 422),
    ({"query": "a", "texts": ["b"], "model": "enc"}, 422),
    ({"query": "a", "texts": ["b"], "model": "nope"}, 404),
    ({"query": "a", "texts": ["b"], "top_n": 1}, 422),
    (b"{", 422),
]


@pytest.mark.parametrize("body, status", BAD_RERANKS, ids=[str(b)[:40] for b, _ in BAD_RERANKS])
def test_bad_rerank_requests_get_tei_errors(server, body, status):
    got, reply = call(server, "POST", "/rerank", body)
    assert got == status and set(reply) == {"error", "error_type"} and reply["error"], reply
    assert call(server, "POST", "/rerank", {"query": "a", "texts": ["b"]})[0] == 200


def test_search_answers_as_the_index(server, models):
    index = models["index"]
    status, reply = call(server, "POST", "/v1/embeddings", {"model": "enc", "input": ["明天天气"]})
    vector = np.array([reply["data"][0]["embedding"]], "float32")  # the export's (hybrid scores are min-max scaled)
    for mode in ("dense", "lexical", "hybrid"):
        status, reply = call(server, "POST", "/v1/search", {"query": "明天天气", "top_k": 4, "mode": mode})
        assert status == 200, reply
        expected = index.search(["明天天气"], topk=4, mode=mode, return_ids=True, query_vectors=vector)[0]
        assert [(h["id"], h["text"]) for h in reply["data"]] == [(i, t) for i, t, _ in expected], mode
        np.testing.assert_allclose([h["score"] for h in reply["data"]], [s for *_, s in expected], atol=1e-5)
    for body in ({"query": ""}, {"query": "x", "top_k": 0}, {"query": "x", "mode": "fuzzy"},
                 {"query": "x", "weight": 2}, {"query": "x", "filter": "lang == 'zh'"}, {"q": "x"}):
        status, reply = call(server, "POST", "/v1/search", body)
        assert status == 400 and reply["error"]["message"], (body, reply)


def test_paraphrases_from_a_served_simbert(server):
    status, reply = call(server, "POST", "/v1/paraphrases", {"model": "sim", "text": "今天天气很好", "n": 6, "k": 3,
                                                             "seed": 1})
    assert status == 200, reply
    assert len(reply["data"]) <= 3 and all(isinstance(p["text"], str) and p["text"] != "今天天气很好"
                                           for p in reply["data"])
    scores = [p["score"] for p in reply["data"]]
    assert scores == sorted(scores, reverse=True)
    for body in ({"model": "enc", "text": "x"}, {"model": "sim", "text": ""}, {"model": "sim", "text": "x", "n": 0},
                 {"model": "sim", "text": "x", "n": 2, "k": 3}):
        status, reply = call(server, "POST", "/v1/paraphrases", body)
        assert status == 400 and reply["error"]["message"], (body, reply)


def test_tf_serving_routes_serve_exports_side_by_side(server, models):
    status, reply = call(server, "POST", "/v1/models/ce:predict", {"instances": [{"text_a": "你好", "text_b": "您好"}]})
    assert status == 200
    np.testing.assert_allclose(reply["predictions"], models["softmax"].score([("你好", "您好")]), atol=1e-5)
    status, reply = call(server, "POST", "/v1/models/sim:predict", {"instances": ["你好"]})
    assert status == 404 and "zoo export" in reply["error"]


def test_serve_config_reads_names_and_paths(tmp_path):
    config = ServeConfig(model=("enc=exports/enc", "ce=zoo-embed-zh-L4"))
    assert config.models() == {"enc": "exports/enc", "ce": "zoo-embed-zh-L4"}
    assert ServeConfig(model="exports/default", name="tiny").models() == {"tiny": "exports/default"}
    odd = tmp_path / "a=b"
    odd.mkdir()
    assert ServeConfig(model=(str(odd),)).models() == {"default": str(odd)}  # an existing path is a path
    with pytest.raises(zoo.ConfigError, match="twice"):
        ServeConfig(model=("a=x", "a=y"))


def test_index_of_another_dimension_is_refused(models, tmp_path):
    other = SemanticIndex(dim=8)
    other.add(vectors=np.eye(8, dtype="float32"))
    other.save(tmp_path / "idx8")
    with pytest.raises(zoo.ConfigError, match="8-d vectors"):
        ModelServer(models["base"] / "enc", port=0, index=tmp_path / "idx8", poll_seconds=0).start()

