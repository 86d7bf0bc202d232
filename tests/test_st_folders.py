"""sentence-transformers folders (bge-*-zh, text2vec, m3e: a BERT folder plus modules.json) load as a
zoo.SentenceEncoder with the folder's pooling, Dense layers, normalisation and max_seq_length, and encode as
sentence-transformers' own ``encode`` does (1e-5, fp32; sentence-transformers runs in a subprocess:
torch_reference's ``st_folder``); other modules are refused by name; such an encoder saves and loads as a zoo
preset; a pooling or Dense layer the fused ONNX graph lacks runs fp32 under precision "auto", is refused by the
ONNX precisions and exports as a SavedModel."""

import asyncio
import json
import logging
import shutil

import numpy as np
import pytest

import torch_reference
import zoo
from helpers import require_installed, tiny_bert_config
from zoo.errors import CheckpointError
from zoo.export.onnx import export_onnx, export_onnx_folder
from zoo.export.saved_model import export_saved_model
from zoo.inference.light import light_encoder
from zoo.inference.precisions import forget
from zoo.serving.engines import PresetEngine

MAXLEN = 12  # max_seq_length of the folders: shorter than the long texts below (truncation)
TEXTS = ["今天天气不错", "今天天气很好，我们出去走走吧", "", "hello world", "HELLO World 中国",
         "我在北京大学上学，他在上海工作，我们都很好", "他说：你是谁？我不知道。", "zoo",
         "一二三四五六七八九十一二三四五六七八九十一二三四五", "人"]
# name -> (pooling_mode, Dense modules, Normalize, legacy layout, zoo's pooling)
CASES = {
    "cls": ("cls", [], True, False, "cls"),
    "mean": ("mean", [], False, False, "mean"),
    "max": ("max", [], True, False, "max"),
    "lasttoken": ("lasttoken", [], False, False, "lasttoken"),
    "weightedmean_dense": ("weightedmean", [{"out": 16, "activation": "Tanh"}], True, False, "weightedmean"),
    "mean_sqrt_len": ("mean_sqrt_len_tokens", [], False, False, "mean_sqrt_len"),
    "legacy_cls_max_dense": (["cls", "max"], [{"out": 24, "activation": "Identity", "bias": False},
                                              {"out": 8, "activation": "GELU"}], True, True, "cls+max"),
    "legacy_weightedmean": ("weightedmean", [], False, True, "weightedmean"),
}
FUSED = ("cls", "mean")  # the cases the fused ONNX graph takes


@pytest.fixture(scope="module")
def st_folders(tmp_path_factory, tiny_vocab):
    """{case: (folder, sentence-transformers' encode of TEXTS)}, every folder written by sentence-transformers."""
    require_installed("sentence_transformers", install="pip install sentence-transformers")
    tokens, vocab_path = tiny_vocab
    root = tmp_path_factory.mktemp("st_folders")
    specs = [{"name": name, "folder": str(root / name), "pooling_mode": mode, "dense": dense, "normalize": normalize,
              "max_seq_length": MAXLEN, "legacy": legacy}
             for name, (mode, dense, normalize, legacy, _) in CASES.items()]
    config = tiny_bert_config(len(tokens), num_attention_heads=4)
    out = torch_reference.run("st_folder", config=config, vocab=str(vocab_path), folders=specs, texts=TEXTS, seed=3)
    return {name: (root / name, out[name]) for name in CASES}


@pytest.mark.parametrize("case", list(CASES))
def test_encode_equals_sentence_transformers(st_folders, case, monkeypatch, tmp_path, caplog):
    folder, expected = st_folders[case]
    mode, dense, normalize, legacy, pooling = CASES[case]
    with caplog.at_level(logging.INFO, logger="zoo"):
        encoder = zoo.SentenceEncoder.from_preset(folder)
    read = [r.getMessage() for r in caplog.records if "sentence-transformers folder read" in r.getMessage()]
    assert len(read) == 1 and f"pooling {pooling}," in read[0] and f"normalize {normalize}" in read[0]
    assert (encoder.pooling, encoder.normalize, encoder.maxlen) == (pooling, normalize, MAXLEN)
    assert [d["units"] for d in encoder.dense] == [d["out"] for d in dense]
    assert encoder.dim == expected.shape[1]
    assert max(len(p) for p in encoder.tokenizer.piece_ids(TEXTS)) > MAXLEN  # some texts are cut

    got = encoder.encode(TEXTS, engine="fp32")
    print(f"{case}: max |zoo - sentence-transformers| = {np.abs(got - expected).max():.2e}")
    np.testing.assert_allclose(got, expected, atol=1e-5)
    norms = np.linalg.norm(got, axis=1)
    assert np.abs(norms - 1.0).max() < 1e-5 if normalize else np.abs(norms - 1.0).max() > 1e-2
    unit = expected / np.linalg.norm(expected, axis=1, keepdims=True)  # asked for, or for cosines: normalised
    np.testing.assert_allclose(encoder.encode(TEXTS, engine="fp32", normalize_embeddings=True), unit, atol=1e-5)
    np.testing.assert_allclose(encoder.similarity(TEXTS[:3], TEXTS[:3]), unit[:3] @ unit[:3].T, atol=1e-5)
    one_by_one = np.stack([encoder.encode(t, engine="fp32") for t in TEXTS[:4]])  # no padding at all
    np.testing.assert_allclose(one_by_one, expected[:4], atol=1e-5)

    if case in FUSED:  # the default precision as the tests pin it (auto's measurement: test_fused_onnx.py)
        np.testing.assert_allclose(encoder.encode(TEXTS), expected, atol=1e-5)
        return
    # no fused graph: precision "auto" (the default) deciding for itself runs Keras fp32 and says why, once
    monkeypatch.delenv("ZOO_PRECISION", raising=False)
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zoo"):
        np.testing.assert_allclose(encoder.encode(TEXTS), expected, atol=1e-5)
        reasons = [r.getMessage() for r in caplog.records if r.getMessage().startswith("precision auto")]
        assert len(reasons) == 1 and "fp32" in reasons[0] and "no fused graph" in reasons[0], reasons
        encoder.encode(TEXTS)
        assert sum(r.getMessage().startswith("precision auto") for r in caplog.records) == 1


def test_fused_graph_of_a_sentence_transformers_folder(st_folders, monkeypatch, tmp_path):
    """cls / mean folders without Dense layers run through the fused ONNX graph too, equal to sentence-transformers
    (their Normalize module, or its absence, applied after the graph)."""
    require_installed("onnxruntime", "onnx", install="pip install 'zoo[onnx]'")
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    for case in FUSED:
        folder, expected = st_folders[case]
        got = zoo.SentenceEncoder.from_preset(folder).encode(TEXTS, engine="onnx-fp32")
        print(f"{case} onnx-fp32: max |zoo - sentence-transformers| = {np.abs(got - expected).max():.2e}")
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_a_pooling_or_dense_the_fused_graph_lacks_is_refused_by_onnx_and_exports_as_savedmodel(
        st_folders, tmp_path, monkeypatch, caplog):
    require_installed("onnxruntime", "onnx", install="pip install 'zoo[onnx]'")
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    folder, expected = st_folders["weightedmean_dense"]
    encoder = zoo.SentenceEncoder.from_preset(folder)
    for precision in ("onnx-fp32", "int8"):
        with pytest.raises(TypeError, match="no fused graph for a SentenceEncoder with pooling 'weightedmean'"):
            encoder.encode(TEXTS, engine=precision)
    with pytest.raises(TypeError, match="no fused graph .* with pooling 'weightedmean'"):
        export_onnx(encoder, tmp_path / "model.onnx")
    cls_dense = zoo.SentenceEncoder.from_preset(st_folders["weightedmean_dense"][0], pooling="cls")
    with pytest.raises(TypeError, match="Dense layers after the pooling"):  # a fused pooling, but Dense layers
        cls_dense.encode(TEXTS, engine="onnx-fp32")

    monkeypatch.setenv("ZOO_PRECISION", "int8")  # a default for auto, not a demand: fp32 here, said once
    forget(encoder)
    with caplog.at_level(logging.INFO, logger="zoo"):
        np.testing.assert_allclose(encoder.encode(TEXTS), expected, atol=1e-5)
        encoder.encode(TEXTS[:2])
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ZOO_PRECISION=int8: running fp32")]
    assert len(said) == 1 and "weightedmean" in said[0]

    import tensorflow as tf

    path = export_saved_model(encoder, tmp_path / "export" / "1", signature="ids")
    ids = encoder.tokenizer(TEXTS, maxlen=MAXLEN)
    served = tf.saved_model.load(str(path)).signatures["ids"](**{k: tf.constant(v) for k, v in ids.items()})
    np.testing.assert_allclose(served["embedding"].numpy(), expected, atol=1e-5)  # served L2-normalised


def test_a_sentence_transformers_encoder_round_trips_as_a_zoo_preset(st_folders, tmp_path):
    for case in ("legacy_cls_max_dense", "mean_sqrt_len"):
        folder, expected = st_folders[case]
        encoder = zoo.SentenceEncoder.from_preset(folder)
        encoder.save_to_preset(tmp_path / case)
        loaded = zoo.SentenceEncoder.from_preset(tmp_path / case)
        assert (loaded.pooling, loaded.dense, loaded.normalize, loaded.maxlen, loaded.dim) == \
            (encoder.pooling, encoder.dense, encoder.normalize, encoder.maxlen, encoder.dim)
        np.testing.assert_array_equal(loaded.encode(TEXTS, engine="fp32"), encoder.encode(TEXTS, engine="fp32"))
        np.testing.assert_allclose(loaded.encode(TEXTS, engine="fp32"), expected, atol=1e-5)
        encoder.save(str(tmp_path / f"{case}.keras"))
        again = zoo.SentenceEncoder.from_preset(tmp_path / f"{case}.keras")
        np.testing.assert_array_equal(again.encode(TEXTS, engine="fp32"), encoder.encode(TEXTS, engine="fp32"))


def test_the_backbone_of_an_older_folder_loads_from_its_transformer_module(st_folders):
    """An older folder keeps its transformer in 0_Transformer/ (no config.json at the top): BertBackbone.from_preset
    follows modules.json to it."""
    from keras import ops

    folder, _ = st_folders["legacy_weightedmean"]
    encoder = zoo.SentenceEncoder.from_preset(folder)
    backbone = zoo.BertBackbone.from_preset(folder)
    batch = encoder.tokenizer(TEXTS, maxlen=16)
    want = ops.convert_to_numpy(encoder.backbone(batch)["sequence_output"])
    np.testing.assert_array_equal(ops.convert_to_numpy(backbone(batch)["sequence_output"]), want)


def test_given_pooling_and_maxlen_win_over_the_folder_with_a_warning(st_folders, caplog):
    folder, expected = st_folders["mean"]
    with caplog.at_level(logging.INFO, logger="zoo"):
        encoder = zoo.SentenceEncoder.from_preset(folder, pooling="cls", maxlen=8)
    assert (encoder.pooling, encoder.maxlen) == ("cls", 8)
    assert any(r.levelname == "WARNING" and "'cls' given" in r.getMessage() and "'mean'" in r.getMessage()
               for r in caplog.records)
    assert not np.allclose(encoder.encode(TEXTS, engine="fp32"), expected, atol=1e-3)
    same = zoo.SentenceEncoder.from_preset(folder, pooling="mean")  # agreeing: no warning, the folder's model
    np.testing.assert_allclose(same.encode(TEXTS, engine="fp32"), expected, atol=1e-5)
    generic = zoo.from_preset(folder)  # zoo.from_preset leaves the folder's pooling and length alone
    assert isinstance(generic, zoo.SentenceEncoder) and (generic.pooling, generic.maxlen) == ("mean", MAXLEN)


@pytest.mark.parametrize("module", ["sentence_transformers.models.CNN", "sentence_transformers.models.LSTM",
                                    "sentence_transformers.models.WordEmbeddings",
                                    "sentence_transformers.sentence_transformer.modules.StaticEmbedding",
                                    "my_package.MyPooling"])
def test_unsupported_module_is_refused_by_name(st_folders, tmp_path, module):
    source, _ = st_folders["mean"]
    folder = tmp_path / "bad"
    shutil.copytree(source, folder)
    modules = json.loads((folder / "modules.json").read_text())
    modules.insert(1, {"idx": 1, "name": "extra", "path": "1_Extra", "type": module})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(CheckpointError) as e:
        zoo.SentenceEncoder.from_preset(folder)
    message = str(e.value)
    assert module in message and str(folder) in message
    assert all(name in message for name in ("Transformer", "Pooling", "Dense", "Normalize"))


def test_unsupported_settings_are_refused_by_name(st_folders, tmp_path):
    source, _ = st_folders["weightedmean_dense"]
    dense_dir = next(p.name for p in source.iterdir() if p.name.endswith("_Dense"))

    def broken(edit):
        folder = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
        shutil.copytree(source, folder)
        edit(folder)
        return folder

    def activation(folder):
        config = json.loads((folder / dense_dir / "config.json").read_text())
        (folder / dense_dir / "config.json").write_text(json.dumps({**config, "activation_function":
                                                                    "torch.nn.modules.activation.Hardshrink"}))

    def order(folder):
        modules = json.loads((folder / "modules.json").read_text())
        (folder / "modules.json").write_text(json.dumps([modules[0], modules[3], modules[1], modules[2]]))

    def pooling_mode(folder):
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "median"}))

    for edit, words in ((activation, "Hardshrink"), (order, "Transformer -> Normalize -> Pooling -> Dense"),
                        (pooling_mode, "median")):
        with pytest.raises(CheckpointError, match=words):
            zoo.SentenceEncoder.from_preset(broken(edit))


def test_pooling_modes_exclude_padding_and_follow_their_formulas():
    """Each new pooling against numpy on a padded batch (the sentence-transformers formulas), and a row's vector
    does not depend on how far it is padded."""
    import keras

    from zoo.pooling import Pooling

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 6, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]], "int32")
    want = {"max": [x[i, :n].max(0) for i, n in enumerate(mask.sum(1))],
            "lasttoken": [x[i, n - 1] for i, n in enumerate(mask.sum(1))],
            "weightedmean": [(x[i, :n] * np.arange(1, n + 1)[:, None]).sum(0) / np.arange(1, n + 1).sum()
                             for i, n in enumerate(mask.sum(1))],
            "mean_sqrt_len": [x[i, :n].sum(0) / np.sqrt(n) for i, n in enumerate(mask.sum(1))]}
    for mode, expected in want.items():
        got = keras.ops.convert_to_numpy(Pooling(mode)({"sequence_output": x}, mask))
        np.testing.assert_allclose(got, np.stack(expected), atol=1e-6, err_msg=mode)
    both = keras.ops.convert_to_numpy(Pooling("max+mean")({"sequence_output": x}, mask))
    np.testing.assert_allclose(both[:, :4], np.stack(want["max"]), atol=1e-6)
    with pytest.raises(ValueError, match="median"):
        Pooling("max+median")


def test_the_folders_prompts_are_the_encoders_prompts(st_folders, tmp_path, caplog):
    """config_sentence_transformers.json's prompts and default prompt: encode(prompt_name=...), the default prompt
    and encode_queries ("query") give sentence-transformers' vectors; prompts kept out of the pooling
    (include_prompt false), which zoo does not do, are dropped with a warning."""
    source, _ = st_folders["mean"]
    folder = tmp_path / "prompts"
    shutil.copytree(source, folder)
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    config.update(prompts={"query": "查询：", "document": ""}, default_prompt_name=None)
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config))
    assert zoo.SentenceEncoder.from_preset(folder).query_prefix == "查询："
    config.update(prompts={"query": "查询：", "passage": "文档："}, default_prompt_name="passage")
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config))
    encoder = zoo.SentenceEncoder.from_preset(folder)
    assert (encoder.prompts, encoder.default_prompt_name) == ({"query": "查询：", "passage": "文档："}, "passage")
    theirs = torch_reference.run("st_encode", folder=str(folder), texts=TEXTS,
                                 calls=[{}, {"prompt_name": "query"}, {"prompt": "看："}])
    np.testing.assert_allclose(encoder.encode(TEXTS, engine="fp32"), theirs["0"], atol=1e-5)
    np.testing.assert_allclose(encoder.encode_queries(TEXTS, engine="fp32"), theirs["1"], atol=1e-5)
    np.testing.assert_allclose(encoder.encode(TEXTS, prompt="看：", engine="fp32"), theirs["2"], atol=1e-5)
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "include_prompt": False}))
    with caplog.at_level(logging.WARNING, logger="zoo"):
        assert zoo.SentenceEncoder.from_preset(folder).prompts == {}
    assert any("include_prompt false" in r.getMessage() for r in caplog.records)


def test_an_unnormalised_folder_exports_and_serves_the_vectors_encode_gives(st_folders, tmp_path, monkeypatch):
    """Without a Normalize module the model's HeadSpec serves raw vectors: the SavedModel, the ONNX export (and the
    light runtime reading it) and the server's engine give what encode() gives, as sentence-transformers does."""
    require_installed("onnxruntime", "onnx", install="pip install 'zoo[onnx]'")
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    folder, expected = st_folders["mean"]  # Normalize: False
    encoder = zoo.SentenceEncoder.from_preset(folder)
    assert encoder.head_spec().normalize is False
    raw = encoder.encode(TEXTS, engine="fp32")
    np.testing.assert_allclose(raw, expected, atol=1e-5)
    assert np.abs(np.linalg.norm(raw, axis=1) - 1.0).max() > 1e-2

    import tensorflow as tf

    path = export_saved_model(encoder, tmp_path / "export" / "1", signature="ids")
    ids = encoder.tokenizer(TEXTS, maxlen=MAXLEN)
    served = tf.saved_model.load(str(path)).signatures["ids"](**{k: tf.constant(v) for k, v in ids.items()})
    np.testing.assert_allclose(served["embedding"].numpy(), raw, atol=1e-5)

    onnx_folder = export_onnx_folder(encoder, tmp_path / "onnx")
    np.testing.assert_allclose(light_encoder(onnx_folder, "onnx-fp32").encode(TEXTS), raw, atol=1e-5)

    engine = PresetEngine("raw", folder)
    vectors, _ = asyncio.run(engine.embed(TEXTS, "truncate"))
    np.testing.assert_allclose(vectors, raw, atol=1e-5)

    from helpers import predict, request
    from zoo.serving import ModelServer

    export_saved_model(encoder, tmp_path / "served" / "raw" / "1")  # strings in: the export zoo serve serves
    with ModelServer(tmp_path / "served" / "raw", name="raw", port=0, grpc_port=None, poll_seconds=0,
                     long_text="truncate") as server:
        status, body = predict(server, {"instances": TEXTS}, "/v1/models/raw:predict")
        assert status == 200, body
        np.testing.assert_allclose(body["predictions"], raw, atol=1e-5)
        status, body = request(server, "POST", "/v1/embeddings", {"model": "raw", "input": TEXTS, "dimensions": 8})
        assert status == 200, body  # the first 8 dimensions, not normalised again: the manifest's HeadSpec says so
        np.testing.assert_allclose([d["embedding"] for d in body["data"]], raw[:, :8], atol=1e-5)
        status, models = request(server, "GET", "/v1/models")
        assert models["data"][0]["zoo"]["similarity_fn_name"] == "cosine", models


@pytest.mark.parametrize("function", ["dot", "euclidean", "manhattan"])
def test_sentence_transformers_names_similarity_dimension_and_length(st_folders, tmp_path, function):
    """config_sentence_transformers.json's similarity_fn_name is the encoder's: ``similarity`` and
    ``similarity_pairwise`` score by it (dot of the vectors as encoded, minus the L2 or L1 distance), it is saved
    with the model, and an index refuses what is not a cosine by name; get_sentence_embedding_dimension() and
    max_seq_length are dim and maxlen."""
    from zoo.errors import ConfigError
    from zoo.retrieval import SemanticIndex

    folder = tmp_path / function
    shutil.copytree(st_folders["mean"][0], folder)  # unnormalised: dot is no cosine here
    path = folder / "config_sentence_transformers.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "similarity_fn_name": function}))
    encoder = zoo.SentenceEncoder.from_preset(folder)
    assert encoder.similarity_fn_name == function and encoder.get_sentence_embedding_dimension() == encoder.dim
    a, b = TEXTS[:3], TEXTS[3:7]
    ea, eb = encoder.encode(a), encoder.encode(b)
    assert not np.allclose(np.linalg.norm(ea, axis=1), 1.0)
    want = {"dot": ea @ eb.T, "euclidean": -np.sqrt(((ea[:, None] - eb[None]) ** 2).sum(-1)),
            "manhattan": -np.abs(ea[:, None] - eb[None]).sum(-1)}[function]
    np.testing.assert_allclose(encoder.similarity(a, b), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(encoder.similarity_pairwise(a, b[:3]), np.diag(want[:, :3]), rtol=1e-5, atol=1e-5)
    encoder.save_to_preset(tmp_path / "saved")
    assert zoo.SentenceEncoder.from_preset(tmp_path / "saved").similarity_fn_name == function
    with pytest.raises(ConfigError, match=f"scores by '{function}'"):
        SemanticIndex(encoder)
    with pytest.raises(ValueError, match="similarity_fn_name must be one of"):
        encoder.similarity_fn_name = "jaccard"
    encoder.similarity_fn_name = "cosine"
    np.testing.assert_allclose(encoder.similarity(a, b), (ea / np.linalg.norm(ea, axis=1, keepdims=True))
                               @ (eb / np.linalg.norm(eb, axis=1, keepdims=True)).T, rtol=1e-5, atol=1e-5)
    encoder.max_seq_length = 8
    assert encoder.maxlen == 8 and encoder.max_seq_length == 8
