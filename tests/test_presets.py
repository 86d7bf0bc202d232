"""The shipped ready-to-use presets: the general sentence-embedding model (zoo.DEFAULT_ENCODER) and the SimBERT
preset load by name, encode, rank a paraphrase above an unrelated sentence, and paraphrase without degenerate
repetition or copies; each has a model card; `zoo encode` and SemanticIndex use the general model by default."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import zoo
from zoo.models.simbert import has_repeat, normalized
from zoo.paths import PRESETS_DIR

SIMBERT = "zoo-simbert-zh-L4"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERIES = ["怎么开通花呗", "微信和支付宝哪个好", "我的银行卡被冻结了怎么办", "这部电影好看吗"]


@pytest.mark.parametrize("name", [zoo.DEFAULT_ENCODER, SIMBERT])
def test_shipped_preset_has_a_model_card_and_float16_weights(name):
    folder = os.path.join(PRESETS_DIR, name)
    card = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    for field in ("base checkpoint", "training data", "objective", "wall time", "Reproduce the training",
                  "Known weaknesses", "research"):
        assert field in card, field
    record = json.load(open(os.path.join(folder, "ship.json"), encoding="utf-8"))
    config = json.load(open(os.path.join(folder, "zoo_config.json"), encoding="utf-8"))
    assert config["weights_dtype"] == record["weights_dtype"]
    assert record["float16_max_valid_change"] <= 0.05 or record["weights_dtype"] == "float32"


def test_classes_list_their_presets_as_keras_hub_does():
    """``Class.presets``: the shipped presets a class loads by name (its own trained ones and the backbones it builds
    on), each with what it holds, a description, its parameter count (that of the model it loads), path and
    metadata; the backbone lists them all."""
    encoders, simberts, backbones = zoo.SentenceEncoder.presets, zoo.SimBERT.presets, zoo.BertBackbone.presets
    assert set(backbones) == set(zoo.available_presets()) and len(backbones) >= 4
    assert encoders["zoo-embed-zh-L4"]["class_name"] == "SentenceEncoder" and "zoo-simbert-zh-L4" not in encoders
    assert "zoo-simbert-zh-L4" in simberts and "zoo-embed-zh-L4" not in simberts
    assert {n for n, p in zoo.CrossEncoder.presets.items()} == {n for n, p in backbones.items()
                                                               if p["class_name"].endswith("Backbone")}
    for name, preset in backbones.items():
        assert preset["description"] and os.path.samefile(preset["path"], os.path.join(PRESETS_DIR, name)), name
        assert preset["metadata"]["description"] == preset["description"]
    assert encoders["zoo-embed-zh-L4"]["params"] == zoo.SentenceEncoder.from_preset("zoo-embed-zh-L4").count_params()


def test_general_encoder_loads_by_name_and_ranks_paraphrases_first():
    encoder = zoo.SentenceEncoder.from_preset(zoo.DEFAULT_ENCODER)
    vectors = encoder.encode(["花呗怎么开通", "如何开通花呗", "今天的天气很好"])
    assert vectors.shape == (3, encoder.dim)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.1
    index = zoo.retrieval.SemanticIndex()  # the general model by default
    index.add(["如何开通花呗", "今天的天气很好", "我想买一部手机"])
    assert index.search("花呗怎么开通", topk=1)[0][0][0] == "如何开通花呗"


@pytest.mark.slow
def test_zoo_encode_uses_the_general_model_by_default(tmp_path):
    (tmp_path / "in.txt").write_text("花呗怎么开通\n如何开通花呗\n", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "zoo", "encode", "--input", str(tmp_path / "in.txt"), "--output",
                          str(tmp_path / "out.npy")], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    encoder = zoo.SentenceEncoder.from_preset(zoo.DEFAULT_ENCODER)
    expected = encoder.encode(["花呗怎么开通", "如何开通花呗"])
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, atol=1e-5)
    from zoo.jobs.encode import EncodeConfig, run as encode  # the flags reach encode()

    encode(EncodeConfig(input=str(tmp_path / "in.txt"), output=str(tmp_path / "cut.npy"), truncate_dim=64,
                        long_text="chunk", maxlen=6))
    cut = encoder.encode(["花呗怎么开通", "如何开通花呗"], truncate_dim=64, long_text="chunk", maxlen=6)
    np.testing.assert_allclose(np.load(tmp_path / "cut.npy"), cut, atol=1e-5)
    assert cut.shape == (2, 64) and np.abs(cut - expected[:, :64] / np.linalg.norm(expected[:, :64], axis=1,
                                                                                     keepdims=True)).max() > 1e-3


@pytest.mark.slow
def test_simbert_preset_paraphrases_without_repetition_or_copies():
    model = zoo.SimBERT.from_preset(SIMBERT)
    returned = {q: model.gen_synonyms(q, n=30, k=5, seed=0) for q in QUERIES}
    assert sum(len(r) for r in returned.values()) >= 3 * len(QUERIES)
    for query, candidates in returned.items():
        for text, score in candidates:
            assert not has_repeat(text) and normalized(text) != normalized(query), (query, text)
            assert -1.0 <= score <= 1.0
