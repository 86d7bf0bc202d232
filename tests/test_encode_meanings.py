"""encode() with sentence-transformers' meanings: ``precision=`` quantizes the output as its quantize_embeddings does,
``engine=`` picks zoo's runtime (the old spelling still works for one release, "int8" is refused as ambiguous),
``prompts`` / ``prompt_name`` / ``prompt``, and the same on the light runtime."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch_reference
from helpers import require_installed

import zoo
from zoo.vectors import dequantize_embeddings, embedding_ranges, quantize_embeddings

TEXTS = ["花呗怎么开通", "如何开通花呗", "今天天气不错", "借呗的额度怎么提升", "", "我想问一下信用卡的年费是多少钱啊"]
OUTPUTS = ("float32", "int8", "uint8", "binary", "ubinary")


@pytest.fixture(scope="module")
def shipped():
    return zoo.SentenceEncoder.from_preset("zoo-embed-zh-L4")


def test_precision_quantizes_as_sentence_transformers_does(shipped):
    """binary and ubinary of encode() are sentence-transformers' quantize_embeddings of the float32 vectors; int8
    and uint8 too, over the model's own ranges (from zoo's calibration texts), which encode uses by default."""
    floats = shipped.encode(TEXTS, engine="fp32")
    ranges = shipped.quantization_ranges("fp32")
    theirs = torch_reference.run("st_quantize", precisions=list(OUTPUTS), batch={"embeddings": floats},
                                 state={"ranges": ranges})
    for precision in OUTPUTS:
        kwargs = {"ranges": ranges} if precision == "int8" else {}
        ours = shipped.encode(TEXTS, engine="fp32", precision=precision, **kwargs)
        assert ours.dtype == theirs[precision].dtype and ours.shape == theirs[precision].shape, precision
        np.testing.assert_array_equal(ours, theirs[precision], err_msg=precision)
    assert shipped.encode(TEXTS[0], engine="fp32", precision="ubinary").shape == (floats.shape[1] // 8,)
    # the library function on ranges that leave some values outside, and a width that is not a multiple of 8
    wide = np.random.default_rng(0).normal(size=(40, 60)).astype("float32")
    partial = embedding_ranges(wide[:20])
    theirs = torch_reference.run("st_quantize", precisions=list(OUTPUTS), batch={"embeddings": wide},
                                 state={"ranges": partial})
    for precision in OUTPUTS:
        np.testing.assert_array_equal(quantize_embeddings(wide, precision, partial), theirs[precision],
                                      err_msg=precision)


def test_int8_and_uint8_never_depend_on_the_batch(shipped):
    """A text's quantized vector is the same alone and beside others (sentence-transformers' default takes the
    ranges from the batch; zoo's are the model's), and dequantizes to within half a bucket where it is in range."""
    together = shipped.encode(TEXTS, engine="fp32", precision="uint8")
    alone = np.stack([shipped.encode([t], engine="fp32", precision="uint8")[0] for t in TEXTS])
    np.testing.assert_array_equal(together, alone)
    ranges = shipped.quantization_ranges("fp32")
    assert ranges.shape == (2, shipped.dim) and (ranges[1] > ranges[0]).all()
    np.testing.assert_array_equal(shipped.encode(TEXTS, engine="fp32", precision="int8", ranges=ranges),
                                  together.astype("int16") - 128)
    floats = shipped.encode(TEXTS, engine="fp32")
    inside = (floats >= ranges[0]) & (floats <= ranges[1])
    error = np.abs(dequantize_embeddings(together, "uint8", ranges) - floats)
    assert inside.mean() > 0.9 and (error <= (ranges[1] - ranges[0]) / 510 + 1e-6)[inside].all()
    unnormalised = shipped.quantization_ranges("fp32", normalize_embeddings=False)
    assert not np.allclose(unnormalised, ranges)  # ranges follow the call's settings


def test_the_runtimes_old_spelling_warns_and_int8_is_refused(shipped, caplog):
    want = shipped.encode(TEXTS, engine="fp32")
    with caplog.at_level(logging.WARNING, logger="zoo"):
        np.testing.assert_array_equal(shipped.encode(TEXTS, precision="fp32"), want)
    assert any("write engine='fp32'" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match=r"engine='int8'.*precision='int8' with ranges"):
        shipped.encode(TEXTS, precision="int8")
    with pytest.raises(ValueError, match="name the runtime once"):
        shipped.encode(TEXTS, precision="fp32", engine="bf16")
    with pytest.raises(ValueError, match=r"precision must be one of .*float32.*ubinary.*engine="):
        shipped.encode(TEXTS, precision="fp64")
    with pytest.raises(ValueError, match="engine must be one of"):
        shipped.encode(TEXTS, engine="float32")
    np.testing.assert_allclose(shipped.similarity_pairwise(TEXTS[:2], TEXTS[2:4], precision="fp32"),
                               np.sum(want[:2] * want[2:4], axis=1), atol=1e-6)


def test_prompts_are_saved_used_and_the_query_prefix_is_the_query_prompt(shipped, tmp_path):
    encoder = zoo.SentenceEncoder.from_preset("zoo-embed-zh-L4")
    encoder.prompts = {"query": "问：", "passage": "答："}
    assert encoder.query_prefix == "问："
    def plain(texts):
        return encoder.encode(texts, engine="fp32")
    np.testing.assert_array_equal(encoder.encode(TEXTS, prompt_name="passage", engine="fp32"),
                                  plain(["答：" + t for t in TEXTS]))
    np.testing.assert_array_equal(encoder.encode(TEXTS, prompt="看：", engine="fp32"), plain(["看：" + t for t in TEXTS]))
    np.testing.assert_array_equal(encoder.encode_queries(TEXTS, engine="fp32"), plain(["问：" + t for t in TEXTS]))
    with pytest.raises(ValueError, match="'answer' is not one of the model's prompts"):
        encoder.encode(TEXTS, prompt_name="answer")
    encoder.default_prompt_name = "passage"
    np.testing.assert_array_equal(plain(TEXTS[:2]), encoder.encode(["答：" + t for t in TEXTS[:2]], prompt="",
                                                                   engine="fp32"))
    encoder.save_to_preset(tmp_path / "prompted")
    loaded = zoo.SentenceEncoder.from_preset(tmp_path / "prompted")
    assert (loaded.prompts, loaded.default_prompt_name, loaded.query_prefix) == (encoder.prompts, "passage", "问：")
    np.testing.assert_allclose(loaded.encode(TEXTS, engine="fp32"), plain(TEXTS), atol=1e-6)
    # a config written before prompts (query_prefix only) still loads, as the "query" prompt
    old = {k: v for k, v in encoder.get_config().items() if k not in ("prompts", "default_prompt_name")}
    rebuilt = zoo.SentenceEncoder.from_config({**old, "query_prefix": "问："})
    assert rebuilt.prompts == {"query": "问："} and rebuilt.default_prompt_name is None
    with pytest.raises(ValueError, match="default_prompt_name 'x'"):
        encoder.default_prompt_name = "x"


def test_the_light_runtime_speaks_the_same(shipped):
    """OnnxEncoder.encode takes the same precision, engine and prompt arguments and gives the Keras model's
    quantized vectors (its fused graph is within float32 rounding of Keras; a bucket edge may differ by one)."""
    require_installed("onnxruntime", install="pip install 'zoo[onnx]'")
    from zoo.inference import OnnxEncoder

    light = OnnxEncoder.from_preset("zoo-embed-zh-L4", engine="onnx-fp32")
    assert light.engine == "onnx-fp32"
    np.testing.assert_array_equal(light.encode(TEXTS, precision="ubinary"),
                                  shipped.encode(TEXTS, engine="fp32", precision="ubinary"))
    difference = light.encode(TEXTS, precision="uint8").astype(int) - shipped.encode(TEXTS, engine="fp32",
                                                                                     precision="uint8")
    assert np.abs(difference).max() <= 1 and (difference == 0).mean() > 0.99
    np.testing.assert_allclose(light.encode(TEXTS, prompt="问："), shipped.encode(TEXTS, prompt="问：", engine="fp32"),
                               atol=1e-5)
    with pytest.raises(ValueError, match="this OnnxEncoder runs onnx-fp32"):
        light.encode(TEXTS, engine="int8")
    with pytest.raises(ValueError, match="two meanings"):
        light.encode(TEXTS, precision="int8")
