"""Batch sources: what the training engine reads.

A batch source has ``len()`` (steps per epoch), ``n`` (examples per epoch) and ``epoch(seed, epoch, start_step)``,
which yields ``(step, inputs, labels)`` from ``start_step`` on. The batches of an epoch are a fixed function of
(seed, epoch), so a resumed run sees exactly the batches the killed one would have. ``PairBatches`` (sentence
pairs, for bi- and cross-encoders) and ``MultiTaskBatches`` live here; the other jobs' sources live with their job.
"""

from __future__ import annotations

import math

import numpy as np

from ..logs import batch_length


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
        rows = []
        for i in index:
            if self.joint:  # cross-encoder: one row [CLS] a [SEP] b [SEP]
                ids, segments = self.tokenizer._assemble(self.pieces_a[i], self.pieces_b[i], self.maxlen)
                rows.append((ids, [0] * len(ids) if self.zero_segments else segments))
            else:  # bi-encoder: rows a_i, b_i interleaved
                rows.append(self.tokenizer._assemble(self.pieces_a[i], None, self.maxlen))
                rows.append(self.tokenizer._assemble(self.pieces_b[i], None, self.maxlen))
        return self.tokenizer.pad(rows, pad_to=batch_length(rows, self.maxlen)), self.labels[index]


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
