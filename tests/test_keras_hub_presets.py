"""keras-hub presets (a folder written by keras-hub's ``save_to_preset``, the layout of ``bert_base_zh``) load into
zoo with the one verb, ``from_preset``: the backbone gives keras-hub's own outputs, the tokenizer its ids, and a
keras-hub class zoo cannot map is refused by name."""

import json

import keras_hub
import numpy as np
import pytest
import zoo
from zoo.checkpoints import detect_layout
from zoo.checkpoints.keras_hub import keras_hub_weights, weight_names

TEXTS = ["今天天气不错", "我们用keras zoo做BERT", "unbelievable的hello world", "中国人民 123 ab10", "a.b,c!d 你好"]
FULL_WIDTH = ["你好，世界。", "什么？！", "（括号）【书名】", "ａｂｃ１２３"]  # lowercase=False: the same ids as keras-hub
PAIRS = [("今天天气不错", "我们用keras"), ("hello world", "中国人民的zoo")]


def perturb(model, seed=0):
    """Every weight moved off its initial value: biases start at 0 and LayerNorm at 1/0, which would hide a bias or
    gamma/beta mapped to the wrong variable."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        value = np.asarray(weight.numpy())
        weight.assign((value + rng.normal(0, 0.1, value.shape)).astype(value.dtype))


@pytest.fixture(scope="module")
def keras_hub_preset(tmp_path_factory, tiny_vocab):
    """A random keras-hub BertBackbone (2 layers, hidden 32, 4 heads) with every weight perturbed, and its
    BertTokenizer, saved with keras-hub's ``save_to_preset`` -> (folder, the keras-hub backbone, its tokenizer)."""
    tokens, _ = tiny_vocab
    backbone = keras_hub.models.BertBackbone(vocabulary_size=len(tokens), num_layers=2, num_heads=4, hidden_dim=32,
                                             intermediate_dim=64, max_sequence_length=64, dropout=0.0)
    perturb(backbone)
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=tokens, lowercase=True)
    folder = tmp_path_factory.mktemp("keras_hub_bert")
    backbone.save_to_preset(str(folder))
    tokenizer.save_to_preset(str(folder))
    return folder, backbone, tokenizer


def padded_batch(vocabulary_size):
    """Three rows of 12 tokens: two segments, then padding of different lengths."""
    rng = np.random.default_rng(1)
    token_ids = rng.integers(5, vocabulary_size, (3, 12)).astype("int32")
    lengths, firsts = [12, 9, 5], [6, 4, 3]
    padding_mask = np.array([[int(t < n) for t in range(12)] for n in lengths], dtype="int32")
    segment_ids = np.array([[int(f <= t < n) for t in range(12)] for f, n in zip(firsts, lengths)], dtype="int32")
    return {"token_ids": token_ids * padding_mask, "segment_ids": segment_ids, "padding_mask": padding_mask}


def test_a_keras_hub_folder_is_detected(keras_hub_preset, tmp_path):
    folder, _, _ = keras_hub_preset
    layout = detect_layout(folder)
    assert (layout.kind, layout.weights) == ("keras_hub", str(folder / "model.weights.h5"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 10}), encoding="utf-8")
    assert keras_hub_weights(str(tmp_path)) is None  # a transformers config.json is not keras-hub's


def test_backbone_gives_keras_hub_outputs(keras_hub_preset):
    folder, reference, _ = keras_hub_preset
    backbone = zoo.BertBackbone.from_preset(folder)
    assert (backbone.num_layers, backbone.num_heads, backbone.hidden_dim, backbone.intermediate_dim,
            backbone.max_sequence_length, backbone.num_segments) == (2, 4, 32, 64, 64, 2)
    # keras-hub's BERT: the tanh GELU and epsilon 1e-12, fixed in its source rather than its config
    assert (backbone.activation, backbone.layer_norm_epsilon) == ("gelu_new", 1e-12)
    report = backbone.load_report
    assert report.missing == [] and report.unused == []
    assert sorted(report.loaded) == sorted(weight_names(2).values()) and len(report.loaded) == len(reference.weights)
    batch = padded_batch(reference.vocabulary_size)
    expected, got = reference(batch), backbone(batch)
    mask = batch["padding_mask"][:, :, None].astype(bool)
    for key in ("sequence_output", "pooled_output"):
        diff = np.abs(np.asarray(expected[key]) - np.asarray(got[key]))
        if key == "sequence_output":
            diff = np.where(mask, diff, 0.0)  # padded positions are nobody's output
        assert diff.max() < 1e-5, (key, diff.max())


def test_tokenizer_gives_keras_hub_ids(keras_hub_preset, tmp_path, tiny_vocab):
    folder, _, reference = keras_hub_preset
    tokenizer = zoo.Tokenizer.from_preset(folder)
    assert tokenizer.do_lower_case and tokenizer.vocab == tiny_vocab[0]
    assert tokenizer.vocab_file == str(folder / "assets" / "tokenizer" / "vocabulary.txt")
    for text in TEXTS:
        assert tokenizer.piece_ids([text])[0] == np.asarray(reference(text)).tolist(), text
    # a cased keras-hub tokenizer (bert_base_zh's setting): full-width punctuation and letters too
    cased = keras_hub.models.BertTokenizer(vocabulary=tiny_vocab[0], lowercase=False)
    cased.save_to_preset(str(tmp_path))
    tokenizer = zoo.Tokenizer.from_preset(tmp_path)
    assert not tokenizer.do_lower_case
    for text in TEXTS + FULL_WIDTH:
        assert tokenizer.piece_ids([text])[0] == np.asarray(cased(text)).tolist(), text
    # pairs: keras-hub's BERT preprocessor packs [CLS] a [SEP] b [SEP] with segments 0 / 1
    packer = keras_hub.models.BertTextClassifierPreprocessor(cased, sequence_length=32)
    for a, b in PAIRS:
        ids, segments = tokenizer.encode(a, b)
        packed = packer((a, b), y=None)  # y=None: keras-hub would take a bare 2-tuple for (x, y)
        n = len(ids)
        assert int(np.asarray(packed["padding_mask"]).sum()) == n
        assert np.asarray(packed["token_ids"])[:n].tolist() == ids
        assert np.asarray(packed["segment_ids"])[:n].tolist() == segments


def test_sentence_encoder_and_cross_encoder_load(keras_hub_preset):
    folder, reference, khtok = keras_hub_preset
    encoder = zoo.SentenceEncoder.from_preset(folder, pooling="mean")
    assert encoder.backbone.load_report.missing == []
    vectors = encoder.encode(TEXTS[:3])
    assert vectors.shape == (3, 32) and np.isfinite(vectors).all()
    # the same vectors as keras-hub's backbone on keras-hub's ids, mean-pooled and normalised
    cls_id, sep_id = khtok.token_to_id("[CLS]"), khtok.token_to_id("[SEP]")
    for text, vector in zip(TEXTS[:3], vectors):
        ids = np.array([[cls_id, *np.asarray(khtok(text)).tolist(), sep_id]], dtype="int32")
        out = np.asarray(reference({"token_ids": ids, "segment_ids": np.zeros_like(ids),
                                    "padding_mask": np.ones_like(ids)})["sequence_output"])[0].mean(axis=0)
        np.testing.assert_allclose(vector, out / np.linalg.norm(out), atol=1e-5)
    cross = zoo.CrossEncoder.from_preset(folder)
    assert cross.backbone.load_report.missing == []
    scores = cross.score(PAIRS)
    assert scores.shape == (2,) and ((scores >= 0) & (scores <= 1)).all()


def test_an_unmappable_keras_hub_class_is_refused_by_name(tmp_path):
    gemma = keras_hub.models.GemmaBackbone(vocabulary_size=32, num_layers=1, num_query_heads=2, num_key_value_heads=1,
                                           hidden_dim=16, intermediate_dim=32, head_dim=8)
    gemma.save_to_preset(str(tmp_path / "gemma"))
    with pytest.raises(zoo.CheckpointError, match="GemmaBackbone.*BertBackbone"):
        zoo.BertBackbone.from_preset(tmp_path / "gemma")
    tokenizer = {"module": "keras_hub.src.models.gemma.gemma_tokenizer", "class_name": "GemmaTokenizer",
                 "config": {}, "registered_name": "keras_hub>GemmaTokenizer"}
    (tmp_path / "gemma" / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    with pytest.raises(zoo.CheckpointError, match="GemmaTokenizer.*BertTokenizer"):
        zoo.Tokenizer.from_preset(tmp_path / "gemma")


def test_a_keras_hub_config_without_weights_is_named(keras_hub_preset, tmp_path):
    folder, _, _ = keras_hub_preset
    (tmp_path / "config.json").write_text((folder / "config.json").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(zoo.CheckpointError, match="keras-hub preset.*model.weights.h5"):
        zoo.BertBackbone.from_preset(tmp_path)
