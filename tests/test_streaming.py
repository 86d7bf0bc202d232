"""Training pairs streamed from files (zoo.train.StreamingPairBatches, --train-files / --stream): every pair once
per epoch, a fixed function of (seed, epoch), resumable at any step, length buckets within the buffer, bad lines
named; the bi-encoder job trains from gzipped files."""

from __future__ import annotations

import gzip
import itertools
import json

import numpy as np
import pytest

import zoo
from helpers import CJK_CHARS
from helpers import tiny_train_config as config
from zoo.errors import ConfigError, DataError
from zoo.train import PairBatches, StreamingPairBatches


pytestmark = pytest.mark.slow  # trains from streamed files

def split_into_files(source, folder, parts=3):
    """The pairs of ``source`` in ``parts`` files (the middle one gzipped) under ``folder``; returns the lines."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    folder.mkdir()
    size = -(-len(lines) // parts)
    for k in range(parts):
        chunk = "".join(lines[k * size:(k + 1) * size]).encode("utf-8")
        if k == 1:
            (folder / f"part{k}.data.gz").write_bytes(gzip.compress(chunk))
        else:
            (folder / f"part{k}.data").write_bytes(chunk)
    return lines


@pytest.fixture(scope="module")
def tokenizer(tiny_setup):  # noqa: F811
    return zoo.Tokenizer.from_preset(str(tiny_setup / "preset"))


def pairs_of(batch):
    """The (a, b) token-id rows of a bi-encoder batch, as tuples without padding."""
    ids = batch[0]["token_ids"]
    rows = [tuple(r[r != 0]) for r in ids]
    return list(zip(rows[0::2], rows[1::2]))


def test_streamed_epochs_cover_every_pair_once_and_resume_exactly(tiny_setup, tokenizer, tmp_path):  # noqa: F811
    lines = split_into_files(tiny_setup / "data" / "LCQMC.train.data", tmp_path / "files")
    stream = StreamingPairBatches(tokenizer, [tmp_path / "files"], 16, 16, window=4)
    assert stream.n == len(lines) == 480 and len(stream) == 30 and stream.max_label == 1.0
    memory = PairBatches(tokenizer, zoo.data.load_task("LCQMC", "train", str(tiny_setup / "data")), 16, 16,
                         length_buckets=False)
    expected = sorted(p for _, x, y in memory.epoch(0, 0) for p in pairs_of((x, y)))
    epoch = list(stream.epoch(7, 0))
    assert [s for s, _, _ in epoch] == list(range(30))
    assert sorted(p for _, x, y in epoch for p in pairs_of((x, y))) == expected  # each pair once, labels kept
    assert sum(len(y) for _, _, y in epoch) == 480
    again = list(stream.epoch(7, 0))
    assert all(np.array_equal(a[1]["token_ids"], b[1]["token_ids"]) for a, b in zip(epoch, again))
    other = list(stream.epoch(7, 1))
    assert any(not np.array_equal(a[1]["token_ids"], b[1]["token_ids"]) for a, b in zip(epoch, other))
    resumed = list(stream.epoch(7, 0, start_step=11))
    assert [s for s, _, _ in resumed] == list(range(11, 30))
    for (_, x, y), (_, rx, ry) in zip(epoch[11:], resumed):
        assert np.array_equal(x["token_ids"], rx["token_ids"]) and np.array_equal(y, ry)


def test_length_buckets_pad_less_and_limit_cuts(tmp_path, tokenizer):
    rng = np.random.default_rng(0)
    chars = list(dict.fromkeys(CJK_CHARS))[:60]
    with open(tmp_path / "mixed.data", "w", encoding="utf-8") as f:
        for i in range(640):
            n = int(rng.integers(2, 15))
            f.write(f"{''.join(rng.choice(chars, n))}\t{''.join(rng.choice(chars, n))}\t{i % 2}\n")

    def padding(length_buckets):
        source = StreamingPairBatches(tokenizer, tmp_path / "mixed.data", 16, 32, length_buckets=length_buckets)
        return sum(int((x["padding_mask"] == 0).sum()) for _, x, _ in source.epoch(0, 0))

    assert padding(True) < 0.5 * padding(False)
    limited = StreamingPairBatches(tokenizer, tmp_path / "mixed.data", 16, 32, limit=100)
    assert limited.n == 100 and sum(len(y) for _, _, y in limited.epoch(0, 0)) == 100


def test_bad_streamed_input_is_named(tmp_path, tokenizer, tiny_setup):  # noqa: F811
    bad = tmp_path / "bad.data.gz"
    bad.write_bytes(gzip.compress("甲\t乙\t1\n丙\t丁\n".encode("utf-8")))
    with pytest.raises(DataError, match=r"bad.data.gz, line 2: expected 3 TAB-separated fields"):
        StreamingPairBatches(tokenizer, [bad], 4, 16)
    with pytest.raises(ConfigError, match="nope.data not found"):
        StreamingPairBatches(tokenizer, [tmp_path / "nope.data"], 4, 16)
    (tmp_path / "empty.data").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match="no training pairs"):
        StreamingPairBatches(tokenizer, [tmp_path / "empty.data"], 4, 16)
    with pytest.raises(ConfigError, match="--stream / --train-files train one task"):
        config(tiny_setup, tmp_path / "x", tasks=("LCQMC", "BQ"), stream=True)


def test_bi_encoder_job_trains_from_streamed_files(tiny_setup, tmp_path):  # noqa: F811
    """`--train-files` (a folder with a gzipped part): the job learns the synthetic task as from memory, and
    results.json names the streamed files."""
    from zoo.jobs.bi_encoder import run

    split_into_files(tiny_setup / "data" / "LCQMC.train.data", tmp_path / "files")
    results = run(config(tiny_setup, tmp_path / "run", epochs=1, train_files=(str(tmp_path / "files"),)))
    assert results["epochs"][1]["valid_spearman"] > results["epochs"][0]["valid_spearman"] + 20
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["data_files"]["train"]["pairs"] == 480 and saved["data_files"]["train"]["streamed"]
    assert len(saved["data_files"]["train"]["paths"]) == 3 and saved["config"]["train_files"] == [str(tmp_path / "files")]


def test_streamed_pretraining_is_lazy_resumable_and_never_trains_held_out_documents(tmp_path, tokenizer):
    """StreamingPretrainingBatches over 2 corpus files (one gzipped) and a task train file: batches fixed by the
    seed, round 1 started cold at step 3 equals the tail of a round that continued from round 0, the skipped
    steps are not tokenised, at most one buffer of documents is read ahead, held-out documents never train, and every
    other document does within one pass."""
    from zoo.data.corpus import document_sources
    from zoo.data.pretraining import StreamingPretrainingBatches

    chars = list(dict.fromkeys(CJK_CHARS))[:60]
    rng = np.random.default_rng(0)
    docs = ["。".join("".join(rng.choice(chars, 6)) for _ in range(3)) + "。" for _ in range(90)]
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("\n".join(docs[:50]) + "\n", encoding="utf-8")
    (tmp_path / "corpus" / "b.txt.gz").write_bytes(gzip.compress(("\n".join(docs[50:]) + "\n").encode("utf-8")))
    sources = document_sources([tmp_path / "corpus"])
    read = []

    def counted(name, documents):
        def documents_counted():
            for doc in documents():
                read.append(doc)
                yield doc
        return name, documents_counted

    def batches(**kw):
        return StreamingPretrainingBatches(tokenizer, [counted(*s) for s in sources], batch_size=4, steps=6,
                                           maxlen=24, window=10, held_out_docs=8, seed=3, **kw)

    def rows(source, epoch, start=0):
        return [(step, x["truth_ids"].tolist(), x["token_ids"].tolist()) for step, x, _ in
                source.epoch(7, epoch, start)]

    first = batches()
    assert len(first.held_out_documents) == 8 and first.held_out_documents == docs[:8]
    read.clear()
    stream = first.epoch(7, 0)
    next(stream)
    assert len(read) <= 8 + 10, len(read)  # the held-out ones skipped, then one buffer
    continued, starts = batches(), []
    real_stream = continued.stream
    continued.stream = lambda seed, skip=0: starts.append(skip) or real_stream(seed, skip)
    whole = rows(continued, 0) + rows(continued, 1)
    assert whole == rows(batches(), 0) + rows(batches(), 1)
    first_of_round_2 = [next(continued.epoch(7, 2))[1]["truth_ids"].tolist() for _ in range(2)]  # asked twice
    assert first_of_round_2[0] == first_of_round_2[1]
    assert starts == [0]  # rounds 1 and 2 continued round 0's stream; a step asked again was not read again
    cold, tokenised = batches(), []
    real = cold.example
    cold.example = lambda planned: tokenised.append(planned) or real(planned)
    assert rows(cold, 1, 3) == [r for r in whole if r[0] >= 3][-3:]
    assert len(tokenised) == 3 * 4  # only the three batches it yields
    # one pass (8 buffers of 10 documents -> 2 batches each; 2 documents left over per buffer): every example a
    # different document, none held out
    trained = [p[0][0] for batch in itertools.islice(first.stream(7), 16) for p in batch]
    assert len(set(trained)) == 64 and set(trained) <= {d.split("。")[0] + "。" for d in docs[8:]}
    with pytest.raises(ValueError, match="fewer than 4 training examples"):
        next(StreamingPretrainingBatches(tokenizer, sources, batch_size=4, steps=2, maxlen=24, window=2,
                                         held_out_docs=89).epoch(7, 0))
