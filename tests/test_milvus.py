"""SemanticIndex(backend="milvus") on Milvus Lite: the same top-k as zoo's exact search, add / remove / upsert,
metadata filters, lexical and hybrid search (Milvus' BM25, or zoo's where the engine has none), a resumable
`zoo index build --backend milvus`, `zoo search` against it, and refusal of a collection of another model."""

import hashlib
import json

import numpy as np
import pytest

import zoo
from helpers import CJK_CHARS, require_module, tiny_sentence_encoder
from zoo.jobs.search import IndexBuildConfig, SearchConfig, build_milvus, search
from zoo.retrieval.base import SemanticIndex

pytestmark = pytest.mark.slow  # Milvus Lite starts a server process per collection

require_module("pymilvus", "pip install 'pymilvus[milvus_lite]'")
require_module("milvus_lite", "pip install milvus-lite")


class HashEncoder:
    """Deterministic, well-spread unit vectors per text (the ranking test should not hinge on near-ties)."""

    dim = 16

    def encode(self, texts, batch_size=64, **_):
        rows = [np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)).normal(size=self.dim)
                for t in texts]
        return np.asarray(rows, "float32")


def corpus(n=60, seed=0):
    rng = np.random.default_rng(seed)
    chars = list(dict.fromkeys(CJK_CHARS))[:60]
    return ["".join(rng.choice(chars, size=rng.integers(3, 9))) for _ in range(n)]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return str(tmp_path_factory.mktemp("milvus") / "corpus.db")


def test_dense_top_k_equals_exact_search(db):
    texts, encoder = corpus(), HashEncoder()
    ids = [f"t{i}" if i % 2 else i for i in range(len(texts))]  # ints and strings both round-trip
    milvus = SemanticIndex(encoder, backend="milvus", uri=db, collection="dense")
    assert type(milvus).__name__ == "MilvusIndex"
    milvus.add(texts, ids=ids)
    exact = SemanticIndex(encoder).add(texts, ids=ids)
    queries = corpus(8, seed=1) + texts[:2]
    got = milvus.search(queries, topk=7, return_ids=True)
    want = exact.search(queries, topk=7, return_ids=True)
    for g, w in zip(got, want):
        assert [i for i, _, _ in g] == [i for i, _, _ in w]
        np.testing.assert_allclose([s for *_, s in g], [s for *_, s in w], atol=1e-5)
    assert len(milvus) == len(texts)


def test_add_remove_upsert_and_filters(db):
    encoder = HashEncoder()
    index = SemanticIndex(encoder, backend="milvus", uri=db, collection="crud")
    texts = ["今天天气很好", "明天天气不好", "我们在中国", "他是谁"]
    index.add(texts, ids=[1, 2, 3, 4], metadata=[{"lang": "zh", "year": 2020 + i} for i in range(4)])
    with pytest.raises(ValueError, match="already in the index"):
        index.add(["x"], ids=[2])
    with pytest.raises(KeyError, match="99"):
        index.remove([99])
    index.remove([2])
    assert len(index) == 3 and index.existing([1, 2, 3]) == [1, 3]
    hits = index.search("明天天气不好", topk=4, return_ids=True)[0]
    assert 2 not in [i for i, _, _ in hits]
    index.upsert(["明天天气不好"], ids=[3], metadata=[{"lang": "en", "year": 1999}])  # replaces id 3
    hits = index.search("明天天气不好", topk=1, return_ids=True)[0]
    assert hits[0][:2] == (3, "明天天气不好") and abs(hits[0][2] - 1) < 1e-5
    filtered = index.search("今天天气很好", topk=4, return_ids=True, filter="lang == 'zh' and year >= 2021")
    assert [i for i, _, _ in filtered[0]] == [4]
    with pytest.raises(ValueError, match="crud"):
        index.search("x", filter="no_such_syntax ===")
    with pytest.raises(zoo.DataError, match="row 0"):
        index.add(["y"], ids=[7], metadata=[{"vector": 1}])


def test_lexical_and_hybrid_search_with_milvus_bm25(db):
    texts = ["今天天气很好", "明天天气不好", "我们在中国", "他是谁", "天气预报说明天下雨", "中国人民"]
    index = SemanticIndex(HashEncoder(), backend="milvus", uri=db, collection="lexical")
    assert index.engine_bm25
    index.add(texts, ids=list(range(len(texts))))
    lexical = index.search("明天天气", topk=5, mode="lexical", return_ids=True)[0]
    assert {i for i, _, _ in lexical} == {0, 1, 4} and lexical[0][0] == 1  # only texts sharing a bigram
    assert all(s > 0 for *_, s in lexical)
    assert index.search("天气", topk=5, mode="lexical", filter="pk != '0'", return_ids=True)[0][0][0] != 0
    hybrid = index.search("明天天气", topk=3, mode="hybrid", weight=0.0, return_ids=True)[0]
    assert [i for i, _, _ in hybrid] == [i for i, _, _ in lexical[:3]]  # weight 0: the BM25 ranking alone
    dense = index.search("明天天气", topk=3, return_ids=True)[0]
    assert [i for i, _, _ in index.search("明天天气", topk=3, mode="hybrid", weight=1.0, return_ids=True)[0]] == \
        [i for i, _, _ in dense]


def test_engine_without_bm25_falls_back_to_zoo_bm25(db, monkeypatch):
    from pymilvus import MilvusClient, MilvusException

    real = MilvusClient.create_collection

    def without_bm25(self, name, schema=None, **kwargs):
        if schema is not None and schema.functions:
            raise MilvusException(message="function BM25 is not supported")
        return real(self, name, schema=schema, **kwargs)

    monkeypatch.setattr(MilvusClient, "create_collection", without_bm25)
    texts = ["今天天气很好", "明天天气不好", "我们在中国", "他是谁", "天气预报说明天下雨", "中国人民"]
    index = SemanticIndex(HashEncoder(), backend="milvus", uri=db, collection="no_bm25")
    assert not index.engine_bm25
    index.add(texts, ids=list(range(len(texts))))
    exact = SemanticIndex(HashEncoder()).add(texts)
    for query in ("明天天气", "中国"):
        got = index.search(query, topk=4, mode="lexical", return_ids=True)[0]
        want = exact.search(query, topk=4, mode="lexical", return_ids=True)[0]
        assert [(i, t) for i, t, _ in got] == [(i, t) for i, t, _ in want]
        np.testing.assert_allclose([s for *_, s in got], [s for *_, s in want], rtol=1e-5)


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("enc") / "tiny"
    tiny_sentence_encoder(seed=5).save_to_preset(folder)
    return str(folder)


def test_interrupted_build_resumes_without_duplicates(db, preset, tmp_path, monkeypatch):
    from zoo.retrieval.milvus import MilvusIndex

    lines = corpus(23, seed=2)
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = IndexBuildConfig(input=str(source), output=str(tmp_path / "idx"), model=preset, backend="milvus",
                              uri=db, collection="build")
    real, calls = MilvusIndex.add, []

    def dies_on_third_chunk(self, texts=None, **kwargs):
        calls.append(len(texts))
        if len(calls) == 3:
            raise KeyboardInterrupt("killed")
        return real(self, texts, **kwargs)

    monkeypatch.setattr(MilvusIndex, "add", dies_on_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        build_milvus(config, chunk_size=5)
    monkeypatch.setattr(MilvusIndex, "add", real)
    result = build_milvus(config, chunk_size=5)
    assert result["texts"] == len(lines) and result["resumed"] == 10
    index = SemanticIndex.load(tmp_path / "idx", zoo.from_preset(preset))
    rows = index.client.query("build", filter="", output_fields=["pk", "text"], limit=100)
    assert sorted(json.loads(r["pk"]) for r in rows) == list(range(len(lines)))
    assert {json.loads(r["pk"]): r["text"] for r in rows} == dict(enumerate(lines))
    # `zoo search` on the folder: the encoder recorded in the collection, the same answers as the index
    hits = search(SearchConfig(index=str(tmp_path / "idx"), query=(lines[4],), topk=3))
    assert hits[0][0][0] == lines[4] and abs(hits[0][0][1] - 1) < 1e-5
    # the caller's wrong option is the caller's TypeError; a setting the file should not hold names the file
    with pytest.raises(TypeError, match="mmap"):
        SemanticIndex.load(tmp_path / "idx", zoo.from_preset(preset), mmap=False)
    settings = json.loads((tmp_path / "idx" / "index.json").read_text())
    (tmp_path / "idx" / "index.json").write_text(json.dumps({**settings, "nprobe": 8}))
    with pytest.raises(zoo.CheckpointError, match=r"index\.json: unexpected settings \['nprobe'\]"):
        SemanticIndex.load(tmp_path / "idx", zoo.from_preset(preset))


def test_collection_of_another_model_or_dimension_is_refused(db, preset):
    encoder = zoo.from_preset(preset)
    index = SemanticIndex(encoder, backend="milvus", uri=db, collection="owned", model="tiny-a")
    index.add(["你好"], ids=[0])
    with pytest.raises(zoo.ConfigError, match="'owned'.*tiny-a"):
        SemanticIndex(encoder, backend="milvus", uri=db, collection="owned", model="tiny-b")
    with pytest.raises(zoo.ConfigError, match="'owned'.*32-d"):
        SemanticIndex(HashEncoder(), backend="milvus", uri=db, collection="owned")
    assert len(SemanticIndex(encoder, backend="milvus", uri=db, collection="owned", model="tiny-a")) == 1
