"""Batch sources: what the training engine reads.

A batch source has ``len()`` (steps per epoch), ``n`` (examples per epoch) and ``epoch(seed, epoch, start_step)``,
which yields ``(step, inputs, labels)`` from ``start_step`` on. The batches of an epoch are a fixed function of
(seed, epoch), so a resumed run sees exactly the batches the killed one would have. ``PairBatches`` (sentence
pairs in memory, for bi- and cross-encoders), ``StreamingPairBatches`` (the same, read lazily from files of any
size) and ``MultiTaskBatches`` live here; the other jobs' sources live with their job.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..data import iter_pairs
from ..errors import ConfigError
from ..logs import batch_length, log


class PairBatches:
    """Interleaved pair rows [a1, b1, a2, b2, ...] -> (inputs [2B, T], labels [B]), shuffled per epoch; with
    ``joint=True`` one row ``[CLS] a [SEP] b [SEP]`` per pair (cross-encoders) -> (inputs [B, T], labels [B]).

    Texts are tokenised once; each batch is padded to a multiple of 8 tokens.
    """

    def __init__(self, tokenizer, dataset, batch_size, maxlen, labels=None, length_buckets=True, joint=False,
                 zero_segments=False):
        self.tokenizer, self.batch_size, self.maxlen = tokenizer, batch_size, maxlen
        self.length_buckets, self.joint, self.zero_segments = length_buckets, joint, zero_segments
        self.pieces_a = tokenizer.piece_ids(dataset.texts_a)
        self.pieces_b = tokenizer.piece_ids(dataset.texts_b)
        self.labels = dataset.labels if labels is None else labels
        self.n = len(self.labels)
        self.lengths = np.array([len(a) + len(b) if joint else max(len(a), len(b))
                                 for a, b in zip(self.pieces_a, self.pieces_b)])

    def __len__(self):
        return math.ceil(self.n / self.batch_size)

    def epoch_batches(self, seed, epoch):
        """The pair indices of every batch of an epoch, fixed by (seed, epoch).

        With ``length_buckets``, a shuffled window of 50 batches is sorted by pair length before it is cut into
        batches (then the batches are shuffled): far less padding, the same pairs.
        """
        rng = np.random.default_rng([seed, epoch])
        order = rng.permutation(self.n)
        if self.length_buckets:
            window = 50 * self.batch_size
            for start in range(0, self.n, window):
                chunk = order[start:start + window]
                order[start:start + window] = chunk[np.argsort(self.lengths[chunk], kind="stable")]
        batches = [order[i:i + self.batch_size] for i in range(0, self.n, self.batch_size)]
        if self.length_buckets:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def epoch(self, seed, epoch, start_step=0):
        batches = self.epoch_batches(seed, epoch)
        for step in range(start_step, len(batches)):
            yield step, *self.make_batch(batches[step])

    def make_batch(self, index):
        """(inputs, labels) of the pairs ``index``."""
        return pair_batch(self.tokenizer, [self.pieces_a[i] for i in index], [self.pieces_b[i] for i in index],
                          self.labels[index], self.maxlen, self.joint, self.zero_segments)


def pair_batch(tokenizer, pieces_a, pieces_b, labels, maxlen, joint=False, zero_segments=False):
    """(inputs, labels) of tokenised pairs: rows a1, b1, a2, b2, ... (bi-encoder) or ``[CLS] a [SEP] b [SEP]``
    (``joint``, cross-encoder; ``zero_segments``: every segment id 0), padded to a multiple of 8 tokens."""
    rows = []
    for a, b in zip(pieces_a, pieces_b):
        if joint:
            ids, segments = tokenizer._assemble(a, b, maxlen)
            rows.append((ids, [0] * len(ids) if zero_segments else segments))
        else:
            rows.append(tokenizer._assemble(a, None, maxlen))
            rows.append(tokenizer._assemble(b, None, maxlen))
    return tokenizer.pad(rows, pad_to=batch_length(rows, maxlen)), labels


class StreamingPairBatches:
    """``PairBatches`` read lazily from pair files (``.data``/``.tsv``, optionally ``.gz``; files or folders of
    them), for train splits larger than memory: memory holds one buffer of texts, whatever the files' size.

    An epoch reads the files (in an order fixed by (seed, epoch)) into a buffer of ``window`` batches; each buffer
    is shuffled, sorted by text length in characters (``length_buckets``; characters, so that a resumed run skips
    the batches before its step without tokenising them), cut into batches, and its batches shuffled. Only the batches
    that train are tokenised, in the engine's background producer, which overlaps the training step. The batches
    of an epoch are a fixed function of (seed, epoch): a killed run resumes (it reads the files again up to its
    step). ``labels``: a function applied to each batch's labels (e.g. the objective's scaling). One counting pass
    at construction gives ``n`` and checks every line (a bad one raises DataError naming file and line)."""

    def __init__(self, tokenizer, paths, batch_size, maxlen, labels=None, window=50, length_buckets=True, joint=False,
                 zero_segments=False, limit=None):
        self.tokenizer, self.batch_size, self.maxlen, self.window = tokenizer, batch_size, maxlen, window
        self.length_buckets = length_buckets
        self.joint, self.zero_segments, self.label_fn, self.limit = joint, zero_segments, labels, limit
        self.paths = pair_files(paths)
        self.n, self.max_label = 0, -np.inf
        for _, _, label in self.rows(range(len(self.paths))):
            self.n += 1
            self.max_label = max(self.max_label, label)
        if self.n == 0:
            raise ConfigError(f"no training pairs in {self.paths}")
        log.info("streaming %d train pairs from %d file(s)", self.n, len(self.paths))

    def __len__(self):
        return math.ceil(self.n / self.batch_size)

    def rows(self, order):
        """(text_a, text_b, label) of the files in ``order``, up to ``limit`` pairs."""
        count = 0
        for k in order:
            for row in iter_pairs(self.paths[k]):
                if self.limit is not None and count >= self.limit:
                    return
                count += 1
                yield row

    def buffers(self, rng):
        order = rng.permutation(len(self.paths)) if len(self.paths) > 1 else [0]
        buffer, size = [], self.window * self.batch_size
        for row in self.rows(order):
            buffer.append(row)
            if len(buffer) == size:
                yield buffer
                buffer = []
        if buffer:
            yield buffer

    def epoch(self, seed, epoch, start_step=0):
        rng = np.random.default_rng([seed, epoch])
        step = 0
        for buffer in self.buffers(rng):
            order = rng.permutation(len(buffer))
            if self.length_buckets:
                chars = np.array([len(a) + len(b) if self.joint else max(len(a), len(b)) for a, b, _ in buffer])
                order = order[np.argsort(chars[order], kind="stable")]
            batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
            for j in rng.permutation(len(batches)):
                if step >= start_step:
                    yield step, *self.make_batch([buffer[i] for i in batches[j]])
                step += 1

    def make_batch(self, rows):
        labels = np.array([r[2] for r in rows], "float32")
        return pair_batch(self.tokenizer, self.tokenizer.piece_ids([r[0] for r in rows]),
                          self.tokenizer.piece_ids([r[1] for r in rows]),
                          labels if self.label_fn is None else self.label_fn(labels), self.maxlen, self.joint,
                          self.zero_segments)


def pair_files(paths):
    """Files of ``paths`` (files, or folders whose files are read in name order); ConfigError naming a missing
    one."""
    files = []
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        path = os.fspath(path)
        if os.path.isdir(path):
            files += sorted(os.path.join(path, f) for f in os.listdir(path)
                            if os.path.isfile(os.path.join(path, f)) and not f.startswith("."))
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise ConfigError(f"--train-files: {path} not found")
    if not files:
        raise ConfigError(f"--train-files: no files in {paths}")
    return files


class MultiTaskBatches:
    """One PairBatches per task; an epoch runs every batch of every task once, in an order fixed by (seed, epoch).
    Each batch holds the pairs of one task, so labels of different scales (0/1, STS-B 0-5) never share a batch."""

    def __init__(self, parts):
        self.parts = parts
        self.n = sum(p.n for p in parts)

    def __len__(self):
        return sum(len(p) for p in self.parts)

    def epoch(self, seed, epoch, start_step=0):
        plan = [(k, i) for k, p in enumerate(self.parts) for i in range(len(p))]
        plan = [plan[j] for j in np.random.default_rng([seed, epoch, 1]).permutation(len(plan))]
        batches = [p.epoch_batches(seed + k, epoch) for k, p in enumerate(self.parts)]
        for step in range(start_step, len(plan)):
            k, i = plan[step]
            yield step, *self.parts[k].make_batch(batches[k][i])
