"""SavedModel / ONNX export: the in-graph tokenizer gives zoo.Tokenizer's ids, the exported model gives
SentenceEncoder.encode's embeddings, and `zoo export` writes TF Serving's <base>/<name>/<version> layout."""

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import torch_reference
import zoo
from helpers import tiny_sentence_encoder, BERT_VOCAB, require_module, require_shared, synthetic_vocab, weight_products
from zoo.cli import main as cli
from zoo.models.preprocessor import TextPreprocessor
from zoo.export.onnx import export_onnx
from zoo.export.saved_model import export_saved_model, keras_precision, quantized_copy
from zoo.export.exportable import load_exportable, version_path
from zoo.presets import save_preset

REPO = Path(__file__).resolve().parents[1]
LCQMC_TEST = REPO / "data" / "LCQMC" / "LCQMC.test.data.gz"
LONG = "我们在中国" * 400  # 2,000 characters: truncated to maxlen
TEXTS = ["今天天气很好", "", "hello world", "他说：你是谁？我不知道。", "HELLO Café ｂ１２", "[MASK]是[CLS]的", LONG,
         LONG[:30]]


@pytest.fixture(scope="module")
def encoder():
    return tiny_sentence_encoder(seed=0)


@pytest.fixture(scope="module")
def exported(encoder, tmp_path_factory):
    return export_saved_model(encoder, tmp_path_factory.mktemp("export") / "default" / "1")


LOAD_SCRIPT = """
import json, sys
import numpy as np, tensorflow as tf, tensorflow_text  # tf-text registers the tokenizer's ops
assert "zoo" not in sys.modules
path, texts = sys.argv[1], json.loads(sys.argv[2])
model = tf.saved_model.load(path)
out = {"signatures": sorted(model.signatures)}
out["default"] = model.signatures["serving_default"](text=tf.constant(texts))["embedding"].numpy().tolist()
ids = model.signatures["tokenize"](text=tf.constant(texts))
out["ids"] = {k: v.numpy().tolist() for k, v in ids.items()}
out["from_ids"] = model.signatures["ids"](**ids)["embedding"].numpy().tolist()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_saved_model_in_a_fresh_process_matches_encode(encoder, exported):
    """Loaded by plain TF (no zoo, no keras) in another process: same ids and embeddings as the encoder."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run([sys.executable, "-c", LOAD_SCRIPT, str(exported), json.dumps(TEXTS)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["signatures"] == ["ids", "serving_default", "text", "tokenize"]
    expected = encoder.encode(TEXTS)
    got = np.array(out["default"], "float32")
    assert got.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got[6], got[7], atol=1e-5)  # the overlong text keeps its first 30 pieces
    assert not np.allclose(got[0], got[1], atol=1e-3)
    want_ids = encoder.tokenizer(TEXTS, maxlen=32)
    for key, value in want_ids.items():
        np.testing.assert_array_equal(np.array(out["ids"][key]), value, err_msg=key)
    np.testing.assert_allclose(np.array(out["from_ids"]), expected, atol=1e-5)


def read_lcqmc_pairs():
    with gzip.open(LCQMC_TEST, "rt", encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t")[:2]) for line in f]


def test_ingraph_ids_equal_zoo_tokenizer_on_lcqmc():
    tok = zoo.Tokenizer(str(require_shared(BERT_VOCAB)))
    pairs = read_lcqmc_pairs()
    sentences = [s for pair in pairs for s in pair]
    assert len(sentences) == 25_000
    texts, pairs_of = TextPreprocessor(tok, maxlen=16), TextPreprocessor(tok, maxlen=16, texts=2)
    got = tf.function(texts.graph_tokenizer().pieces)(tf.constant(sentences)).to_list()
    pieces = tok.piece_ids(sentences)
    differ = [s for s, g, w in zip(sentences, got, pieces) if g != w]
    assert not differ, f"{len(differ)} of 25,000 sentences differ, e.g. {differ[:3]}"
    assert sum(len(p) > 14 for p in pieces) > 1000  # the truncation below is exercised
    # padded batches with truncation (5,000 pairs): singles keep the first 14 pieces, pairs follow bert4keras
    a, b = [p[0] for p in pairs[:5000]], [p[1] for p in pairs[:5000]]
    for got, want in [(tf.function(texts.call)(tf.constant(a + b)), tok(a + b, maxlen=16)),
                      (tf.function(pairs_of.call)(tf.constant(a), tf.constant(b)), tok(a, b, maxlen=16))]:
        for key in want:
            np.testing.assert_array_equal(got[key].numpy(), want[key], err_msg=key)


FUZZ_POOL = list("aAbBéÉçÇİıΣσς ﬁ\u0301\u0308\u0345\u0316\u200b\ufeff\u3000\t\n\x00\x7f\ufffd[]CLSEPMASKUNK") + [
    "[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]", "[MA", "SK]", "中国", "，", "。", "😀", "🥰", "\U0002B820", "\uf900",
    "\U0002F800", "x" * 101, "ab" * 60, "Straße", "ǅ", "ﾊﾟ", "１２３", "Ⅻ", "hello", "HELLO", "café", "##", "的"]


@pytest.mark.parametrize("lowercase", [True, False])
def test_ingraph_ids_on_every_character_class_and_fuzz(lowercase):
    """Code points in context (all of planes 0-1, a sample of the rest) and random mixes of the tricky ones:
    accents, casing, controls, NUL, zero-width, special tokens in the text, words over 100 characters."""
    tok = zoo.Tokenizer(zoo.Tokenizer.from_preset(zoo.DEFAULT_PRESET).vocab, do_lower_case=lowercase)
    graph = tf.function(TextPreprocessor(tok, maxlen=8).graph_tokenizer().pieces)
    if lowercase:
        code_points = [c for c in range(0x20000) if not 0xD800 <= c <= 0xDFFF] + list(range(0x20000, 0x110000, 31))
        texts = [f"ab{chr(c)}cd {chr(c)}" for c in code_points]
    else:
        texts = []
    rng = random.Random(0)
    texts += ["".join(rng.choice(FUZZ_POOL) for _ in range(rng.randint(0, 20))) for _ in range(5000)]
    got = graph(tf.constant(texts)).to_list()
    want = tok.piece_ids(texts)
    differ = [t for t, g, w in zip(texts, got, want) if g != w]
    assert not differ, f"{len(differ)} of {len(texts)} texts differ, e.g. {differ[:3]!r}"
    # pairs with tiny maxlen: the truncation floors ([CLS] a [SEP] keeps 2, b [SEP] keeps 1)
    a, b = texts[-400:-200], texts[-200:]
    pairs_of = TextPreprocessor(tok, maxlen=5, texts=2)
    for key, value in tok(a, b, maxlen=5).items():
        np.testing.assert_array_equal(pairs_of.call(tf.constant(a), tf.constant(b))[key].numpy(), value, err_msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("head,zero_segments", [("softmax", False), ("cosent", True)])
def test_cross_encoder_export(encoder, tmp_path, head, zero_segments):
    """A CrossEncoder exports text_a/text_b signatures that tokenize pairs like zoo.Tokenizer and give
    CrossEncoder.predict's scores (P(similar), or the raw CoSENT score; segments zeroed when configured)."""
    scorer = zoo.CrossEncoder(encoder.backbone, encoder.tokenizer, head=head, maxlen=12, zero_segments=zero_segments)
    model = tf.saved_model.load(export_saved_model(scorer, tmp_path / "pair" / "1"))
    nonempty = [t for t in TEXTS if t]  # predict() refuses empty texts
    a, b = nonempty, nonempty[::-1]
    ids = scorer.tokenizer(a, b, maxlen=12)
    tokenized = model.signatures["tokenize"](text_a=tf.constant(a), text_b=tf.constant(b))
    for key, value in ids.items():
        np.testing.assert_array_equal(tokenized[key].numpy(), value, err_msg=key)
    got = model.signatures["serving_default"](text_a=tf.constant(a), text_b=tf.constant(b))["score"].numpy()
    np.testing.assert_allclose(got, scorer.score(list(zip(a, b))), atol=1e-5)


def test_simbert_retrieval_head_export(tmp_path):
    keras.utils.set_random_seed(0)
    tok = zoo.Tokenizer(synthetic_vocab())
    bb = zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=64, dropout=0.0, with_mlm=True,
                          pooler_activation="linear")
    sim = zoo.SimBERT(bb, tok, maxlen=32)
    model = tf.saved_model.load(export_saved_model(sim, tmp_path / "sim" / "1"))
    got = model.signatures["serving_default"](text=tf.constant(TEXTS))["embedding"].numpy()
    np.testing.assert_allclose(got, sim.encode(TEXTS), atol=1e-5)


def test_ids_only_export_needs_no_tf_text(encoder, tmp_path):
    path = export_saved_model(encoder, tmp_path / "ids" / "1", signature="ids")
    assert b"Wordpiece" not in (Path(path) / "saved_model.pb").read_bytes()  # core TF ops only
    model = tf.saved_model.load(path)
    assert sorted(model.signatures) == ["ids", "serving_default"]
    ids = encoder.tokenizer(TEXTS, maxlen=32)
    got = model.signatures["serving_default"](**{k: tf.constant(v) for k, v in ids.items()})["embedding"]
    np.testing.assert_allclose(got.numpy(), encoder.encode(TEXTS), atol=1e-5)


def test_export_errors(encoder, exported, tmp_path, monkeypatch):
    with pytest.raises(FileExistsError):
        export_saved_model(encoder, exported)
    with pytest.raises(TypeError, match="no export recipe for a BertBackbone"):
        export_saved_model(encoder.backbone, tmp_path / "x")
    with pytest.raises(ValueError, match="above the model's 64 position"):
        export_saved_model(encoder, tmp_path / "x", maxlen=100)
    with pytest.raises(ValueError, match="signature must be"):
        export_saved_model(encoder, tmp_path / "x", signature="tokens")
    bare = zoo.SentenceEncoder(encoder.backbone, None, maxlen=32)
    with pytest.raises(ValueError, match="no tokenizer"):
        export_saved_model(bare, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'zoo\[onnx\]'"):
        export_onnx(encoder, tmp_path / "m.onnx")
    assert version_path(tmp_path, "m") == str(tmp_path / "m" / "1")
    (tmp_path / "m" / "7").mkdir(parents=True)
    assert version_path(tmp_path, "m") == str(tmp_path / "m" / "8")


def test_cli_export_checkpoint_keras_and_onnx(encoder, tmp_path, capsys):
    """A backbone preset exports as a 'cls' SentenceEncoder in <out>/default/1; a .keras SentenceEncoder with
    --format onnx as <out>/onnx/1/model.onnx (the fused graph, float32 unless --quantize asks) + vocab, checked with
    onnxruntime; the log and the manifest say which precision was written."""
    save_preset(encoder.backbone, encoder.tokenizer, tmp_path / "backbone")
    out = tmp_path / "models"
    assert cli(["export", "--model", str(tmp_path / "backbone"), "--output", str(out), "--maxlen", "32"]) == 0
    assert os.listdir(out / "default") == ["1"]
    model = tf.saved_model.load(str(out / "default" / "1"))
    got = model.signatures["serving_default"](text=tf.constant(TEXTS))["embedding"].numpy()
    np.testing.assert_allclose(got, encoder.encode(TEXTS), atol=1e-5)
    loaded = load_exportable(tmp_path / "backbone")
    assert isinstance(loaded, zoo.SentenceEncoder) and loaded.pooling == "cls"
    assert cli(["export", "--model", str(tmp_path / "nowhere"), "--output", str(out)]) == 2
    assert "nowhere" in capsys.readouterr().err

    ort = require_module("onnxruntime", "pip install 'zoo[onnx]'")
    encoder.save(str(tmp_path / "enc.keras"))
    capsys.readouterr()
    assert cli(["export", "--model", str(tmp_path / "enc.keras"), "--output", str(out), "--format", "onnx",
                "--name", "onnx"]) == 0
    folder = out / "onnx" / "1"
    assert "precision onnx-fp32" in capsys.readouterr().err
    assert json.loads((folder / "zoo_manifest.json").read_text())["precision"] == "onnx-fp32"
    assert not any(weight_products(folder / "model.onnx").values())  # nothing quantized
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["token_ids", "segment_ids", "padding_mask"]
    ids = zoo.Tokenizer.from_preset(folder)(TEXTS, maxlen=32)
    got = session.run(["embedding"], ids)[0]
    np.testing.assert_allclose(got, encoder.encode(TEXTS), atol=1e-5)


def test_export_quantize_int8_onnx_and_bf16_rules(encoder, tmp_path, capsys):
    """--quantize int8 writes the fused ONNX Runtime graph with every weight product in int8 (static QDQ: fixed,
    calibrated scales), close to fp32, and says so; bf16 is for SavedModels only."""
    ort = require_module("onnxruntime", "pip install 'zoo[onnx]'")
    import onnx

    encoder.save(str(tmp_path / "enc.keras"))
    out = tmp_path / "models"
    capsys.readouterr()
    assert cli(["export", "--model", str(tmp_path / "enc.keras"), "--output", str(out), "--format", "onnx",
                "--quantize", "int8"]) == 0
    assert "precision int8" in capsys.readouterr().err
    path = out / "default" / "1" / "model.onnx"
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"QuantizeLinear", "EmbedLayerNormalization"} <= ops and "Gemm" not in ops
    products = weight_products(path)
    assert len(products) >= 2 * 3 and all(products.values()), products  # per layer: output, FFN in and out
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(["embedding"], zoo.Tokenizer.from_preset(path.parent)(TEXTS, maxlen=32))[0]
    assert np.sum(got * encoder.encode(TEXTS), axis=1).min() > 0.99
    with pytest.raises(SystemExit):
        cli(["export", "--model", str(tmp_path / "enc.keras"), "--output", str(out), "--format", "onnx",
             "--quantize", "bf16"])
    assert "--quantize bf16 is for --format saved_model" in capsys.readouterr().err


def test_saved_model_records_its_precision(encoder, exported):
    """A SavedModel's manifest says what precision its answers have (``zoo serve`` shows it at /v1/models)."""
    assert json.loads((Path(exported) / "zoo_manifest.json").read_text())["precision"] == "fp32"
    assert keras_precision(encoder) == "fp32"
    assert keras_precision(quantized_copy(encoder, "int8")) == "int8"
    assert keras_precision(quantized_copy(encoder, "bf16")) == "bf16"


def test_export_transformers_folder_matches_bertmodel(encoder, tmp_path):
    """--format transformers: transformers' BertModel loads the folder and its [CLS] vector, normalised, equals
    zoo's embedding (1e-5); the sentence-transformers modules name cls pooling."""
    encoder.save(str(tmp_path / "enc.keras"))
    assert cli(["export", "--model", str(tmp_path / "enc.keras"), "--output", str(tmp_path / "m"), "--format",
                "transformers"]) == 0
    folder = tmp_path / "m" / "default" / "1"
    ids = zoo.Tokenizer.from_preset(folder)(TEXTS, maxlen=32)
    out = torch_reference.run("from_pretrained", folder=str(folder), model="BertModel", batch=ids)["sequence_output"]
    cls = out[:, 0]
    np.testing.assert_allclose(cls / np.linalg.norm(cls, axis=1, keepdims=True), encoder.encode(TEXTS), atol=1e-5)
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_cls_token"] and not pooling["pooling_mode_mean_tokens"]


@pytest.mark.slow
def test_exports_put_the_default_prompt_first_as_encode_does(tmp_path):
    """A model with a default prompt (sentence-transformers' default_prompt_name) gives encode()'s vectors from its
    SavedModel's text signature, its ONNX export (served, and in the light runtime) and their manifests record the
    prompts; the server counts the prompt's tokens against maxlen as encode() does."""
    require_module("onnxruntime", "pip install 'zoo[onnx]'")
    from zoo.export.onnx import export_onnx_folder
    from zoo.inference import OnnxEncoder
    from zoo.serving.lengths import TooLong, length_plan
    from zoo.serving.model import ServedModel

    encoder = tiny_sentence_encoder(seed=3)
    encoder.prompts, encoder.default_prompt_name = {"query": "query: ", "passage": "passage: "}, "query"
    texts = TEXTS[:6]
    expected = encoder.encode(texts)
    assert not np.allclose(expected, encoder.encode(texts, prompt=""), atol=1e-3)  # the prompt changes the vectors
    saved = export_saved_model(encoder, tmp_path / "saved" / "1")
    onnx_folder = export_onnx_folder(encoder, tmp_path / "onnx" / "1")
    strings = np.array([t.encode() for t in texts], dtype=object)
    for path in (saved, onnx_folder):
        manifest = json.loads((Path(path) / "zoo_manifest.json").read_text())["model"]
        assert (manifest["prompts"], manifest["default_prompt_name"]) == (encoder.prompts, "query")
        served = ServedModel("m", 1, str(path))
        np.testing.assert_allclose(served.signatures["text"]({"text": strings})["embedding"], expected, atol=1e-5,
                                   err_msg=str(path))
        ids = served.signatures["tokenize"]({"text": strings})
        np.testing.assert_array_equal(np.asarray(ids["token_ids"]),
                                      encoder.tokenizer(["query: " + t for t in texts], maxlen=32)["token_ids"])
        fits_alone = "a" * 30  # 30 pieces + [CLS] [SEP] = maxlen; the prompt's pieces put it over
        assert len(encoder.tokenizer.piece_ids([fits_alone])[0]) + 2 <= 32
        with pytest.raises(TooLong) as over:
            length_plan(served, served.signatures["text"], {"text": np.array([fits_alone.encode()], object)}, "refuse")
        assert over.value.tokens == len(encoder.tokenizer.piece_ids(["query: " + fits_alone])[0]) + 2
    np.testing.assert_allclose(OnnxEncoder.from_preset(onnx_folder).encode(texts), expected, atol=1e-5)
