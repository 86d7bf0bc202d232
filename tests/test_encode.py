"""Bulk encoding (`zoo encode`: streamed, stored as float32/float16/int8/binary, resumable, sharded across
processes) and inference precisions (fp32, bf16, int8 with ONNX Runtime; `zoo export --quantize`)."""

import gzip
import json
import logging

import keras
import numpy as np
import pytest

import zoo
from helpers import CJK_CHARS, require_module
from zoo.errors import ConfigError, DataError
from zoo.jobs import encode as encode_job
from zoo.jobs.encode import EncodeConfig, run as encode
from zoo.vectors import dequantize_embeddings

CHARS = list(dict.fromkeys(CJK_CHARS))[:160]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("encode")
    keras.utils.set_random_seed(0)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + CHARS
    tok = zoo.Tokenizer(vocab)
    encoder = zoo.SentenceEncoder(zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=32), tok,
                                  pooling="mean", maxlen=32)
    encoder.save_to_preset(root / "enc")
    rng = np.random.default_rng(0)
    texts = ["".join(rng.choice(CHARS, int(rng.integers(0, 20)))) for _ in range(45)]
    with gzip.open(root / "texts.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(texts))  # no newline after the last line
    return root, texts, zoo.from_preset(root / "enc")


def run(root, out, **kw):
    base = dict(model=str(root / "enc"), input=str(root / "texts.txt.gz"), output=str(out), chunk_size=7,
                progress=False)
    return encode(EncodeConfig(**{**base, **kw}))


@pytest.mark.slow
def test_streamed_chunks_equal_encode_in_every_storage_dtype(setup, tmp_path):
    root, texts, encoder = setup
    expected = encoder.encode(texts)
    run(root, tmp_path / "f32.npy")
    np.testing.assert_allclose(np.load(tmp_path / "f32.npy"), expected, atol=1e-6)
    meta = json.loads((tmp_path / "f32.npy.json").read_text())
    assert meta["shape"] == [45, 32] and meta["model"] == str(root / "enc")
    assert not (tmp_path / "f32.npy.partial").exists()
    run(root, tmp_path / "f16.npy", dtype="float16")
    assert np.load(tmp_path / "f16.npy").dtype == np.float16
    np.testing.assert_allclose(np.load(tmp_path / "f16.npy"), expected, atol=1e-3)
    for dtype in ("int8", "uint8"):  # sentence-transformers' buckets over the model's own ranges (not the file's)
        run(root, tmp_path / f"{dtype}.npy", dtype=dtype)
        ranges = np.asarray(json.loads((tmp_path / f"{dtype}.npy.json").read_text())["ranges"], dtype="float32")
        np.testing.assert_allclose(ranges, encoder.quantization_ranges(), atol=1e-6)
        stored = np.load(tmp_path / f"{dtype}.npy")
        assert stored.dtype == dtype
        np.testing.assert_array_equal(stored, encoder.encode(texts, precision="uint8").astype("int16") - 128
                                      if dtype == "int8" else encoder.encode(texts, precision="uint8"))
        restored = dequantize_embeddings(stored, dtype, ranges)
        inside = (expected >= ranges[0]) & (expected <= ranges[1])
        assert inside.mean() > 0.5 and (np.abs(restored - expected) <= (ranges[1] - ranges[0]) / 510 + 1e-6)[inside].all()
    run(root, tmp_path / "ubits.npy", dtype="ubinary")
    np.testing.assert_array_equal(np.load(tmp_path / "ubits.npy"), np.packbits(expected > 0, axis=1))
    run(root, tmp_path / "bits.npy", dtype="binary")
    np.testing.assert_array_equal(np.load(tmp_path / "bits.npy"),
                                  (np.packbits(expected > 0, axis=1).astype("int16") - 128).astype("int8"))


def test_a_killed_run_resumes_and_settings_must_match(setup, tmp_path, monkeypatch, caplog):
    root, texts, encoder = setup
    real, calls = encode_job.embed, []

    def dies_at_the_third_chunk(model, chunk, config):
        calls.append(len(chunk))
        if len(calls) == 3:
            raise KeyboardInterrupt  # stands in for a kill
        return real(model, chunk, config)

    monkeypatch.setattr(encode_job, "embed", dies_at_the_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        run(root, tmp_path / "v.npy")
    assert not (tmp_path / "v.npy").exists() and (tmp_path / "v.npy.partial" / "done-0.txt").read_text() == "0\n1\n"
    with pytest.raises(ConfigError, match="chunk_size 7, now 5"):
        run(root, tmp_path / "v.npy", chunk_size=5)
    resumed = []  # the chunks the rerun embeds: only those not done
    monkeypatch.setattr(encode_job, "embed", lambda model, chunk, config: resumed.append(len(chunk)) or real(
        model, chunk, config))
    with caplog.at_level(logging.INFO, logger="zoo"):
        result = run(root, tmp_path / "v.npy")
    assert "2 of 7 chunks done" in caplog.text and result["lines_encoded"] == 45 - 14
    assert resumed == [7, 7, 7, 7, 3]  # chunks 2-6 of 45 lines in 7s
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), encoder.encode(texts), atol=1e-6)


@pytest.mark.slow
def test_two_processes_write_the_same_array(setup, tmp_path):
    root, texts, _ = setup
    run(root, tmp_path / "one.npy")
    run(root, tmp_path / "two.npy", processes=2)
    np.testing.assert_allclose(np.load(tmp_path / "two.npy"), np.load(tmp_path / "one.npy"), atol=1e-6)


def test_bad_inputs_are_named(setup, tmp_path):
    root, _, _ = setup
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="empty.txt: no lines"):
        run(root, tmp_path / "e.npy", input=str(tmp_path / "empty.txt"))
    (tmp_path / "bad.txt").write_bytes("好\n".encode() * 3 + b"\xff\xfe\n")
    with pytest.raises(DataError, match="bad.txt, line 4: invalid UTF-8"):
        run(root, tmp_path / "b.npy", input=str(tmp_path / "bad.txt"))
    with pytest.raises(ConfigError, match="--processes must be >= 1"):
        EncodeConfig(input="x", output="y.npy", processes=0)
    with pytest.raises(ValueError, match="engine must be one of"):
        setup[2].encode(["好"], engine="fp8")


def test_int8_runs_in_onnx_runtime_close_to_fp32(setup, monkeypatch, tmp_path):
    """... and quantizing leaves the root logger as it was (ONNX Runtime's ``logging.warning`` would give it a
    handler, and every zoo message would print twice)."""
    require_module("onnxruntime", "pip install 'zoo[onnx]'")
    import logging

    from zoo.inference import precisions as runtime

    _, texts, encoder = setup
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # as in a program (pytest's own handlers aside)
    runtime._RUNNERS.pop(encoder, None)  # quantized here, whatever ran before
    fp32, int8 = encoder.encode(texts), encoder.encode(texts, engine="int8")
    assert logging.getLogger().handlers == []
    cosines = np.sum(fp32 * int8, axis=1)
    assert cosines.min() > 0.99 and not np.allclose(fp32, int8, atol=1e-6), cosines.min()  # quantized, close
    assert "int8" in runtime._RUNNERS[encoder]


def test_bf16_falls_back_with_a_warning_or_runs_in_bfloat16(setup, monkeypatch, caplog):
    from zoo.inference import precisions as runtime

    _, texts, encoder = setup
    monkeypatch.setattr(runtime, "bf16_supported", lambda: False)
    runtime._warned.discard("bf16")
    with caplog.at_level(logging.WARNING, logger="zoo"):
        np.testing.assert_array_equal(encoder.encode(texts, engine="bf16"), encoder.encode(texts))
    assert "AVX512-BF16" in caplog.text
    monkeypatch.setattr(runtime, "bf16_supported", lambda: True)
    bf16 = encoder.encode(texts, engine="bf16")
    copy = runtime._RUNNERS[encoder]["bf16"].fn.__self__
    assert {w.dtype for w in copy.backbone.weights} == {"bfloat16"}
    cosines = np.sum(bf16 * encoder.encode(texts), axis=1)
    assert cosines.min() > 0.99 and not np.allclose(bf16, encoder.encode(texts), atol=1e-6)


def test_zoo_encode_runs_auto_by_default_and_records_its_choice(setup, tmp_path, monkeypatch, caplog):
    """precision auto (the default, lossless): decided once, before any chunk, from the parity recorded with the
    model's fused graph; the vectors are those of encode at that precision, and OUT.npy.json says which."""
    require_module("onnxruntime", "pip install 'zoo[onnx]'")
    from zoo import inference

    root, texts, encoder = setup
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ZOO_PRECISION")
    assert EncodeConfig(input="x", output="y.npy").precision == "auto"
    with caplog.at_level(logging.INFO, logger="zoo"):
        run(root, tmp_path / "v.npy")
    assert caplog.text.count("precision auto:") == 1
    [info] = (tmp_path / "cache").glob("onnx/*/info.json")
    record = {"choice": "onnx-fp32" if json.loads(info.read_text())["parity_max_abs_diff"] <= 1e-4 else "fp32"}
    assert json.loads((tmp_path / "v.npy.json").read_text())["vector_source"]["precision"] == record["choice"]
    # encode at that precision, in one call: every precision's vectors are independent of the batch
    expected = encoder.encode(texts, engine=record["choice"])
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-6)
    inference.forget(encoder)
