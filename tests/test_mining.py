"""Hard-negative mining (``zoo.retrieval.mine_hard_negatives``, ``zoo mine-negatives``): what is skipped, what is
kept, and a triplet file the bi-encoder job reads."""

from __future__ import annotations

import json

import numpy as np
import pytest

import zoo
from zoo.data.pair_files import read_pairs
from zoo.errors import ConfigError
from zoo.retrieval import mine_hard_negatives


class Vectors:
    """An encoder of fixed vectors: each text's cosine to the anchor "q" is the number its name ends in / 10."""

    def __init__(self):
        self.calls = []

    def encode(self, texts, batch_size=64, engine="auto"):
        self.calls.append(list(texts))
        rows = []
        for text in texts:
            if text.startswith("q"):
                rows.append([1.0, 0.0])
            else:
                c = int(text[-1]) / 10
                rows.append([c, np.sqrt(1 - c * c)])
        return np.array(rows, "float32")


class Judge:
    """A cross-encoder that calls every text ending in 8 a paraphrase."""

    def __init__(self):
        self.scored = []

    def score(self, pairs):
        self.scored += [b for _, b in pairs]
        return np.array([0.9 if b.endswith("8") else 0.1 for _, b in pairs])


CORPUS = [f"t{i}" for i in range(10)]  # cosines 0.0 .. 0.9 to the anchor


def test_candidates_are_ranked_filtered_and_never_a_positive():
    pairs = [("q", "t5"), ("q", "t6")]  # the anchor's two positives are never its negatives
    triplets, report = mine_hard_negatives(pairs, Vectors(), CORPUS, num_negatives=2)
    assert triplets == [("q", "t5", "t9"), ("q", "t5", "t8"), ("q", "t6", "t9"), ("q", "t6", "t8")]
    assert (report.anchors, report.pairs, report.triplets) == (1, 2, 4)
    skipped, _ = mine_hard_negatives(pairs, Vectors(), CORPUS, range_min=2, range_max=4)
    assert [n for *_, n in skipped] == ["t7", "t7"]  # ranks 2-3 of t9 t8 t7 t4 ...: the closest two skipped
    below, report = mine_hard_negatives([("q", "t6")], Vectors(), CORPUS, margin=0.15)
    assert below == [("q", "t6", "t4")] and report.removed_by_margin == 4  # t9 t8 t7 t5 score above 0.6 - 0.15
    capped, report = mine_hard_negatives([("q", "t6")], Vectors(), CORPUS, max_score=0.75)
    assert capped == [("q", "t6", "t7")] and report.removed_by_max_score == 2
    judge = Judge()
    judged, report = mine_hard_negatives([("q", "t6")], Vectors(), CORPUS, num_negatives=2, cross_encoder=judge)
    assert judged == [("q", "t6", "t9"), ("q", "t6", "t7")] and report.removed_by_cross_encoder == 1
    assert judge.scored == ["t9", "t8", "t7", "t5"]  # in rank order, two per wanted negative at a time
    none, report = mine_hard_negatives([("q", "t6")], Vectors(), CORPUS, max_score=-0.5)
    assert none == [] and report.pairs_without_negative == 1


def test_default_corpus_is_the_positives_and_bad_settings_are_named():
    triplets, _ = mine_hard_negatives([("q1", "t3"), ("q2", "t7")], Vectors(), num_negatives=3)
    assert triplets == [("q1", "t3", "t7"), ("q2", "t7", "t3")]
    for kwargs, name in [({"num_negatives": 0}, "num_negatives"), ({"range_min": 5, "range_max": 5}, "range_max"),
                         ({"range_min": -1}, "range_min")]:
        with pytest.raises(ConfigError, match=name) as e:
            mine_hard_negatives([("q", "t1")], Vectors(), CORPUS, **kwargs)
        assert e.value.param == name


def test_zoo_mine_negatives_writes_triplets_the_bi_encoder_reads(tiny_setup, tmp_path):  # noqa: F811
    from zoo.cli import main

    train = zoo.data.load_task("LCQMC", "train", str(tiny_setup / "data")).head(40)
    source = tmp_path / "pairs.tsv"
    source.write_text("".join(f"{a}\t{b}\t{int(y)}\n" for a, b, y in zip(train.texts_a, train.texts_b, train.labels)),
                      encoding="utf-8")
    encoder = zoo.SentenceEncoder.from_preset(tiny_setup / "preset", pooling="mean", maxlen=16)
    encoder.save_to_preset(tmp_path / "encoder")
    out = tmp_path / "mined.tsv"
    assert main(["mine-negatives", "--input", str(source), "--model", str(tmp_path / "encoder"), "--output", str(out),
                 "--negatives", "2", "--range-min", "1"]) == 0
    mined = read_pairs(out)
    positives = int((train.labels == 1).sum())
    assert mined.triplets == 2 * positives and mined.format == "tsv"  # every positive pair got its two negatives
    known = {(a, b) for a, b, y in zip(train.texts_a, train.texts_b, train.labels) if y == 1}
    rows = list(zip(mined.texts_a[::2], mined.texts_b[::2], mined.texts_b[1::2]))
    assert {(a, p) for a, p, _ in rows} == known and all(n != p and (a, n) not in known for a, p, n in rows)
    report = json.loads((tmp_path / "mined.tsv.json").read_text())
    assert report["triplets"] == 2 * positives and report["command"].startswith("zoo mine-negatives --input")
    with pytest.raises(SystemExit) as refused:  # a usage error before anything is read
        main(["mine-negatives", "--input", str(source), "--output", str(out), "--range-min", "3", "--range-max", "2"])
    assert refused.value.code == 2
