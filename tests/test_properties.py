"""Property-based tests (Hypothesis): generated inputs against a reference or an invariant.

CI runs a bounded number of examples per property (``ZOO_HYPOTHESIS_EXAMPLES``, default 150); set it higher for
a longer fuzzing run.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from helpers import require_module

hypothesis = require_module("hypothesis", "pip install hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import zoo  # noqa: E402
from zoo.data.pair_files import read_pairs  # noqa: E402
from zoo.errors import DataError  # noqa: E402
from zoo.evaluation import accuracy, best_threshold  # noqa: E402

EXAMPLES = int(os.environ.get("ZOO_HYPOTHESIS_EXAMPLES", "150"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
VOCAB = Path(__file__).resolve().parent.parent / "data" / "presets" / zoo.DEFAULT_PRESET / "vocab.txt"


# ----------------------------------------------------------------------------------------- tokenizer
@pytest.fixture(scope="module")
def tokenizers():
    transformers = require_module("transformers", "pip install transformers")
    return zoo.Tokenizer(str(VOCAB)), transformers.BertTokenizer(str(VOCAB), do_lower_case=True)


UNICODE = st.characters(blacklist_categories=("Cs",))  # lone surrogates cannot be encoded as UTF-8 text
MIXED = st.one_of(
    UNICODE,
    st.sampled_from(list("，。！？、；：“”‘’（）《》【】ＡＢＣａｂｃ０１２３")),  # full-width forms
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),  # CJK
    st.characters(min_codepoint=0x20000, max_codepoint=0x2FA1F),  # CJK extensions B-F, compatibility
    st.characters(min_codepoint=0x0300, max_codepoint=0x036F),  # combining marks
    st.characters(min_codepoint=0, max_codepoint=0x1F),  # controls
    st.sampled_from(["[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]", " ", "\t", "\u3000", "İ", "ß", "ﬁ"]),
)


@SETTINGS
@given(text=st.lists(MIXED, max_size=80).map("".join))
def test_tokenizer_ids_equal_transformers_on_generated_unicode(tokenizers, text):
    ours, reference = tokenizers
    assert ours.encode(text)[0] == reference(text)["input_ids"]


@settings(max_examples=max(10, EXAMPLES // 10), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.large_base_example,
                                 HealthCheck.data_too_large, HealthCheck.too_slow])
@given(text=st.lists(MIXED, min_size=600, max_size=3000).map("".join))
def test_tokenizer_ids_equal_transformers_on_long_texts(tokenizers, text):
    ours, reference = tokenizers
    assert ours.encode(text)[0] == reference(text)["input_ids"]


# ------------------------------------------------------------------------------------------ thresholds
@SETTINGS
@given(data=st.lists(st.tuples(st.floats(-1, 1, allow_nan=False).map(lambda x: round(x, 3)), st.integers(0, 1)),
                     min_size=1, max_size=60))
def test_threshold_sweep_equals_brute_force(data):
    scores = np.array([s for s, _ in data], dtype="float64")
    labels = np.array([y for _, y in data])
    threshold, acc = best_threshold(scores, labels)
    values = np.unique(scores)
    candidates = np.concatenate([[values[0] - 1], (values[:-1] + values[1:]) / 2, [values[-1] + 1]])
    brute = max(float(np.mean((scores > t) == labels)) for t in candidates)
    assert acc == pytest.approx(brute, abs=1e-12)
    assert accuracy(scores, labels, threshold) == pytest.approx(acc, abs=1e-12)


# ---------------------------------------------------------------------------------------------- losses
@SETTINGS
@given(data=st.lists(st.tuples(st.floats(-1, 1, allow_nan=False), st.sampled_from([0.0, 1.0, 2.5, 5.0])),
                     min_size=2, max_size=32), seed=st.integers(0, 2**31 - 1))
def test_cosent_loss_is_finite_and_invariant_to_batch_order(data, seed):
    from zoo.losses import cosent_loss

    scores = np.array([s for s, _ in data], dtype="float32")
    labels = np.array([y for _, y in data], dtype="float32")
    order = np.random.default_rng(seed).permutation(len(data))
    for gap_weighted in (False, True):
        loss = float(cosent_loss(labels, scores, gap_weighted=gap_weighted))
        shuffled = float(cosent_loss(labels[order], scores[order], gap_weighted=gap_weighted))
        assert np.isfinite(loss) and loss >= 0
        assert shuffled == pytest.approx(loss, rel=1e-5, abs=1e-5)


@SETTINGS
@given(n=st.integers(2, 12), dim=st.integers(2, 16), seed=st.integers(0, 2**31 - 1),
       scale=st.floats(1e-3, 1e3))
def test_in_batch_softmax_loss_is_finite_and_invariant_to_batch_order(n, dim, seed, scale):
    from zoo.losses import in_batch_softmax_loss

    rng = np.random.default_rng(seed)
    a = (rng.normal(size=(n, dim)) * scale).astype("float32")
    b = (rng.normal(size=(n, dim)) * scale).astype("float32")
    order = rng.permutation(n)
    partner = (np.arange(2 * n) + n) % (2 * n)  # SimCSE layout: rows a_1..a_n, b_1..b_n; a_i's positive is b_i
    loss = float(in_batch_softmax_loss(np.concatenate([a, b]), partner, 20.0))
    shuffled = float(in_batch_softmax_loss(np.concatenate([a[order], b[order]]), partner, 20.0))
    assert np.isfinite(loss)
    assert shuffled == pytest.approx(loss, rel=1e-4, abs=1e-4)


# -------------------------------------------------------------------------------------------- data files
FIELD = st.text(st.characters(blacklist_characters="\t\n\r", blacklist_categories=("Cs",)), max_size=30).map(
    lambda t: "句" + t)  # a CJK first character: never a header word, a BOM or an opening CSV quote
ROW = st.tuples(FIELD, FIELD, st.sampled_from(["0", "1", "2.5", "5", "3.0"]))
BAD = st.sampled_from(["only one field", "a\tb", "a\tb\tnot-a-number", "a\tb\tc\td", "a\tb\tnan"])


@SETTINGS
@given(rows=st.lists(ROW, min_size=1, max_size=30), bad=st.none() | st.tuples(st.integers(0, 30), BAD))
def test_pair_file_rows_read_exactly_or_refused_with_line_number(tmp_path, rows, bad):
    lines = ["\t".join(r) for r in rows]
    if bad is not None:
        position = min(bad[0], len(lines))
        lines.insert(position, bad[1])
    path = tmp_path / "pairs.data"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if bad is None:
        data = read_pairs(path)
        assert list(data.texts_a) == [r[0] for r in rows] and list(data.texts_b) == [r[1] for r in rows]
        np.testing.assert_array_equal(data.labels, np.array([float(r[2]) for r in rows], dtype="float32"))
    else:
        with pytest.raises(DataError, match=rf"pairs\.data, line {position + 1}:"):
            read_pairs(path)


# ----------------------------------------------------------------------------------------- in-batch batches
WORDS = ["你好", "再见", "天气", "下雨", "开通", "还款", "花呗", "借呗"]


def clashes(batches, texts):
    """Pairs whose ranked texts an earlier pair of the same batch already holds."""
    count = 0
    for batch in batches:
        held = set()
        for i in batch:
            count += not held.isdisjoint(texts[i])
            held |= texts[i]
    return count


@SETTINGS
@given(rows=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), st.booleans()), min_size=1, max_size=60),
       batch_size=st.integers(1, 9), seed=st.integers(0, 1000), buckets=st.booleans())
def test_duplicate_free_batches_hold_every_pair_once_and_no_ranked_text_twice(rows, batch_size, seed, buckets):
    """In-batch batches (``no_duplicates``): as many batches as plain cutting, each pair once, none over the batch
    size, the same batches for the same (seed, epoch), and no text the ranking loss compares twice in a batch but
    for the pairs counted as left with a repeat (no batch with room was free of their texts)."""
    from zoo.data.pair_files import PairDataset
    from zoo.train.batches import PairBatches, ranked_texts

    data = PairDataset([WORDS[a] for a, _, _ in rows], [WORDS[b] for _, b, _ in rows],
                       np.array([float(p) for *_, p in rows], "float32"))
    labels = np.stack([data.labels, data.labels], axis=1)  # anchor_labels of 0/1 pairs
    tokenizer = zoo.Tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set("".join(WORDS)))])
    source = PairBatches(tokenizer, data, batch_size, 16, labels=labels, length_buckets=buckets, no_duplicates=True)
    batches = source.epoch_batches(seed, 0)
    n = len(rows)
    assert len(batches) == len(source) == -(-n // batch_size) and max(len(b) for b in batches) <= batch_size
    assert sorted(np.concatenate(batches).tolist()) == list(range(n))
    assert [b.tolist() for b in batches] == [b.tolist() for b in source.epoch_batches(seed, 0)]
    texts, report = ranked_texts(data, labels), source.duplicate_moves(seed, 0)
    assert clashes(batches, texts) == report["left_repeated"]
    if all(len(t) == 1 for t in texts) and len({next(iter(t)) for t in texts}) == n:  # nothing repeated
        assert report == {"moved": 0, "left_repeated": 0}


def test_a_triplets_hard_negative_stays_with_its_anchor_and_plain_batches_repeat_texts():
    """A triplet's (anchor, negative, 0) row may share its (anchor, positive, 1) row's batch (the anchor's text is
    compared only as an anchor); without ``no_duplicates``, batches of repeated texts hold false negatives."""
    from zoo.data.pair_files import PairDataset
    from zoo.train.batches import PairBatches, anchor_labels, ranked_texts

    tokenizer = zoo.Tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set("".join(WORDS)))])
    triplet = PairDataset(["花呗", "花呗"], ["开通", "还款"], np.array([1.0, 0.0], "float32"))
    labels = anchor_labels(triplet.labels)
    kept = PairBatches(tokenizer, triplet, 2, 16, labels=labels, no_duplicates=True)
    assert [sorted(b.tolist()) for b in kept.epoch_batches(0, 0)] == [[0, 1]]
    assert kept.duplicate_moves(0, 0) == {"moved": 0, "left_repeated": 0}
    unique = [(WORDS[i] + WORDS[j], WORDS[j] + WORDS[i]) for i in range(2, 8) for j in range(2, 8) if i < j][:12]
    repeated = PairDataset(["你好"] * 4 + [a for a, _ in unique], ["再见"] * 4 + [b for _, b in unique],
                           np.ones(16, "float32"))  # 4 copies of one pair, 2 batches: 2 must share a batch
    labels = anchor_labels(repeated.labels)
    plain = PairBatches(tokenizer, repeated, 8, 16, labels=labels, length_buckets=False)
    fixed = PairBatches(tokenizer, repeated, 8, 16, labels=labels, length_buckets=False, no_duplicates=True)
    texts = ranked_texts(repeated, labels)
    assert clashes(plain.epoch_batches(0, 0), texts) > 0
    assert clashes(fixed.epoch_batches(0, 0), texts) == fixed.duplicate_moves(0, 0)["left_repeated"] == 2
