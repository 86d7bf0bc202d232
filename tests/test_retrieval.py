"""BM25 over the index's texts (bm25s) and hybrid dense + lexical search by reciprocal-rank fusion."""

import math

import keras
import numpy as np
import pytest

import zoo
from conftest import synthetic_vocab
from zoo.retrieval import SemanticIndex, lexical_terms, reciprocal_rank_fusion

CORPUS = ["今天天气很好", "今天天气不好", "我们在中国", "中国人很好", "他说你是谁", "我不知道", "天气很好的一天"]


@pytest.fixture(scope="module")
def index():
    keras.utils.set_random_seed(0)
    tok = zoo.Tokenizer(synthetic_vocab())
    encoder = zoo.SentenceEncoder(zoo.BertBackbone(tok.vocab_size, 1, 2, 16, 32, max_sequence_length=32), tok,
                                  pooling="mean")
    return SemanticIndex(encoder).add(CORPUS)


def test_lexical_terms():
    assert lexical_terms("花呗怎么开通？") == ["花呗", "呗怎", "怎么", "么开", "开通"]
    assert lexical_terms("好！") == ["好"] and lexical_terms("？？") == []
    assert lexical_terms("ABc 好", "bigram") == ["ab", "bc", "c好"]
    words = lexical_terms("花呗怎么开通？", "jieba")
    assert "".join(words) == "花呗怎么开通" and "？" not in words


def bm25_brute_force(query, docs, k1=1.5, b=0.75):
    """Lucene BM25 (bm25s' default) computed from its formula."""
    terms = [lexical_terms(d) for d in docs]
    avgdl = np.mean([len(t) for t in terms])
    scores = []
    for t in terms:
        score = 0.0
        for q in set(lexical_terms(query)):
            df = sum(q in u for u in terms)
            if df == 0:
                continue
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            tf = t.count(q)
            score += idf * tf / (tf + k1 * (1 - b + b * len(t) / avgdl))  # Lucene drops the (k1 + 1) factor
        scores.append(score)
    return np.array(scores)


def test_lexical_search_is_bm25(index):
    for query in ("今天天气", "中国很好", "你是谁"):
        expected = bm25_brute_force(query, CORPUS)
        (result,) = index.search(query, topk=len(CORPUS), mode="lexical")
        order = [t for t, _ in result]
        assert order == [CORPUS[i] for i in np.argsort(-expected, kind="stable") if expected[i] > 0]
        np.testing.assert_allclose([s for _, s in result], sorted(expected[expected > 0], reverse=True), rtol=1e-4)


def test_hybrid_search_fuses_the_two_rankings(index):
    query = "天气很好"
    dense = [t for t, _ in index.search(query, topk=len(CORPUS))[0]]
    lexical = [t for t, _ in index.search(query, topk=len(CORPUS), mode="lexical")[0]]
    assert [t for t, _ in index.search(query, topk=3, mode="hybrid", weight=1.0)[0]] == dense[:3]
    assert [t for t, _ in index.search(query, topk=len(lexical), mode="hybrid", weight=0.0)[0]] == lexical
    fused = reciprocal_rank_fusion([dense, lexical], [0.3, 0.7])
    expected = sorted(fused, key=lambda t: (-fused[t], CORPUS.index(t)))[:4]
    got = index.search(query, topk=4, mode="hybrid", weight=0.3)[0]
    assert [t for t, _ in got] == expected
    assert [s for _, s in got] == pytest.approx([fused[t] for t in expected])
    assert reciprocal_rank_fusion([["a", "b"], ["b"]], [1.0, 1.0], k=60) == pytest.approx(
        {"a": 1 / 61, "b": 1 / 62 + 1 / 61})


def test_hybrid_settings_are_checked_and_saved(index, tmp_path):
    with pytest.raises(ValueError, match="mode"):
        index.search("天气", mode="sparse")
    with pytest.raises(ValueError, match="weight"):
        index.search("天气", mode="hybrid", weight=1.5)
    with pytest.raises(ValueError, match="lexical must be"):
        SemanticIndex(index.encoder, lexical="words")
    with pytest.raises(ValueError, match="texts"):
        SemanticIndex(dim=4).add(vectors=np.eye(4)).search("天气", mode="lexical")
    words = SemanticIndex(index.encoder, lexical="jieba").add(CORPUS)
    words.save(tmp_path / "index")
    loaded = SemanticIndex.load(tmp_path / "index", index.encoder)
    assert loaded.lexical == "jieba"
    assert loaded.search("中国人", mode="hybrid") == words.search("中国人", mode="hybrid")


def test_index_build_and_search_commands(index, tmp_path, capsys):
    """`zoo index build` records the model; `zoo search` finds it, and refuses a model of another width."""
    from zoo.cli import main

    index.encoder.save(tmp_path / "enc")
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    assert main(["index", "build", "--input", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "ix"),
                 "--model", str(tmp_path / "enc"), "--lexical", "jieba"]) == 0
    capsys.readouterr()
    assert main(["search", "--index", str(tmp_path / "ix"), "--query", "天气很好", "--query", "中国人",
                 "--mode", "hybrid", "--topk", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    words = SemanticIndex(index.encoder, lexical="jieba").add(CORPUS)
    expected = words.search(["天气很好", "中国人"], topk=2, mode="hybrid")
    assert out[0] == "天气很好" and out[3] == "中国人"
    assert [line.split()[-1] for line in out[1:3] + out[4:6]] == [t for hits in expected for t, _ in hits]
    tok = index.encoder.tokenizer
    zoo.SentenceEncoder(zoo.BertBackbone(tok.vocab_size, 1, 2, 8, 16, max_sequence_length=32), tok).save(
        tmp_path / "other")
    assert main(["search", "--index", str(tmp_path / "ix"), "--query", "天气", "--model", str(tmp_path / "other")]) == 2
    assert "16-d vectors" in capsys.readouterr().err
