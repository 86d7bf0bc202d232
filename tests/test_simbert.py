"""UniLM masks, SimBERT (model, loss, batches, save/load), KV-cached decoding, semantic search."""

import json
import logging

import keras
import numpy as np
import pytest
from keras import ops

import zoo
from helpers import logs, require_module, synthetic_vocab
from zoo.backbones.masks import causal_mask, unilm_mask
from zoo.data.tasks import truncate_at_punctuation
from zoo.train import SimBERTBatches
from zoo.losses import simbert_loss
from zoo.retrieval.base import SemanticIndex
from zoo.retrieval.local import exact_topk
from zoo.presets import load_saved


@pytest.fixture(scope="module")
def tok():
    return zoo.Tokenizer(synthetic_vocab())


@pytest.fixture(scope="module")
def simbert(tok):
    keras.utils.set_random_seed(3)
    bb = zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=128, dropout=0.0, with_mlm=True,
                          pooler_activation="linear")
    # a sharper random model, so that decoding is not a near-uniform coin toss
    for w in bb.weights:
        if w.path.endswith("kernel") or w.path.endswith("embeddings"):
            w.assign(ops.convert_to_numpy(w) * 4.0)
    return zoo.SimBERT(bb, tok, maxlen=24)


def test_unilm_mask_values():
    m = ops.convert_to_numpy(unilm_mask(np.array([[0, 0, 0, 1, 1, 0]])))  # last one is padding (segment 0)
    expected = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0],
                         [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(m[0], expected)
    c = ops.convert_to_numpy(causal_mask(np.zeros((2, 3), "int32")))
    np.testing.assert_array_equal(c[1], np.tril(np.ones((3, 3))))


def test_seq2seq_mask_isolates_source(simbert, tok):
    ids, segs = tok.encode("今天天气很好", "我们在中国")
    x = {"token_ids": np.array([ids]), "segment_ids": np.array([segs]), "padding_mask": np.ones((1, len(ids)), "int32")}
    changed = {k: v.copy() for k, v in x.items()}
    changed["token_ids"][0, -2] = tok.token_to_id("好")  # edit a target token
    bb = simbert.backbone
    mask = unilm_mask(x["segment_ids"])
    a = ops.convert_to_numpy(bb({**x, "attention_mask": mask})["sequence_output"])
    b = ops.convert_to_numpy(bb({**changed, "attention_mask": mask})["sequence_output"])
    source = int((np.array(segs) == 0).sum())
    np.testing.assert_array_equal(a[0, :source], b[0, :source])
    assert np.abs(a[0, -2:] - b[0, -2:]).max() > 1e-3
    # [CLS] / pooled vector equals encoding the source alone
    alone = tok(["今天天气很好"])
    pooled_alone = ops.convert_to_numpy(bb(alone)["pooled_output"])
    pooled_pair = ops.convert_to_numpy(simbert(x)["pooled_output"])
    np.testing.assert_allclose(pooled_pair, pooled_alone, atol=1e-5)
    np.testing.assert_allclose(simbert.encode("今天天气很好", normalize_embeddings=False), pooled_alone[0], atol=1e-5)


def test_simbert_loss_matches_numpy():
    rng = np.random.default_rng(0)
    token_ids = rng.integers(5, 50, (4, 6))
    segs = np.array([[0, 0, 0, 1, 1, 0]] * 4)
    logits = rng.normal(size=(4, 6, 50)).astype("float32")
    pooled = rng.normal(size=(4, 8)).astype("float32")
    # generation part by hand
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(lp[:, :-1], token_ids[:, 1:, None], 2)[..., 0]
    gen = (nll * segs[:, 1:]).sum() / segs[:, 1:].sum()
    z = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    s = 30 * z @ z.T - 1e12 * np.eye(4)
    ls = s - s.max(1, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(1, keepdims=True))
    sim = -ls[np.arange(4), np.arange(4) ^ 1].mean()
    got = float(ops.convert_to_numpy(simbert_loss(token_ids, segs, logits, pooled)))
    assert got == pytest.approx(gen + sim, rel=1e-5)


def test_batches_pair_both_orders(tok):
    groups = [["今天天气很好", "今天天气不错", "天气很好"], ["我们在中国", "我们在中国说"]]
    x, y = next(iter(SimBERTBatches(tok, groups, batch_size=2, maxlen=16).epoch(0, 0)))[1:]
    assert x["token_ids"].shape[0] == 4 and y.shape == (2,)
    for k in (0, 2):
        real = x["padding_mask"][k] == 1
        source = x["token_ids"][k][real & (x["segment_ids"][k] == 0)][1:-1]
        target_of_next = x["token_ids"][k + 1][x["segment_ids"][k + 1] == 1][:-1]
        np.testing.assert_array_equal(source, target_of_next)  # row 2k's source is row 2k+1's target
    assert truncate_at_punctuation("今天天气很好，我们出去玩吧！好不好", 10) == "今天天气很好"
    assert truncate_at_punctuation("一二三四五六七八九十十一", 5) == "一二三四五"


@pytest.mark.slow
def test_cached_and_uncached_decoding_agree(simbert):
    cached, full = simbert.decoder(use_cache=True, maxlen=10), simbert.decoder(use_cache=False, maxlen=10)
    seen = set()
    for text in ("今天天气很好", "我们在中国说的话是什么"):
        g = cached.greedy(text)
        assert g == full.greedy(text)
        assert cached.beam_search(text, topk=3) == full.beam_search(text, topk=3)
        a = cached.random_sample(text, 6, topk=8, seed=1)
        assert a == full.random_sample(text, 6, topk=8, seed=1)
        seen.update(g)
        assert len(a) == 6
    assert len(seen) >= 3, "the test model decodes a constant: the comparison would be too weak"


def test_sampling_filters(simbert):
    dec = simbert.decoder(use_cache=True, maxlen=6)
    out = dec.random_sample("今天天气很好", 20, topk=1, seed=0)
    assert all(o == out[0] for o in out)  # top-1 sampling is greedy
    assert out[0] == dec.greedy("今天天气很好")[: len(out[0])]
    with pytest.raises(ValueError, match="topp"):
        dec.random_sample("好", 2, topp=1.5)
    with pytest.raises(ValueError, match="n must be"):
        dec.random_sample("好", 0)
    with pytest.raises(ValueError, match="non-empty"):
        dec.greedy("  ")


def test_gen_synonyms_and_most_similar(simbert, caplog):
    out = simbert.gen_synonyms("今天天气很好", n=12, k=4, seed=0)
    assert 0 < len(out) <= 4
    scores = [s for _, s in out]
    assert scores == sorted(scores, reverse=True)
    assert all(t != "今天天气很好" for t, _ in out)
    with logs(caplog, "truncated", logging.WARNING):
        simbert.gen_synonyms("我们在中国" * 10, n=2, k=1, seed=0)
    with pytest.raises(ValueError, match="n and k"):
        simbert.gen_synonyms("好", n=0)
    corpus = ["今天天气很好", "我们在中国", "hello world", "今天天气不好"]
    best = simbert.most_similar("今天天气很好", corpus, topk=2)
    assert best[0][0] == "今天天气很好" and best[0][1] == pytest.approx(1.0, abs=1e-5)


def test_gen_synonyms_filters_copies_and_degenerate_repeats(simbert, monkeypatch):
    """Copies that differ only in punctuation, spaces or case, and samples with a character 3+ times in a row,
    never come back (unless the input itself repeats); filters=False keeps them."""
    from zoo.models import simbert as module

    assert module.normalized("Ｈello, 今天 天气？！") == "ｈello今天天气"
    assert module.has_repeat("吃吃吃饭") and not module.has_repeat("吃吃饭饭")
    samples = ["天气很好！", "天气 很好", "好好好好的的", "天气不好", "天气不好。", "天气好"]
    assert module.filter_candidates("天气很好", samples) == ["天气不好", "天气好"]
    assert module.filter_candidates("好好好的", ["好好好的人"]) == ["好好好的人"]

    class Decoder:  # the sampler returns fixed token ids: the filtering alone is under test
        def random_sample(self, text, n, **kwargs):
            return [simbert.tokenizer.encode(t)[0][1:-1] for t in samples]

    monkeypatch.setattr(type(simbert), "decoder", lambda self, use_cache=True, maxlen=None: Decoder())
    kept = {t for t, _ in simbert.gen_synonyms("天气很好", n=6, k=10)}
    assert kept == {"天气不好", "天气好"}
    raw = {t for t, _ in simbert.gen_synonyms("天气很好", n=6, k=10, filters=False)}
    assert {"好好好好的的", "天气不好。", "天气很好！"} <= raw


def test_stutters_are_doubled_characters_that_are_not_words():
    """A doubled character the input lacks is dropped unless jieba reads it as a word in the candidate."""
    from zoo.models.simbert import filter_candidates, stutters

    assert stutters("帮我开通", "帮我我开通吗") == ["我我"]
    assert stutters("吃了吗", "吃了了吗") == ["了了"] and stutters("他被打了", "他被被打了") == ["被被"]
    assert stutters("英雄联盟剑圣怎么出装好", "英雄联盟剑剑圣怎么出装好") == ["剑剑"]
    assert stutters("我想买手机", "我想看看手机") == [] and stutters("常去", "常常去") == []  # words
    assert stutters("好好学习", "好好学习吧") == []  # the input has it
    assert stutters("1000元", "10000元") == [] and stutters("ab", "abb") == []  # only Chinese characters
    candidates = ["帮我我开通吗", "帮我看看开通", "帮忙开通"]
    assert filter_candidates("帮我开通", candidates) == ["帮我看看开通", "帮忙开通"]
    assert filter_candidates("帮我开通", candidates, stutter=False) == candidates


def test_ranking_puts_edits_beyond_particles_that_keep_the_meaning_first(simbert, monkeypatch, tmp_path):
    from zoo.models.simbert import content_edits, rank_candidates

    assert content_edits("我想买一部手机", "我想买一部手机啊？") == 0  # a particle and punctuation
    assert content_edits("伊利奶粉的主要产品有哪些", "伊利奶粉主要产品有哪些呢") == 0
    assert content_edits("我想买一部手机", "给我想买一部手机") == 1
    assert content_edits("我想买一部手机", "怎么买一部手机") == 2
    candidates = ["我想买一部手机啊", "我想要一部手机", "怎么买一部手机", "手机"]
    scores = np.array([0.99, 0.95, 0.93, 0.80])
    assert list(rank_candidates("我想买一部手机", candidates, scores, 0.9)) == [1, 2, 0, 3]
    assert list(rank_candidates("我想买一部手机", candidates, scores, 0.94)) == [1, 0, 2, 3]
    assert list(rank_candidates("我想买一部手机", candidates, scores, 0.9, min_edits=2)) == [2, 0, 1, 3]

    class Decoder:  # fixed samples: the ranking alone is under test
        def random_sample(self, text, n, **kwargs):
            return [simbert.tokenizer.encode(t)[0][1:-1] for t in ("天气很好了", "天气不好", "天气好")]

    monkeypatch.setattr(type(simbert), "decoder", lambda self, use_cache=True, maxlen=None: Decoder())
    by_cosine = simbert.gen_synonyms("天气很好", n=3, k=3, rank="cosine")
    assert [s for _, s in by_cosine] == sorted((s for _, s in by_cosine), reverse=True)
    assert simbert.paraphrase_cosine is None and simbert.gen_synonyms("天气很好", n=3, k=3) == by_cosine
    floor = min(s for _, s in by_cosine) - 1e-6  # every candidate keeps the meaning: edits first
    ranked = simbert.gen_synonyms("天气很好", n=3, k=3, min_similarity=floor)
    assert ranked[-1][0] == "天气很好了" and sorted(ranked) == sorted(by_cosine)
    assert simbert.gen_synonyms("天气很好", n=3, k=3, min_similarity=1.1) == by_cosine  # none keeps it: cosine
    with pytest.raises(ValueError, match="rank must be"):
        simbert.gen_synonyms("天气很好", rank="length")
    pairs = zoo.data.PairDataset(["今天天气很好", "今天天气很好"], ["今天天气不好", "我们在中国"], np.array([1, 0]))
    threshold, accuracy = simbert.fit_paraphrase_cosine(pairs)
    assert simbert.paraphrase_cosine == threshold and 0.5 <= accuracy <= 1.0
    simbert.save_to_preset(tmp_path / "sim")
    assert zoo.SimBERT.from_preset(tmp_path / "sim").paraphrase_cosine == pytest.approx(threshold)
    simbert.paraphrase_cosine = None


@pytest.mark.slow
def test_save_load_simbert(simbert, tmp_path):
    expected = simbert.encode(["今天天气很好", "我们"])
    simbert.save_to_preset(tmp_path / "sim")
    loaded = zoo.SimBERT.from_preset(tmp_path / "sim")
    np.testing.assert_allclose(loaded.encode(["今天天气很好", "我们"]), expected, atol=1e-6)
    assert loaded.decoder(maxlen=8).greedy("今天天气") == simbert.decoder(maxlen=8).greedy("今天天气")
    simbert.save(str(tmp_path / "sim.keras"))
    again = keras.saving.load_model(str(tmp_path / "sim.keras"))
    np.testing.assert_allclose(again.encode(["今天天气很好", "我们"]), expected, atol=1e-6)
    # every loading path gives a SimBERT with its tokenizer: generation and search work
    for model in (zoo.from_preset(tmp_path / "sim"), load_saved(tmp_path / "sim"),
                  load_saved(tmp_path / "sim"), zoo.SimBERT.from_preset(tmp_path / "sim.keras")):
        assert isinstance(model, zoo.SimBERT) and model.tokenizer is not None
        assert model.gen_synonyms("今天天气很好", n=4, k=2, seed=0) == simbert.gen_synonyms("今天天气很好", n=4, k=2,
                                                                                              seed=0)
    index = SemanticIndex(model).add(["今天天气很好", "我们在中国"])
    assert index.dim == 32 and index.search("今天天气很好", 1)[0][0][0] == "今天天气很好"


def test_faiss_index_sizes_itself_and_refuses_too_few_vectors():
    require_module("faiss", "pip install faiss-cpu")
    from zoo.retrieval.local import default_factory

    vectors = np.random.default_rng(0).normal(size=(300, 8)).astype("float32")
    auto = SemanticIndex(dim=8, backend="faiss").add(vectors=vectors)  # factory picked for 300 vectors
    np.testing.assert_array_equal(auto.search_vectors(vectors[:5], 3)[1], exact_topk(
        vectors[:5] / np.linalg.norm(vectors[:5], axis=1, keepdims=True),
        vectors / np.linalg.norm(vectors, axis=1, keepdims=True), 3)[1])
    assert default_factory(300) == "Flat" and default_factory(1_000_000) == "IVF4096,Flat"
    with pytest.raises(ValueError, match="needs at least 1024 vectors"):
        SemanticIndex(dim=8, backend="faiss", factory="IVF1024,Flat").add(vectors=vectors).search_vectors(vectors, 1)


def test_exact_topk_chunked_equals_bruteforce():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(1000, 16)).astype("float32")
    q = rng.normal(size=(7, 16)).astype("float32")
    s, i = exact_topk(q, v, 10, chunk_size=97)
    full = q @ v.T
    np.testing.assert_array_equal(i, np.argsort(-full, axis=1)[:, :10])
    np.testing.assert_allclose(s, np.sort(full, axis=1)[:, ::-1][:, :10], rtol=1e-6)


def test_semantic_index_exact_faiss_save_load(tmp_path):
    rng = np.random.default_rng(1)
    centers = rng.normal(size=(20, 32))
    v = np.repeat(centers, 50, axis=0) + 0.05 * rng.normal(size=(1000, 32))
    exact = SemanticIndex(dim=32).add(vectors=v)
    approx = SemanticIndex(dim=32, backend="faiss", factory="IVF16,Flat", nprobe=4).add(vectors=v)
    q = centers[:5] + 0.05 * rng.normal(size=(5, 32))
    _, ie = exact.search_vectors(q, 10)
    _, ia = approx.search_vectors(q, 10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(ia, ie)])
    assert recall >= 0.9
    exact.save(tmp_path / "idx")
    back = SemanticIndex.load(tmp_path / "idx")
    np.testing.assert_array_equal(back.search_vectors(q, 10)[1], ie)
    with pytest.raises(ValueError, match="topk"):
        exact.search_vectors(q, 0)
    with pytest.raises(ValueError, match="empty"):
        SemanticIndex(dim=4).search_vectors(np.ones((1, 4)), 1)


@pytest.mark.slow
def test_simbert_job_end_to_end(tmp_path, tok, simbert):
    from zoo.jobs.simbert import SimBERTConfig, run as train_simbert
    from helpers import write_synthetic_task

    data = tmp_path / "data"
    write_synthetic_task(str(data), sizes=(200, 100, 100))
    groups = tmp_path / "groups.jsonl"
    lines = [json.dumps({"text": "今天天气很好", "synonyms": ["今天天气不错", "天气很好"]}, ensure_ascii=False),
             json.dumps({"text": "我们在中国", "synonyms": ["我们在中国说"]}, ensure_ascii=False)] * 8
    groups.write_text("\n".join(lines) + "\n", encoding="utf-8")
    simbert.save_to_preset(tmp_path / "start")
    results = train_simbert(SimBERTConfig(checkpoint=str(tmp_path / "start"), groups=str(groups),
                                          data_dir=str(data), batch_size=4, maxlen=16, lr=1e-3,
                                          output=str(tmp_path / "run"), progress=False, jit_compile=False,
                                          eval_tasks=("LCQMC",), samples=("今天天气",)))
    assert [e["epoch"] for e in results["epochs"]] == [0, 1]
    assert "LCQMC" in results["test_spearman_zero_shot"]
    assert (tmp_path / "run" / "model" / "zoo_config.json").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "好", "synonyms": "not a list"}\n', encoding="utf-8")
    from zoo.errors import DataError
    from zoo.data.tasks import read_synonym_groups

    with pytest.raises(DataError, match="bad.jsonl, line 1"):
        read_synonym_groups(bad)


def test_sample_tokens_equals_full_sort_reference():
    from zoo.generation import sample_tokens

    def reference(p, topk, topp, rng):  # bert4keras order: top-k, renormalise, top-p on the sorted list, sample
        order = np.argsort(-p, axis=1, kind="stable")
        vals = np.take_along_axis(p, order, 1)
        if topk:
            vals, order = vals[:, :topk], order[:, :topk]
            vals = vals / vals.sum(1, keepdims=True)
        if topp:
            vals = np.where(np.cumsum(vals, 1) - vals < topp, vals, 0.0)
        cdf = np.cumsum(vals, 1)
        choice = np.minimum((cdf < rng.random((len(p), 1)) * cdf[:, -1:]).sum(1), vals.shape[1] - 1)
        return order[np.arange(len(p)), choice]

    data = np.random.default_rng(0)
    for temperature in (0.3, 1.0, 3.0):  # peaked to flat: flat rows need a wide partition for top-p 0.95
        logits = data.normal(size=(50, 3000)) / temperature
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        for topk, topp in ((None, 0.95), (5, None), (20, 0.8), (None, 0.3)):
            got = sample_tokens(p, topk, topp, np.random.default_rng(7))
            np.testing.assert_array_equal(got, reference(p, topk, topp, np.random.default_rng(7)))


@pytest.mark.slow
def test_simbert_job_selects_by_valid_loss(tmp_path, tok, simbert):
    """--select loss: the best epoch is the one with the lowest joint loss on groups of LCQMC valid positives."""
    from zoo.jobs.simbert import SimBERTConfig, run as train_simbert
    from helpers import write_synthetic_task

    data = tmp_path / "data"
    write_synthetic_task(str(data), sizes=(200, 100, 100))
    simbert.save_to_preset(tmp_path / "start")
    results = train_simbert(SimBERTConfig(checkpoint=str(tmp_path / "start"), data_dir=str(data), batch_size=8,
                                          maxlen=16, lr=1e-3, epochs=2, output=str(tmp_path / "run"),
                                          progress=False, jit_compile=False, eval_tasks=("LCQMC",),
                                          samples=("今天天气",), tasks=("LCQMC",), select="loss"))
    losses = [e["valid_loss"] for e in results["epochs"]]
    assert losses[1] < losses[0]  # training lowers the held-out loss
    assert results["best_epoch"] == 1 + int(np.argmin(losses[1:]))
