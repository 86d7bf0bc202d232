"""Pretraining pieces: corpus formats, masking statistics, whole-word masking, TaCL/TACO losses vs numpy, a tiny
MLM/TaCL/TACO run that resumes and leaves a loadable preset, Mirror-BERT/SimCSE, anisotropy."""

import gzip
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

import zoo
from helpers import CJK_CHARS, synthetic_vocab
from zoo.data.corpus import read_corpus, read_documents
from zoo.data.augment import span_mask
from zoo.losses import InBatchSoftmaxLoss, gather_positions, taco_loss, tacl_loss
from zoo.presets import load_saved, save_preset
from zoo.data.pretraining import (PretrainingBatches, PretrainingExamples, mask_tokens, masked_positions,
                                  max_predictions, taco_indices)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_corpus_formats(tmp_path):
    (tmp_path / "plain.txt").write_text("第一篇。\n第二篇\n", encoding="utf-8")
    (tmp_path / "book_review_cls.txt").write_text("1\t好书\n0\t差\n", encoding="utf-8")
    (tmp_path / "waimai.csv").write_text("label,review\n1,很快，好吃\n0,\"太慢了,差评\"\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("3_!_abc_!_标题_!_正文_!_还有\n94_!_应用描述\n", encoding="utf-8")
    with gzip.open(tmp_path / "199801.txt.gz", "wt", encoding="utf-8") as f:
        f.write("19980101-01-001-001/m  迈向/v  充满/v  [中国/ns  政府/n]nt  ！/w\n")
    assert read_documents(str(tmp_path / "book_review_cls.txt")) == ["好书", "差"]
    assert read_documents(str(tmp_path / "waimai.csv")) == ["很快，好吃", "太慢了,差评"]
    assert read_documents(str(tmp_path / "dev.txt")) == ["标题。正文_!_还有", "应用描述"]
    assert read_documents(str(tmp_path / "199801.txt.gz")) == ["迈向充满中国政府！"]
    (tmp_path / "dup.txt").write_text("第一 篇。\n", encoding="utf-8")  # a duplicate, whitespace ignored
    assert len(read_corpus(tmp_path)) == 9  # 2 + 2 + 2 + 2 + 1; dup.txt repeats plain.txt
    with pytest.raises(FileNotFoundError, match="nowhere"):
        read_corpus(tmp_path / "nowhere")


def test_task_texts_come_from_train_splits_only(tmp_path):
    from zoo.data.corpus import task_documents, unique_documents

    (tmp_path / "BQ").mkdir()
    (tmp_path / "BQ" / "BQ.train.data").write_text("借款\t还款\t1\n借款\t利息\t0\n", encoding="utf-8")
    (tmp_path / "BQ" / "BQ.valid.data").write_text("验证\t不要\t1\n", encoding="utf-8")
    docs = task_documents(["BQ"], str(tmp_path))
    assert docs == ["借款\n还款", "借款\n利息"]
    assert unique_documents(docs + ["借款 \n还款", ""]) == docs
    with pytest.raises(FileNotFoundError, match="STS-B"):
        task_documents(["STS-B"], str(tmp_path))


@pytest.fixture(scope="module")
def tok():
    return zoo.Tokenizer(synthetic_vocab())


def test_masking_statistics(tok):
    rng = np.random.default_rng(0)
    vocab_ids = np.arange(20, tok.vocab_size)
    chosen_total = candidates_total = 0
    replaced = {"mask": 0, "random": 0, "kept": 0}
    for _ in range(400):
        ids = [tok.cls_id] + list(rng.integers(20, tok.vocab_size, 60)) + [tok.sep_id]
        special = [i in (tok.cls_id, tok.sep_id) for i in ids]
        masked, chosen = mask_tokens(ids, list(range(len(ids))), special, rng, vocab_ids, tok.mask_id)
        assert not chosen[0] and not chosen[-1]
        assert chosen.sum() <= 0.25 * len(ids)
        assert chosen.sum() == round(0.15 * 60)
        np.testing.assert_array_equal(masked[~chosen], np.array(ids)[~chosen])
        chosen_total += chosen.sum()
        candidates_total += 60
        m, o = masked[chosen], np.array(ids)[chosen]
        replaced["mask"] += (m == tok.mask_id).sum()
        replaced["kept"] += (m == o).sum()
        replaced["random"] += ((m != o) & (m != tok.mask_id)).sum()
    shares = {k: v / chosen_total for k, v in replaced.items()}
    assert abs(shares["mask"] - 0.8) < 0.03 and abs(shares["random"] - 0.1) < 0.03
    assert abs(shares["kept"] - 0.1) < 0.03


def test_whole_word_masking_masks_whole_jieba_words():
    tok = zoo.Tokenizer.from_preset(zoo.DEFAULT_PRESET)
    texts = ["我们今天去北京大学参观图书馆和博物馆。", "中华人民共和国成立于一九四九年，首都是北京。"] * 10
    examples = PretrainingExamples(tok, texts, maxlen=64, nsp=False, wwm=True)
    rng = np.random.default_rng(0)
    multi_char_words = 0
    for ids, wids in [e[0] for e in examples.examples] * 5:
        row = [tok.cls_id, *ids, tok.sep_id]
        words = [-1, *wids, -2]
        _, chosen = mask_tokens(row, words, [t in tok.special_ids for t in row], rng,
                                np.arange(1000, 2000), tok.mask_id)
        for w in set(np.array(words)[chosen]):
            members = np.flatnonzero(np.array(words) == w)
            assert chosen[members].all(), "a word was masked only in part"
            multi_char_words += len(members) > 1
    assert multi_char_words > 0
    # the word groups are jieba's own words, cut here independently of zoo's masking code
    import jieba

    from zoo.data.pretraining import word_piece_ids

    for text in sorted(set(texts)):
        ids, wids = word_piece_ids(tok, text, wwm=True)
        groups = {}
        for piece, word in zip(ids, wids):
            groups.setdefault(word, []).append(piece)
        assert [tok.decode(g) for g in groups.values()] == [w for w in jieba.lcut(text) if w.strip()]


def test_tacl_loss_matches_numpy():
    rng = np.random.default_rng(0)
    s, t = rng.normal(size=(2, 5, 8)).astype("float32"), rng.normal(size=(2, 5, 8)).astype("float32")
    w = np.array([[0, 1, 0, 1, 0], [1, 0, 0, 0, 0]], "float32")
    pad = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "int32")
    sn, tn = s / np.linalg.norm(s, axis=-1, keepdims=True), t / np.linalg.norm(t, axis=-1, keepdims=True)
    total = 0.0
    for b, i in zip(*np.nonzero(w)):
        logits = sn[b, i] @ tn[b].T / 0.01
        logits = logits[pad[b] == 1]
        total += -(logits[i] - logits.max() - np.log(np.exp(logits - logits.max()).sum()))
    positions, weights = masked_positions(w.astype(bool), 3)  # the student is given at the masked positions
    np.testing.assert_array_equal(positions, [[1, 3, 0], [0, 0, 0]])
    student = ops.convert_to_numpy(gather_positions(s, positions))
    got = float(ops.convert_to_numpy(tacl_loss(student, t, positions, weights, pad)))
    assert got == pytest.approx(total / w.sum(), rel=1e-4)
    with pytest.raises(ValueError, match="max_predictions=1"):
        masked_positions(w.astype(bool), 1)


def test_mlm_head_on_masked_positions_equals_full_logits(tok):
    keras.utils.set_random_seed(0)
    bb = zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, dropout=0.0, with_mlm=True)
    x = tok(["今天天气很好", "我们在中国说的话"], maxlen=16)
    out = bb(x)
    positions = np.array([[1, 2, 5], [3, 0, 7]], "int32")
    got = ops.convert_to_numpy(bb.mlm_head(gather_positions(out["sequence_output"], positions)))
    full = ops.convert_to_numpy(out["mlm_logits"])
    np.testing.assert_allclose(got, np.take_along_axis(full, positions[..., None], axis=1), atol=1e-5)
    with pytest.raises(ValueError, match="no MLM head"):
        zoo.BertBackbone(tok.vocab_size, 1, 2, 32, 64).mlm_head(out["sequence_output"])


def test_batches_keep_every_masked_position(tok):
    texts = ["我们今天去北京大学参观图书馆和博物馆。中华人民共和国成立于一九四九年，首都是北京。"] * 30
    batches = PretrainingBatches(PretrainingExamples(tok, texts, maxlen=64, nsp=True), batch_size=8, steps=3)
    assert len(batches.held_out) == 3 and not set(batches.held_out) & set(batches.train_index)  # 30 // 10
    assert len(batches.held_out) + len(batches.train_index) == len(batches.ex.examples)
    from zoo.evaluation import MaskedTokenEvaluator

    with pytest.raises(ValueError, match="no held-out examples"):
        MaskedTokenEvaluator(None, PretrainingBatches(batches.ex, batch_size=8, steps=1, held_out=0))
    for _, x, _ in batches.epoch(0, 0):
        length = x["token_ids"].shape[1]
        assert x["mlm_positions"].shape == (8, max_predictions(length))
        changed = (x["token_ids"] != x["truth_ids"]).sum()
        assert x["mlm_weights"].sum() >= changed > 0  # every replaced token is a prediction target
        rows, slots = np.nonzero(x["mlm_weights"])
        assert np.all(x["padding_mask"][rows, x["mlm_positions"][rows, slots]] == 1)


def test_taco_sampling_and_loss_match_numpy():
    rng = np.random.default_rng(1)
    pad = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], "int32")
    pos, neg = taco_indices(pad, 7, rng)
    for b in range(3):
        for i in range(pad[b].sum()):
            r, c = divmod(int(pos[b, i]), 6)
            assert r == b and c != i and c < pad[b].sum()
            if 0 <= i - 2 and i + 2 < pad[b].sum():
                assert abs(c - i) <= 2
            rows, cols = np.divmod(neg[b, i], 6)
            assert np.all(rows != b) and np.all(cols < pad[rows].sum(1))
    h, e = rng.normal(size=(3, 6, 4)).astype("float32"), rng.normal(size=(3, 6, 4)).astype("float32")
    g = (h - e).reshape(-1, 4)
    g = g / np.linalg.norm(g, axis=1, keepdims=True)
    total, count = 0.0, 0
    for b in range(3):
        for i in range(6):
            if not pad[b, i]:
                continue
            a = g[b * 6 + i]
            logits = np.concatenate([[a @ g[pos[b, i]]], g[neg[b, i]] @ a]) / 0.07
            total += -(logits[0] - logits.max() - np.log(np.exp(logits - logits.max()).sum()))
            count += 1
    got = float(ops.convert_to_numpy(taco_loss(h, e, pos, neg, pad)))
    assert got == pytest.approx(total / count, rel=1e-4)


def test_span_mask_and_in_batch_loss():
    rng = np.random.default_rng(0)
    text = "我们今天去北京大学参观图书馆"
    out = span_mask(text, k=5, min_chars=6, rng=rng)
    assert "[MASK]" in out and len(out) == len(text) - 5 + len("[MASK]")
    assert span_mask(text, k=5, min_chars=30) == text  # the original's 30-character guard
    assert span_mask("你好", k=5, min_chars=0) == "你好"
    e = rng.normal(size=(6, 8)).astype("float32")
    z = e / np.linalg.norm(e, axis=1, keepdims=True)
    s = z @ z.T / 0.04
    np.fill_diagonal(s, -1e12)
    ls = s - s.max(1, keepdims=True)
    ls -= np.log(np.exp(ls).sum(1, keepdims=True))
    expected = -ls[np.arange(6), (np.arange(6) + 3) % 6].mean()
    got = float(ops.convert_to_numpy(InBatchSoftmaxLoss(0.04)(np.zeros(3), e)))
    assert got == pytest.approx(expected, rel=1e-4)


def write_tiny_corpus_and_start(tmp_path):
    """60 random 4-sentence documents over 40 characters, and a random 2-layer start preset with an MLM head."""
    chars = list(dict.fromkeys(CJK_CHARS))
    rng = np.random.default_rng(0)
    docs = ["。".join("".join(rng.choice(chars[:40], 8)) for _ in range(4)) + "。" for _ in range(60)]
    (tmp_path / "corpus.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。"] + chars
    keras.utils.set_random_seed(0)
    save_preset(zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=64, dropout=0.0, with_mlm=True),
                    zoo.Tokenizer(vocab), tmp_path / "start")


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["mlm", "tacl", "taco"])
def test_tiny_pretraining_runs_resumes_and_saves_a_preset(tmp_path, objective):
    from zoo.jobs.pretrain import PretrainConfig, run

    write_tiny_corpus_and_start(tmp_path)
    kw = dict(objective=objective, checkpoint=str(tmp_path / "start"), corpus=(str(tmp_path / "corpus.txt"),), task_texts=(),
              batch_size=8, maxlen=48, lr=3e-3, output=str(tmp_path / "run"), eval_every=10, save_every=5,
              jit_compile=False, progress=False)
    run(PretrainConfig(steps=10, **kw))
    from zoo.data.pretraining import PretrainingBatches

    requested, real_epoch = [], PretrainingBatches.epoch

    def spy(self, seed, epoch, start_step=0):
        requested.append(epoch)
        return real_epoch(self, seed, epoch, start_step)

    PretrainingBatches.epoch = spy
    try:
        results = run(PretrainConfig(steps=30, **kw))  # resumes after round 1
    finally:
        PretrainingBatches.epoch = real_epoch
    assert requested and 0 not in requested, requested  # round 1 was restored, not trained again
    accs = [h["masked_accuracy"] for h in results["curve"]]
    assert [h["epoch"] for h in results["curve"]] == [0, 1, 2, 3]
    assert max(accs[1:]) > accs[0] + 5, accs
    assert (tmp_path / "run" / "loss.png").stat().st_size > 5000
    backbone = zoo.BertBackbone.from_preset(tmp_path / "run", with_mlm=True)
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert backbone.num_layers == 2 and saved["best"]
    assert set(saved["anisotropy"]) == {"start", "best"} and -1 <= saved["anisotropy"]["best"]["intra"] <= 1
    assert "anisotropy" in (tmp_path / "run" / "results.md").read_text()


@pytest.mark.slow
def test_pretraining_job_runs_on_jax(tmp_path):
    """The GPU path: tasks/pretrain.py (TaCL: masked-position MLM head and frozen teacher) under KERAS_BACKEND=jax,
    data-parallel over 2 simulated devices, the corpus streamed (--stream)."""
    write_tiny_corpus_and_start(tmp_path)
    cmd = [sys.executable, os.path.join(REPO, "tasks", "pretrain.py"), "--objective", "tacl", "--wwm",
           "--from", str(tmp_path / "start"), "--corpus", str(tmp_path / "corpus.txt"), "--task-texts", "",
           "--steps", "20", "--eval-every", "10", "--batch-size", "8", "--maxlen", "48", "--lr", "3e-3",
           "--output", str(tmp_path / "jax"), "--no-progress", "--distribute", "data-parallel", "--stream"]
    env = {**os.environ, "KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "jax" / "results.json").read_text())
    assert results["versions"]["keras_backend"] == "jax"
    assert results["distribution"]["devices"] == 2 and results["distribution"]["per_device_batch"] == 4
    assert results["config"]["streamed"] and results["config"]["held_out_documents"] == 32
    accs = [h["masked_accuracy"] for h in results["curve"]]
    assert max(accs[1:]) > accs[0] + 2, accs


def test_anisotropy_diagnostics(tok):
    from zoo.evaluation import token_self_similarity

    keras.utils.set_random_seed(0)
    bb = zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, dropout=0.0)
    texts = ["今天天气很好", "我们在中国说的话", "hello world 你好", "他们是谁"] * 3
    d = token_self_similarity(bb, tok, texts, max_pairs=5000)
    assert -1 <= d["inter"] <= 1 and -1 <= d["intra"] <= 1
    # collapse the token vectors into one direction: similarities go to 1
    bb.get_layer("transformer_layer_1")._feedforward_layer_norm.gamma.assign(np.zeros(32))
    bb.get_layer("transformer_layer_1")._feedforward_layer_norm.beta.assign(np.ones(32))
    d1 = token_self_similarity(bb, tok, texts, max_pairs=5000)
    assert d1["intra"] == pytest.approx(1.0, abs=1e-4) and d1["inter"] == pytest.approx(1.0, abs=1e-4)


def test_shipped_mlm_preset_is_a_continued_default():
    """data/presets/chinese_L-4_H-256_A-4_mlm1k (bench/pretraining_study.sh's +MLM run, see data/README.md):
    the default's architecture and tokenizer with its MLM head, new weights, and a record of how it was made."""
    name = "chinese_L-4_H-256_A-4_mlm1k"
    assert name in zoo.paths.available_presets()
    model, tok = load_saved(name), zoo.Tokenizer.from_preset(name)
    default, default_tok = load_saved(zoo.DEFAULT_PRESET), zoo.Tokenizer.from_preset(zoo.DEFAULT_PRESET)
    assert isinstance(model, zoo.BertBackbone) and model.with_mlm
    assert model.get_config() == default.get_config()
    assert tok.vocab == default_tok.vocab and tok.do_lower_case == default_tok.do_lower_case
    unchanged = [v.path for v, a, b in zip(model.weights, model.get_weights(), default.get_weights())
                 if np.array_equal(a, b)]
    assert unchanged == ["pooler_dense/kernel", "pooler_dense/bias"]  # trained by NSP only, and it ran --no-nsp
    with open(os.path.join(zoo.paths.PRESETS_DIR, name, "zoo_config.json"), encoding="utf-8") as f:
        meta = json.load(f)["metadata"]
    assert meta["job"] == "pretrain-mlm" and meta["wwm"] and meta["start"] == zoo.DEFAULT_PRESET
    assert "--objective mlm" in meta["command"] and "--steps 1000" in meta["command"]


@pytest.mark.slow
def test_steps_fewer_than_eval_every_runs_exactly_those_steps(tmp_path):
    """--steps 5 with the default --eval-every 200 runs 5 optimizer steps and one evaluation, not 200."""
    from zoo.config import ConfigError
    from zoo.jobs.pretrain import PretrainConfig, run

    write_tiny_corpus_and_start(tmp_path)
    config = PretrainConfig(objective="mlm", checkpoint=str(tmp_path / "start"), corpus=(str(tmp_path / "corpus.txt"),),
                            task_texts=(), batch_size=8, maxlen=48, output=str(tmp_path / "run"), steps=5,
                            jit_compile=False, progress=False)
    assert config.eval_every == 5
    results = run(config)
    assert [h["epoch"] for h in results["curve"]] == [0, 1]
    state = json.loads((tmp_path / "run" / "checkpoint" / "state.json").read_text())
    arrays = np.load(tmp_path / "run" / "checkpoint" / "state.npz")
    iterations = [arrays[k] for k in arrays.files if k.startswith("o") and arrays[k].ndim == 0
                  and np.issubdtype(arrays[k].dtype, np.integer)]  # the optimizer's step counter
    assert state["progress"]["epoch"] == 1 and [int(i) for i in iterations] == [5]
    with pytest.raises(ConfigError, match="multiple of --eval-every"):
        PretrainConfig(steps=30, eval_every=20)
