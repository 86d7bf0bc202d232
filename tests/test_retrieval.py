"""BM25 over the index's texts (bm25s), hybrid dense + lexical search (score or reciprocal-rank fusion, calibrated
from labelled queries), and the approximate backends."""

import json
import math

import keras
import numpy as np
import pytest

import zoo
from helpers import require_module, synthetic_vocab
from zoo.errors import CheckpointError
from zoo.retrieval.base import SemanticIndex, fuse, reciprocal_rank_fusion, score_fusion
from zoo.retrieval.lexical import lexical_terms

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
    got = index.search(query, topk=4, mode="hybrid", weight=0.3, fusion="rrf")[0]
    assert [t for t, _ in got] == expected
    assert [s for _, s in got] == pytest.approx([fused[t] for t in expected])
    assert reciprocal_rank_fusion([["a", "b"], ["b"]], [1.0, 1.0], k=60) == pytest.approx(
        {"a": 1 / 61, "b": 1 / 62 + 1 / 61})


def test_score_fusion_normalises_each_side():
    dense, lexical = [(0, 0.9), (1, 0.8), (2, 0.5)], [(2, 12.0), (3, 2.0)]
    fused = score_fusion([dense, lexical], [0.25, 0.75])
    assert fused == pytest.approx({0: 0.25, 1: 0.25 * 0.75, 2: 0.75, 3: 0.0})
    assert score_fusion([[(5, 3.0)], []], [0.5, 0.5]) == {5: 0.5}  # equal scores count as 1; an empty side adds 0
    assert fuse(dense, lexical, 0.25) == [(2, pytest.approx(0.75)), (0, 0.25), (1, pytest.approx(0.1875)), (3, 0.0)]
    assert [i for i, _ in fuse(dense, lexical, 1.0, topk=2)] == [0, 1]
    assert [i for i, _ in fuse(dense, lexical, 0.5, "rrf")] == [2, 0, 1, 3]
    with pytest.raises(ValueError, match="fusion"):
        fuse(dense, lexical, 0.5, "max")


def calibration_index(dense_quality, query_chars, seed=0, n=60, dim=16):
    """Texts of 6 distinct characters; a query is ``query_chars`` consecutive characters of its gold text plus 2
    random ones (BM25 on bigrams finds it with 2, rarely with 1), and its vector the gold text's vector times
    ``dense_quality`` plus noise times 1 - ``dense_quality`` (0: a random vector)."""
    rng = np.random.default_rng(seed)
    chars = list("天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏闰余成岁律吕调阳云腾致雨露结为霜金生丽水玉出昆冈")
    texts = ["".join(rng.choice(chars, 6, replace=False)) for _ in range(n)]
    vectors = rng.normal(size=(n, dim)).astype("float32")
    gold = rng.permutation(n)[:30]
    starts = rng.integers(0, 6 - query_chars + 1, 30)
    queries = [texts[g][s:s + query_chars] + "".join(rng.choice(chars, 2)) for g, s in zip(gold, starts)]
    qv = (dense_quality * vectors[gold] + (1 - dense_quality) * rng.normal(size=(30, dim))).astype("float32")
    return SemanticIndex(dim=dim).add(texts=texts, vectors=vectors), queries, [int(g) for g in gold], qv


@pytest.mark.parametrize("dense_quality, query_chars", [(0.0, 2), (0.3, 2), (0.7, 1)])
def test_calibrated_hybrid_is_never_worse_than_its_better_half(dense_quality, query_chars, tmp_path):
    from zoo.evaluation import mrr_at_k

    def mrr(found):
        return mrr_at_k([[i for i, _, _ in hits] for hits in found], gold, 10)

    index, queries, gold, qv = calibration_index(dense_quality, query_chars)
    better_half = max(mrr(index.search(queries, mode=m, query_vectors=qv, return_ids=True))
                      for m in ("dense", "lexical"))
    even = mrr(index.search(queries, mode="hybrid", query_vectors=qv, return_ids=True, weight=0.5))
    chosen = index.calibrate(queries, gold, query_vectors=qv)
    calibrated = mrr(index.search(queries, mode="hybrid", query_vectors=qv, return_ids=True))  # the new default
    assert calibrated >= better_half
    assert calibrated == pytest.approx(chosen["mrr@10"][chosen["fusion"]][chosen["weight"]])
    assert (index.fusion, index.hybrid_weight) == (chosen["fusion"], chosen["weight"])
    if dense_quality in (0.0, 0.7):  # one side is weak: fusing half and half is worse than the strong side alone
        assert even < better_half
    else:  # both sides help: the calibrated fusion beats either alone
        assert calibrated > better_half
    index.save(tmp_path / "ix")
    loaded = SemanticIndex.load(tmp_path / "ix")
    assert (loaded.fusion, loaded.hybrid_weight, loaded.calibration["queries"]) == (index.fusion, index.hybrid_weight,
                                                                                    30)
    assert loaded.search(queries, mode="hybrid", query_vectors=qv) == index.search(queries, mode="hybrid",
                                                                                   query_vectors=qv)
    with pytest.raises(KeyError, match="gold id"):
        index.calibrate(queries[:1], [999], query_vectors=qv[:1])
    with pytest.raises(ValueError, match="one gold id per query"):
        index.calibrate(queries, gold[:3], query_vectors=qv)


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

    index.encoder.save_to_preset(tmp_path / "enc")
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
    zoo.SentenceEncoder(zoo.BertBackbone(tok.vocab_size, 1, 2, 8, 16, max_sequence_length=32), tok).save_to_preset(
        tmp_path / "other")
    assert main(["search", "--index", str(tmp_path / "ix"), "--query", "天气", "--model", str(tmp_path / "other")]) == 2
    assert "16-d vectors" in capsys.readouterr().err


def clustered(n=3000, dim=32, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(60, dim))
    vectors = centers[rng.integers(60, size=n)] + 0.3 * rng.normal(size=(n, dim))
    queries = centers[:20] + 0.3 * rng.normal(size=(20, dim))
    return vectors.astype("float32"), queries.astype("float32")


def recall_at_10(found, truth):
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


@pytest.mark.parametrize("settings, floor", [
    (dict(backend="hnsw"), 0.95), (dict(backend="hnsw", quantize="int8", rescore=2), 0.95),
    (dict(backend="ivfpq", nprobe=16, rescore=10), 0.9),
    (dict(backend="exact", quantize="int8"), 0.95), (dict(backend="exact", quantize="binary", rescore=10), 0.8)])
def test_approximate_backends_find_the_exact_neighbours_and_rescore_them(settings, floor):
    """Each backend's top 10 overlaps exact search's; the scores returned are the float cosines of the rows
    (quantized codes only pick candidates), best first."""
    require_module("faiss", "pip install faiss-cpu")
    vectors, queries = clustered()
    exact = SemanticIndex(dim=32).add(vectors=vectors)
    truth = exact.search_vectors(queries, 10)[1]
    index = SemanticIndex(dim=32, **settings).add(vectors=vectors)
    scores, rows = index.search_vectors(queries, 10)
    assert recall_at_10(rows, truth) >= floor, recall_at_10(rows, truth)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", q, unit[rows]), atol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)


@pytest.mark.parametrize("backend", ["exact", "hnsw", "ivfpq"])
def test_ids_add_and_remove(backend):
    """Results carry the ids given; removed ids never come back (before and after compaction); vectors added
    after the structure was built are found."""
    require_module("faiss", "pip install faiss-cpu")
    vectors, queries = clustered(1200)
    index = SemanticIndex(dim=32, backend=backend).add(texts=[f"t{i}" for i in range(1000)], vectors=vectors[:1000],
                                                       ids=[f"doc{i}" for i in range(1000)])
    first = index.search(queries[:3], topk=5, query_vectors=queries[:3], return_ids=True)
    assert all(i == "doc" + t[1:] for hits in first for i, t, _ in hits)
    gone = [i for hits in first for i, _, _ in hits[:2]]
    index.remove(gone)
    assert len(index) == 1000 - len(set(gone))
    after = index.search(queries[:3], topk=5, query_vectors=queries[:3], return_ids=True)
    assert not {i for hits in after for i, _, _ in hits} & set(gone) and all(len(h) == 5 for h in after)
    index.add(vectors=vectors[1000:1001] * 0 + queries[0], ids=["new"])  # a vector equal to the query
    assert index.search(queries[:1], topk=1, query_vectors=queries[:1], return_ids=True)[0][0][0] == "new"
    with pytest.raises(ValueError, match="'new' is already in the index"):
        index.add(vectors=vectors[:1], ids=["new"])
    with pytest.raises(KeyError, match="'nope'"):
        index.remove(["nope"])
    index.remove([f"doc{i}" for i in range(300, 700) if f"doc{i}" not in gone])  # > 1/4 removed: compacted
    assert not index._removed and len(index.vectors) == len(index) == 1001 - len(set(gone)) - 400 + sum(
        300 <= int(g[3:]) < 700 for g in set(gone))
    rows = index.search_vectors(queries, 10)[1]
    assert {index.ids[r] for r in rows.ravel()}.isdisjoint({f"doc{i}" for i in range(300, 700)})


def test_save_keeps_the_structure_and_loads_memory_mapped(tmp_path):
    require_module("faiss", "pip install faiss-cpu")
    from zoo.errors import CheckpointError

    vectors, queries = clustered()
    index = SemanticIndex(dim=32, backend="ivfpq", nprobe=8).add(vectors=vectors)
    index.remove([5, 6])
    index.search_vectors(queries, 10)  # built
    index.save(tmp_path / "ix")  # rows 5 and 6 dropped and the structure rebuilt without them
    expected = index.search_vectors(queries, 10)
    back = SemanticIndex.load(tmp_path / "ix")
    assert isinstance(back.vectors, np.memmap) and back._faiss is not None and back._faiss.ntotal == 2998
    np.testing.assert_array_equal([[back.ids[r] for r in row] for row in back.search_vectors(queries, 10)[1]],
                                  [[index.ids[r] for r in row] for row in expected[1]])
    assert not isinstance(SemanticIndex.load(tmp_path / "ix", mmap=False).vectors, np.memmap)
    data = bytearray((tmp_path / "ix" / "faiss.index").read_bytes())
    (tmp_path / "ix" / "faiss.index").write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(CheckpointError, match="faiss.index"):
        SemanticIndex.load(tmp_path / "ix")


def test_index_settings_are_checked():
    with pytest.raises(ValueError, match="backend must be one of"):
        SemanticIndex(dim=8, backend="annoy")
    with pytest.raises(ValueError, match="quantize='int8' is for backend exact or hnsw"):
        SemanticIndex(dim=8, backend="ivfpq", quantize="int8")
    with pytest.raises(ValueError, match="quantize='binary' is for backend exact "):
        SemanticIndex(dim=8, backend="hnsw", quantize="binary")
    with pytest.raises(ValueError, match="at least 256 vectors"):
        SemanticIndex(dim=8, backend="ivfpq").add(vectors=np.eye(8)).search_vectors(np.eye(8)[:1], 1)
    with pytest.raises(ValueError, match="queries have dimension 4"):
        SemanticIndex(dim=8).add(vectors=np.eye(8)).search_vectors(np.ones((1, 4)), 1)


def test_index_build_saves_an_approximate_structure(index, tmp_path, capsys):
    """`zoo index build --backend hnsw` (float or int8 vectors) writes the faiss graph with the index, and `zoo
    search` reads it back; --quantize with a backend it is not for is refused."""
    require_module("faiss", "pip install faiss-cpu")
    from zoo.cli import main

    index.encoder.save_to_preset(tmp_path / "enc")
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    assert main(["index", "build", "--input", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "ix"),
                 "--model", str(tmp_path / "enc"), "--backend", "hnsw"]) == 0
    assert (tmp_path / "ix" / "faiss.index").exists()
    assert SemanticIndex.load(tmp_path / "ix", index.encoder)._faiss.ntotal == len(CORPUS)
    capsys.readouterr()
    assert main(["search", "--index", str(tmp_path / "ix"), "--query", CORPUS[2], "--topk", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[-1] == CORPUS[2]
    assert main(["index", "build", "--input", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "iq"),
                 "--model", str(tmp_path / "enc"), "--backend", "hnsw", "--quantize", "int8"]) == 0
    assert type(SemanticIndex.load(tmp_path / "iq", index.encoder)._faiss).__name__ == "IndexHNSWSQ"
    capsys.readouterr()
    assert main(["search", "--index", str(tmp_path / "iq"), "--query", CORPUS[3], "--topk", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[-1] == CORPUS[3]
    with pytest.raises(SystemExit):
        main(["index", "build", "--input", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "iy"),
              "--backend", "ivfpq", "--quantize", "int8"])


def test_retrieval_metrics_against_hand_computed_values():
    """recall@k, MRR@k, nDCG@k (binary relevance) and ANN overlap@k on rankings worked out by hand."""
    from zoo.evaluation import first_relevant_ranks, mrr_at_k, ndcg_at_k, overlap_at_k, recall_at_k

    rankings = [["a", "b", "c"], ["x", "y", "z"], ["p", "q", "r"]]
    relevant = ["b", {"z", "y"}, "none"]
    assert first_relevant_ranks(rankings, relevant) == [2, 2, None]
    assert recall_at_k(rankings, relevant, 1) == 0.0 and recall_at_k(rankings, relevant, 2) == pytest.approx(2 / 3)
    assert mrr_at_k(rankings, relevant, 10) == pytest.approx((1 / 2 + 1 / 2 + 0) / 3)
    assert mrr_at_k(rankings, relevant, 1) == 0.0
    ideal_two = 1 + 1 / np.log2(3)
    want = ((1 / np.log2(3)) / 1 + (1 / np.log2(3) + 1 / np.log2(4)) / ideal_two + 0) / 3
    assert ndcg_at_k(rankings, relevant, 3) == pytest.approx(want)
    assert overlap_at_k([[1, 2, 3], [4, 5, 6]], [[3, 2, 9], [7, 8, 9]], 3) == pytest.approx((2 / 3 + 0) / 2)


def test_backend_is_keyword_only_and_a_wrong_option_is_a_type_error(tmp_path):
    """``backend=`` is a keyword (no positional sniffing); an option the backend does not take is a TypeError where
    it is given, at construction or at load; a setting that index.json should not hold is a CheckpointError."""
    with pytest.raises(TypeError, match="positional"):
        SemanticIndex(None, 4, "hnsw")
    with pytest.raises(TypeError, match="uri"):  # a Milvus option on the exact backend
        SemanticIndex(dim=4, uri="corpus.db")
    assert type(SemanticIndex(dim=4, backend="hnsw")).__name__ == "VectorIndex"
    SemanticIndex(dim=4).add(vectors=np.eye(4, dtype="float32")).save(tmp_path / "index")
    with pytest.raises(TypeError, match="collection"):
        SemanticIndex.load(tmp_path / "index", collection="other")
    settings = json.loads((tmp_path / "index" / "index.json").read_text())
    (tmp_path / "index" / "index.json").write_text(json.dumps({**settings, "colour": "red"}))
    with pytest.raises(CheckpointError, match=r"index\.json: unexpected settings \['colour'\]"):
        SemanticIndex.load(tmp_path / "index")
