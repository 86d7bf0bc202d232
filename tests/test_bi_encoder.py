import json

import keras
import numpy as np
import pytest

import zoo
from helpers import word_order_task
from helpers import synthetic_vocab
from zoo.pooling import Pooling
from zoo.presets import save_preset


@pytest.fixture(scope="module")
def tiny_encoders():
    keras.utils.set_random_seed(0)
    tok = zoo.Tokenizer(synthetic_vocab())
    out = {}
    for pooling in ("cls", "mean", "first-last-avg", "pooler"):
        bb = zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=128, dropout=0.0,
                              output_hidden_states=pooling == "first-last-avg")
        out[pooling] = zoo.SentenceEncoder(bb, tok, pooling=pooling, maxlen=32)
    return out


TEXTS = ["今天天气很好", "我们在中国", "hello world", "", "好", "他说：你是谁？我不知道。"]


@pytest.mark.parametrize("pooling", ["cls", "mean", "first-last-avg", "pooler"])
def test_padding_does_not_change_embeddings(tiny_encoders, pooling):
    enc = tiny_encoders[pooling]
    alone = enc.encode(["好人"])
    with_long = enc.encode(["好人", "我们在中国说的话" * 3])[0]
    np.testing.assert_allclose(alone[0], with_long, atol=1e-5)


def test_mean_pooling_excludes_padding():
    x = np.random.default_rng(0).normal(size=(1, 4, 3)).astype("float32")
    mask = np.array([[1, 1, 0, 0]], "int32")
    y = x.copy()
    y[:, 2:] = 1000.0  # garbage at padded positions
    pool = Pooling("mean")
    a = keras.ops.convert_to_numpy(pool({"sequence_output": x}, mask))
    b = keras.ops.convert_to_numpy(pool({"sequence_output": y}, mask))
    np.testing.assert_allclose(a, x[:, :2].mean(1), atol=1e-6)
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_encode_keeps_input_order_and_normalises(tiny_encoders):
    enc = tiny_encoders["mean"]
    batch = enc.encode(TEXTS, batch_size=2)
    one_by_one = np.stack([enc.encode(t) for t in TEXTS])
    np.testing.assert_allclose(batch, one_by_one, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    raw = enc.encode(TEXTS, normalize_embeddings=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    assert enc.encode([]).shape == (0, 32)


def test_encode_progress_bar_counts_texts(tiny_encoders, capsys):
    tiny_encoders["cls"].encode(TEXTS * 5, batch_size=4, show_progress_bar=True)  # 30 texts, last batch of 2
    assert "30/30" in capsys.readouterr().err


def test_empty_and_overlong_texts(tiny_encoders):
    enc = tiny_encoders["cls"]
    long_text = "我们在中国" * 400  # 2000 characters, truncated to maxlen=32 tokens
    e = enc.encode(["", long_text, long_text[:30]])
    assert np.all(np.isfinite(e))
    np.testing.assert_allclose(e[1], e[2], atol=1e-5)  # only the first 30 pieces count
    with pytest.raises(TypeError, match="item 1"):
        enc.encode(["好", None])


def test_similarity(tiny_encoders):
    enc = tiny_encoders["mean"]
    a, b = ["今天天气很好", "你好"], ["我们在中国", "今天天气很好", "好"]
    sim = enc.similarity(a, b)
    ea, eb = enc.encode(a), enc.encode(b)
    np.testing.assert_allclose(sim, ea @ eb.T, atol=1e-5)
    assert sim[0, 1] == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(enc.similarity_pairwise(a, b[:2]), np.sum(ea * eb[:2], 1), atol=1e-5)


@pytest.mark.parametrize("pooling", ["cls", "first-last-avg"])
def test_save_load_round_trips(tiny_encoders, tmp_path, pooling):
    enc = tiny_encoders[pooling]
    expected = enc.encode(TEXTS)
    enc.save_to_preset(tmp_path / "preset")
    loaded = zoo.SentenceEncoder.from_preset(tmp_path / "preset")
    assert loaded.pooling == pooling and loaded.tokenizer.vocab == enc.tokenizer.vocab
    np.testing.assert_allclose(loaded.encode(TEXTS), expected, atol=1e-6)
    enc.save(str(tmp_path / "enc.keras"))
    from_keras = keras.saving.load_model(str(tmp_path / "enc.keras"))
    assert isinstance(from_keras, zoo.SentenceEncoder) and from_keras.tokenizer is not None
    np.testing.assert_allclose(from_keras.encode(TEXTS), expected, atol=1e-6)
    # the backbone of a trained encoder preset loads on its own
    bb = zoo.BertBackbone.from_preset(tmp_path / "preset")
    assert bb.num_layers == 2


def test_truncate_dim_keeps_the_first_dimensions(tiny_encoders):
    enc = tiny_encoders["mean"]
    full = enc.encode(TEXTS, normalize_embeddings=False)
    cut = enc.encode(TEXTS, truncate_dim=8)
    assert cut.shape == (len(TEXTS), 8)
    np.testing.assert_allclose(cut, full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True), atol=1e-6)
    with pytest.raises(ValueError, match="truncate_dim"):
        enc.encode(TEXTS, truncate_dim=enc.dim + 1)


def test_long_text_chunks_are_overlapping_windows_averaged(tiny_encoders):
    """long_text="chunk": a text within maxlen is unchanged; a longer one is the token-weighted mean of its
    windows' L2-normalised vectors (windows of maxlen - 2 tokens, a new one every stride), not the truncated text's
    vector."""
    from zoo.models.bi_encoder import chunk_pieces

    enc = tiny_encoders["mean"]  # maxlen 32: windows of 30 text tokens
    short = ["今天天气很好", "我们在中国"]
    np.testing.assert_allclose(enc.encode(short, long_text="chunk"), enc.encode(short), atol=1e-6)
    long = "天气很好我们在中国" * 9  # 81 tokens
    windows, owner, weights = chunk_pieces(enc.tokenizer.piece_ids([long]), 30, 10)
    assert [len(w) for w in windows] == [30, 30, 30, 30, 30, 30, 21] and owner.tolist() == [0] * 7
    parts = enc.encode([enc.tokenizer.decode(w) for w in windows])
    expected = (parts * weights[:, None]).sum(0) / weights.sum()
    got = enc.encode(long, long_text="chunk", stride=10)
    np.testing.assert_allclose(got, expected / np.linalg.norm(expected), atol=1e-5)
    assert np.abs(got - enc.encode(long)).max() > 1e-3  # not the truncated text's vector
    with pytest.raises(ValueError, match="long_text"):
        enc.encode(long, long_text="split")
    with pytest.raises(ValueError, match="stride"):
        enc.encode(long, long_text="chunk", stride=31)


def test_float16_preset_is_half_the_size_and_loads_into_float32(tiny_encoders, tmp_path):
    """weights_dtype="float16": every weight rounded to float16 on disk, loaded back into float32 variables;
    embeddings within float16 rounding of the float32 preset's; values float16 cannot hold are refused."""
    import h5py

    enc = tiny_encoders["cls"]
    enc.save_to_preset(tmp_path / "f32")
    enc.save_to_preset(tmp_path / "f16", weights_dtype="float16")
    size = {d: (tmp_path / d / "model.weights.h5").stat().st_size for d in ("f32", "f16")}
    params = sum(int(np.prod(w.shape)) for w in enc.weights)
    assert size["f32"] - size["f16"] >= 0.95 * 2 * params, (size, params)  # 2 bytes saved per weight
    loaded = zoo.SentenceEncoder.from_preset(tmp_path / "f16")
    assert json.loads((tmp_path / "f16" / "zoo_config.json").read_text())["weights_dtype"] == "float16"
    for a, b in zip(loaded.backbone.weights, enc.backbone.weights):
        assert str(a.dtype) == "float32"
        expected = keras.ops.convert_to_numpy(b)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), expected.astype("float16").astype("float32"))
    with h5py.File(tmp_path / "f16" / "model.weights.h5") as f:
        dtypes = set()
        f.visititems(lambda name, item: dtypes.add(str(item.dtype)) if isinstance(item, h5py.Dataset) else None)
    assert dtypes == {"float16"}
    drift = np.abs(loaded.encode(TEXTS) - enc.encode(TEXTS)).max()
    assert 0 < drift < 5e-3, drift
    big = zoo.SentenceEncoder(zoo.BertBackbone(enc.tokenizer.vocab_size, 1, 2, 32, 64, max_sequence_length=32),
                              enc.tokenizer, maxlen=16)
    big.backbone.weights[0].assign(np.full(big.backbone.weights[0].shape, 1e6, "float32"))
    with pytest.raises(ValueError, match="beyond float16"):
        big.save_to_preset(tmp_path / "big", weights_dtype="float16")
    assert not (tmp_path / "big").exists()


def test_from_preset_of_a_backbone_and_use_as_layer(tiny_encoders, tmp_path):
    src = tiny_encoders["cls"]
    save_preset(src.backbone, src.tokenizer, tmp_path / "bb")
    enc = zoo.SentenceEncoder.from_preset(tmp_path / "bb", pooling="cls", maxlen=32)
    np.testing.assert_allclose(enc.encode(TEXTS), src.encode(TEXTS), atol=1e-6)
    # inside a user's functional model, with a head on top, trainable
    inputs = {k: keras.Input((None,), dtype="int32", name=k) for k in ("token_ids", "segment_ids", "padding_mask")}
    logits = keras.layers.Dense(2)(enc(inputs))
    model = keras.Model(inputs, logits)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = enc.tokenizer(["好", "你好"], maxlen=8)
    before = enc.get_weights()[0].copy()
    model.fit(x, np.array([0, 1]), epochs=1, verbose=0)
    assert not np.allclose(before, enc.get_weights()[0])


def test_first_last_avg_needs_hidden_states(tiny_encoders):
    bb = tiny_encoders["cls"].backbone
    with pytest.raises(ValueError, match="output_hidden_states"):
        zoo.SentenceEncoder(bb, pooling="first-last-avg")
    with pytest.raises(ValueError, match="pooling must be one of"):
        zoo.SentenceEncoder(bb, pooling="median")  # not a pooling ("max" is one: sentence-transformers')






def test_hard_negative_batches_add_rewrites_of_the_batch_sentences():
    """Each batch gets per_batch more pairs (a sentence of the batch, its rewrite, 0), paraphrase pairs' sentences
    first, b when a has none, repeated when too few; batches stay a function of (seed, epoch), resumable."""
    from zoo.data.pair_files import PairDataset
    from zoo.train import PairBatches
    from zoo.train.batches import HardNegativeBatches

    tok = zoo.Tokenizer(synthetic_vocab())
    a = ["今天天气很好", "我们", "好人", "中国人", "大家好", "你好", "天气", "人"]
    b = ["天气很好", "在中国说的话", "好", "我们在中国", "好了", "你好吗", "好天", "不好"]
    data = PairDataset(a, b, np.array([1, 0, 1, 0, 1, 0, 1, 0], "float32"))
    base = PairBatches(tok, data, 4, 16, length_buckets=False)
    calls = []

    def reverse(text):  # a stand-in for a rewrite: None for texts of 2 characters or fewer
        calls.append(text)
        return text[::-1] if len(text) > 2 else None

    batches = HardNegativeBatches(base, data, reverse, per_batch=2)
    epoch = list(batches.epoch(0, 0))
    assert len(epoch) == len(base) == 2
    for (step, x, y), index in zip(epoch, base.epoch_batches(0, 0)):
        assert x["token_ids"].shape[0] == 2 * (4 + 2) and y.tolist()[4:] == [0.0, 0.0]
        ranked = sorted(index, key=lambda i: -data.labels[i])  # stable: paraphrases first, in batch order
        expected = [(t, t[::-1]) for i in ranked for t in [next((t for t in (a[i], b[i]) if len(t) > 2), None)] if t]
        expected = (expected * 2)[:2]
        rows = x["token_ids"][8:]
        for k, (text, rewritten) in enumerate(expected):
            assert rows[2 * k][1:1 + len(text)].tolist() == tok.piece_ids([text])[0]
            assert rows[2 * k + 1][1:1 + len(rewritten)].tolist() == tok.piece_ids([rewritten])[0]
    again = list(batches.epoch(0, 0, start_step=1))
    np.testing.assert_array_equal(again[0][1]["token_ids"], epoch[1][1]["token_ids"])
    none = HardNegativeBatches(base, data, lambda text: None, per_batch=2)
    assert all(len(y) == 4 for _, _, y in none.epoch(0, 0))  # nothing to add: the batch as it is


def test_pair_training_batches_word_order_negatives_and_anchor_flags(tmp_path):
    """--word-order-negatives N: each 0/1 task's batches get N (sentence, word-order rewrite, 0) pairs (graded
    tasks none); --in-batch-weight: labels [B, 2] = (label, anchor flag: label 1, or 4 and up of 0-5)."""
    from collections import Counter

    from zoo.data.tasks import load_task
    from zoo.train.batches import pair_training_batches

    word_order_task(tmp_path / "LCQMC")
    tok = zoo.Tokenizer(synthetic_vocab())
    lcqmc = load_task("LCQMC", "train", str(tmp_path))
    graded = zoo.data.PairDataset(lcqmc.texts_a, lcqmc.texts_b, lcqmc.labels * 5)
    batches = pair_training_batches(tok, {"LCQMC": lcqmc, "STS-B": graded}, 16, 16, word_order_negatives=3,
                                    in_batch=True)
    sizes = Counter()
    for _, x, y in batches.epoch(0, 0):
        assert y.shape[1] == 2
        is_graded = y[:, 0].max() > 1
        sizes[is_graded, len(y)] += 1
        np.testing.assert_array_equal(y[:, 1], y[:, 0] >= (4 if is_graded else 1))
        if not is_graded:
            assert y[16:].tolist() == [[0.0, 0.0]] * 3
            for row_a, row_b in zip(x["token_ids"][32::2], x["token_ids"][33::2]):
                ca, cb = (Counter(tok.decode(r[r > 0].tolist())) for r in (row_a, row_b))
                assert ca == cb and row_a.tolist() != row_b.tolist()  # the same characters, another order
    assert sizes == {(False, 19): 4, (True, 16): 4}


def tiny_job_flags(root):
    """A tiny preset and the word-order task under ``root``; the flags of a short bi-encoder run on them."""
    if not (root / "preset").exists():
        keras.utils.set_random_seed(1)
        tok = zoo.Tokenizer(synthetic_vocab())
        zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=32, dropout=0.0).save_to_preset(
            root / "preset", tok)
        word_order_task(root / "data" / "LCQMC")
    return ["--tasks", "LCQMC", "--checkpoint", str(root / "preset"), "--data-dir", str(root / "data"),
            "--batch-size", "16", "--maxlen", "16", "--lr", "2e-3", "--eval-batch-size", "64", "--no-progress",
            "--no-jit-compile", "--word-order-valid"]


@pytest.mark.slow
def test_word_order_negatives_teach_word_order_and_select_on_it(tmp_path):
    """On role sentences (A给B打电话) whose labels never depend on word order, a model trained without word-order
    negatives scores a sentence's rewrite (B给A打电话) like its paraphrase (WORDORDER valid Spearman far below 0);
    with --word-order-negatives and the in-batch ranking it learns the order (far above). Selection is on the mean
    of the task's valid Spearman and WORDORDER's."""
    from zoo.cli import main

    flags = tiny_job_flags(tmp_path) + ["--epochs", "6"]
    main(["train", "bi-encoder", *flags, "--output", str(tmp_path / "plain")])
    main(["train", "bi-encoder", *flags, "--word-order-negatives", "4", "--in-batch-weight", "0.5",
          "--output", str(tmp_path / "negatives")])
    plain, negatives = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("plain", "negatives"))
    for results in (plain, negatives):
        for e in results["epochs"]:
            assert e["valid_spearman"] == pytest.approx((e["valid_LCQMC_spearman"] + e["valid_WORDORDER_spearman"]) / 2)
        best = results["epochs"][results["best_epoch"]]
        assert results["word_order_valid_spearman"] == best["valid_WORDORDER_spearman"]
        assert results["valid_spearman"] == pytest.approx(best["valid_LCQMC_spearman"], abs=1e-6)
    assert plain["word_order_valid_spearman"] < -30 < 30 < negatives["word_order_valid_spearman"], (
        plain["word_order_valid_spearman"], negatives["word_order_valid_spearman"])


@pytest.mark.slow
def test_the_recipe_runs_the_word_order_and_in_batch_flags_as_the_job(tmp_path):
    """tasks/train_bi_encoder.py with --word-order-negatives, --in-batch-weight and --word-order-valid gives the
    job's curve and scores."""
    import os
    import subprocess
    import sys

    from zoo.cli import main

    flags = tiny_job_flags(tmp_path) + ["--epochs", "1", "--word-order-negatives", "3", "--in-batch-weight", "0.5"]
    recipe = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tasks", "train_bi_encoder.py")
    done = subprocess.run([sys.executable, recipe, *flags, "--output", str(tmp_path / "recipe")], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    main(["train", "bi-encoder", *flags, "--output", str(tmp_path / "job")])
    by_recipe, by_job = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("recipe", "job"))
    for key in ("valid_spearman", "test_spearman", "test_accuracy", "word_order_valid_spearman"):
        assert by_recipe[key] == pytest.approx(by_job[key], abs=1e-4), key
    assert [e["valid_spearman"] for e in by_recipe["epochs"]] == pytest.approx(
        [e["valid_spearman"] for e in by_job["epochs"]], abs=1e-4)
    assert by_job["epochs"][1]["valid_WORDORDER_spearman"] != by_job["epochs"][0]["valid_WORDORDER_spearman"]
    assert by_job["duplicate_free_batches"] == by_recipe["duplicate_free_batches"] and \
        set(by_job["duplicate_free_batches"][0]) == {"moved", "left_repeated"}  # in-batch: no text twice in a batch


def test_word_order_and_in_batch_flags_are_checked():
    from zoo.jobs.bi_encoder import BiEncoderConfig

    for bad in ({"word_order_negatives": -1}, {"in_batch_weight": -0.5},
                {"word_order_negatives": 4, "objective": "sbert"}, {"in_batch_weight": 1.0, "stream": True},
                {"in_batch_weight": 1.0, "matryoshka_dims": ("8",)}):
        with pytest.raises(zoo.ConfigError, match="word-order|in-batch"):
            BiEncoderConfig(**bad)


def test_predicting_many_batch_shapes_on_several_models_does_not_retrace():
    """A job evaluates several models (the training encoder, the best epoch reloaded, teachers) on batches of every
    length and size; TensorFlow counts traces per Python function across models, so each model must trace its
    prediction once: no "triggered tf.function retracing" warning (a tiny job's output stays quiet)."""
    import logging

    from helpers import CJK_CHARS, tiny_sentence_encoder

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.addHandler(handler)
    try:
        for seed in range(3):
            encoder = tiny_sentence_encoder(seed=seed)
            for n, length in [(1, 3), (2, 9), (3, 17), (5, 25), (7, 30), (4, 12)]:
                texts = [CJK_CHARS[i:i + length] for i in range(n)]
                assert encoder.encode(texts, batch_size=n, engine="fp32").shape == (n, 32)
    finally:
        tf_logger.removeHandler(handler)
    assert not [r for r in records if "retracing" in r.getMessage()], [r.getMessage()[:120] for r in records]
