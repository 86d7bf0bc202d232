"""Batch sources: what the training engine reads.

A batch source has ``len()`` (steps per epoch), ``n`` (examples per epoch) and ``epoch(seed, epoch, start_step)``,
which yields ``(step, inputs, labels)`` from ``start_step`` on. The batches of an epoch are a fixed function of
(seed, epoch), so a resumed run sees exactly the batches the killed one would have. ``PairBatches`` (sentence
pairs in memory, for bi- and cross-encoders), ``StreamingPairBatches`` (the same, read lazily from files of any
size), ``MultiTaskBatches``, the inverse cloze task over unlabelled documents (``InverseClozeBatches``), and the
sources of SimBERT (``SimBERTBatches``), Mirror-BERT (``MirrorBatches``) and DvBERT (``DistillBatches``).
Pretraining's sources live in ``zoo.data.pretraining``.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..tokenizer.wordpiece import batch_length


class PairBatches:
    """Interleaved pair rows [a1, b1, a2, b2, ...] -> (inputs [2B, T], labels [B]), shuffled per epoch; with
    ``joint=True`` one row ``[CLS] a [SEP] b [SEP]`` per pair (cross-encoders) -> (inputs [B, T], labels [B]).

    Texts are tokenised once; each batch is padded to a multiple of 8 tokens. ``no_duplicates`` (in-batch ranking
    losses, as sentence-transformers' NoDuplicatesBatchSampler): no text the ranking loss compares (``ranked_texts``)
    occurs twice in a batch, since a repeated text is a false negative; a pair whose text the batch being cut
    already holds goes into the next batch with room (``duplicate_moves`` counts them; the number of batches stays
    the same).

    :param tokenizer: the ``zoo.Tokenizer``.
    :param dataset: a ``PairDataset``.
    :param batch_size: pairs per batch.
    :param maxlen: tokens per text (per pair with ``joint``).
    :param labels: the labels to train on (None: ``dataset.labels``).
    :param length_buckets: batch pairs of similar length together (less padding), shuffled per epoch.
    :param joint: one ``[CLS] a [SEP] b [SEP]`` row per pair (cross-encoders).
    :param zero_segments: with ``joint``, every segment id 0.
    :param no_duplicates: no text twice in a batch (in-batch ranking losses).
    """

    def __init__(self, tokenizer, dataset, batch_size, maxlen, labels=None, length_buckets=True, joint=False,
                 zero_segments=False, no_duplicates=False):
        self.tokenizer, self.batch_size, self.maxlen = tokenizer, batch_size, maxlen
        self.length_buckets, self.joint, self.zero_segments = length_buckets, joint, zero_segments
        self.no_duplicates = no_duplicates
        self.pieces_a = tokenizer.piece_ids(dataset.texts_a)
        self.pieces_b = tokenizer.piece_ids(dataset.texts_b)
        self.labels = dataset.labels if labels is None else labels
        if no_duplicates:
            self.ranked_texts = ranked_texts(dataset, self.labels)
        self.n = len(self.labels)
        self.lengths = np.array([len(a) + len(b) if joint else max(len(a), len(b))
                                 for a, b in zip(self.pieces_a, self.pieces_b)])

    def __len__(self):
        return math.ceil(self.n / self.batch_size)

    def epoch_order(self, seed, epoch):
        """(the epoch's random generator, its pair order), fixed by (seed, epoch).

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
        return rng, order

    def epoch_batches(self, seed, epoch):
        """The pair indices of every batch of an epoch, fixed by (seed, epoch)."""
        rng, order = self.epoch_order(seed, epoch)
        if self.no_duplicates:
            batches = self.cut_without_duplicates(order)[0]
        else:
            batches = [order[i:i + self.batch_size] for i in range(0, self.n, self.batch_size)]
        if self.length_buckets:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def cut_without_duplicates(self, order):
        """(the ``len(self)`` batches of ``order`` with no ranked text twice in a batch, pairs moved, pairs left with
        a repeat): each pair goes into the first batch with room that does not hold its texts yet (a later one than
        plain cutting when it does), so the number of batches stays that of plain cutting; a pair that fits nowhere
        without a repeat (a text in more pairs than there are batches) goes into the first batch with room, and is
        counted as left with a repeat."""
        count = len(self)
        batches, held = [[] for _ in range(count)], [set() for _ in range(count)]
        first_open, moved, repeats = 0, 0, 0
        for i in order:
            texts = self.ranked_texts[i]
            k = first_open
            while k < count and (len(batches[k]) == self.batch_size or not held[k].isdisjoint(texts)):
                k += 1
            if k == count:
                k, repeats = first_open, repeats + 1
            moved += k != first_open
            batches[k].append(i)
            held[k].update(texts)
            while first_open < count and len(batches[first_open]) == self.batch_size:
                first_open += 1
        return [np.asarray(batch) for batch in batches], moved, repeats

    def duplicate_moves(self, seed, epoch):
        """{"moved": pairs ``no_duplicates`` put into a later batch, "left_repeated": pairs that could go nowhere
        without a repeat} of ``epoch`` (zeros without ``no_duplicates``)."""
        if not self.no_duplicates:
            return {"moved": 0, "left_repeated": 0}
        _, moved, repeats = self.cut_without_duplicates(self.epoch_order(seed, epoch)[1])
        return {"moved": moved, "left_repeated": repeats}

    def epoch(self, seed, epoch, start_step=0):
        batches = self.epoch_batches(seed, epoch)
        for step in range(start_step, len(batches)):
            yield step, *self.make_batch(batches[step])

    def make_batch(self, index):
        """(inputs, labels) of the pairs ``index``."""
        return pair_batch(self.tokenizer, [self.pieces_a[i] for i in index], [self.pieces_b[i] for i in index],
                          self.labels[index], self.maxlen, self.joint, self.zero_segments)


def ranked_texts(dataset, labels):
    """Per pair, the texts the in-batch ranking loss compares, as numbers (the same text, the same number): its
    second text (a candidate for every anchor of the batch) and, for an anchor (labels [N, 2]: the flag of
    ``anchor_labels``; [N]: every pair), its first text. A non-anchor's first text is compared with nothing, so a
    triplet's (anchor, negative, 0) row may share a batch with its (anchor, positive, 1) row: its hard negative."""
    labels = np.asarray(labels)
    anchors = labels[:, 1] > 0 if labels.ndim == 2 else np.ones(len(labels), bool)
    numbers = {}
    return [frozenset((numbers.setdefault(b, len(numbers)),) + ((numbers.setdefault(a, len(numbers)),) if anchor
                                                                  else ()))
            for a, b, anchor in zip(dataset.texts_a, dataset.texts_b, anchors)]


def pair_batch(tokenizer, pieces_a, pieces_b, labels, maxlen, joint=False, zero_segments=False):
    """(inputs, labels) of tokenised pairs: rows a1, b1, a2, b2, ... (bi-encoder) or ``[CLS] a [SEP] b [SEP]``
    (``joint``, cross-encoder; ``zero_segments``: every segment id 0), padded to a multiple of 8 tokens."""
    rows = []
    for a, b in zip(pieces_a, pieces_b):
        if joint:
            ids, segments = tokenizer.assemble(a, b, maxlen)
            rows.append((ids, [0] * len(ids) if zero_segments else segments))
        else:
            rows.append(tokenizer.assemble(a, None, maxlen))
            rows.append(tokenizer.assemble(b, None, maxlen))
    return tokenizer.pad(rows, pad_to=batch_length(rows, maxlen)), labels


class HardNegativeBatches:
    """A ``PairBatches`` (over ``dataset``) whose every batch gets ``per_batch`` more pairs (text, negative(text),
    ``label``): hard negatives made from the batch's own sentences (e.g. ``zoo.data.augment.word_order_rewrite``: the
    same words in another order, labelled as a non-paraphrase).

    The batch's pairs are tried in batch order, those with the highest label first: a pair gives
    (a, negative(a)), or (b, negative(b)) when ``negative(a)`` is None. When fewer than ``per_batch`` pairs give
    one, those found repeat; a batch where none does stays as it is. The negatives depend only on the batch's
    pairs, so the batches of an epoch stay a fixed function of (seed, epoch)."""

    def __init__(self, base, dataset, negative, per_batch, label=0.0):
        self.base, self.texts, self.negative, self.per_batch = base, (dataset.texts_a, dataset.texts_b), negative, \
            per_batch
        self.label = np.asarray(label, np.asarray(base.labels).dtype)
        self.n, self.tried, self.found = base.n, 0, 0

    def __len__(self):
        return len(self.base)

    def epoch_batches(self, seed, epoch):
        return self.base.epoch_batches(seed, epoch)

    def duplicate_moves(self, seed, epoch):
        return self.base.duplicate_moves(seed, epoch)

    def epoch(self, seed, epoch, start_step=0):
        batches = self.epoch_batches(seed, epoch)
        for step in range(start_step, len(batches)):
            yield step, *self.make_batch(batches[step])

    def negatives(self, index):
        """[(piece ids of the text, its negative text)] of up to ``per_batch`` pairs of ``index``."""
        base, labels = self.base, np.asarray(self.base.labels)
        first = labels[index] if labels.ndim == 1 else labels[index, 0]
        found = []
        for i in (index[k] for k in np.argsort(-first, kind="stable")):
            self.tried += 1
            for text, pieces in ((self.texts[0][i], base.pieces_a[i]), (self.texts[1][i], base.pieces_b[i])):
                rewritten = self.negative(text)
                if rewritten is not None:
                    found.append((pieces, rewritten))
                    break
            if len(found) == self.per_batch:
                break
        self.found += len(found)
        return found

    def make_batch(self, index):
        base = self.base
        pieces_a, pieces_b = [base.pieces_a[i] for i in index], [base.pieces_b[i] for i in index]
        y = np.asarray(base.labels)[index]
        found = self.negatives(index)
        if found:
            extra = [found[k % len(found)] for k in range(self.per_batch)]
            pieces_a += [p for p, _ in extra]
            pieces_b += base.tokenizer.piece_ids([t for _, t in extra])
            y = np.concatenate([y, np.broadcast_to(self.label, (self.per_batch, *y.shape[1:]))])
        return pair_batch(base.tokenizer, pieces_a, pieces_b, y, base.maxlen, base.joint, base.zero_segments)








class MultiTaskBatches:
    """One PairBatches per task; an epoch runs every batch of every task once, in an order fixed by (seed, epoch).
    Each batch holds the pairs of one task, so labels of different scales (0/1, STS-B 0-5) never share a batch."""

    def __init__(self, parts):
        self.parts = parts
        self.n = sum(p.n for p in parts)

    def __len__(self):
        return sum(len(p) for p in self.parts)

    def duplicate_moves(self, seed, epoch):
        """The parts' ``duplicate_moves`` summed (a part without them counts 0)."""
        moves = [p.duplicate_moves(seed + k, epoch) for k, p in enumerate(self.parts) if hasattr(p, "duplicate_moves")]
        return {key: sum(m[key] for m in moves) for key in ("moved", "left_repeated")}

    def epoch(self, seed, epoch, start_step=0):
        plan = [(k, i) for k, p in enumerate(self.parts) for i in range(len(p))]
        plan = [plan[j] for j in np.random.default_rng([seed, epoch, 1]).permutation(len(plan))]
        batches = [p.epoch_batches(seed + k, epoch) for k, p in enumerate(self.parts)]
        for step in range(start_step, len(plan)):
            k, i = plan[step]
            yield step, *self.parts[k].make_batch(batches[k][i])


def anchor_labels(labels):
    """[N, 2]: each pair's label and its anchor flag for the in-batch loss (1: a paraphrase, label 1 of 0/1, or
    4 and up of STS-B's 0-5)."""
    from ..data.pair_files import paraphrase_mask

    return np.stack([labels, paraphrase_mask(labels)], axis=1).astype("float32")


def pair_training_batches(tokenizer, train, batch_size, maxlen, *, objective="cosent", batching="task",
                          length_buckets=True, in_batch=False, word_order_negatives=0, seed=42, extra=()):
    """The batch source of a bi-encoder job over one task's pairs or several tasks'.

    :param tokenizer: the ``zoo.Tokenizer``.
    :param train: {task: PairDataset}.
    :param batch_size: pairs per batch.
    :param maxlen: tokens per text.
    :param objective: the loss the labels are made for (``objective_labels``).
    :param batching: with several tasks, "task" (each batch from one task) or "mixed" (all in a batch, graded
        labels scaled to [0, 1]).
    :param length_buckets: as ``PairBatches``'.
    :param in_batch: labels carry the anchor flag (``anchor_labels``) and no batch holds a text twice.
    :param word_order_negatives: N word-order rewrites of each 0/1 task's sentences per batch, as pairs labelled 0
        (``zoo.data.augment``).
    :param seed: the seed of the rewrites and the shuffling.
    :param extra: more batch sources, joined as more parts.
    """
    from ..data.augment import word_order_rewrite
    from ..data.pair_files import PairDataset
    from ..losses import objective_labels

    labels = {t: objective_labels(objective, d.labels) for t, d in train.items()}

    def pairs(dataset, y):
        batches = PairBatches(tokenizer, dataset, batch_size, maxlen, anchor_labels(y) if in_batch else y,
                              length_buckets, no_duplicates=in_batch)
        if word_order_negatives and y.max() <= 1:
            rewrite = functools.partial(word_order_rewrite, seed=seed)
            batches = HardNegativeBatches(batches, dataset, rewrite, word_order_negatives)
        return batches

    if len(train) == 1 or batching == "task":
        parts = [pairs(d, labels[t]) for t, d in train.items()]
    else:
        scaled = [labels[t] / (5.0 if labels[t].max() > 1 else 1.0) for t in train]
        union = PairDataset(sum((d.texts_a for d in train.values()), []), sum((d.texts_b for d in train.values()), []),
                            np.concatenate(scaled).astype("float32"))
        parts = [pairs(union, union.labels)]
    parts += list(extra)
    return parts[0] if len(parts) == 1 else MultiTaskBatches(parts)






class DistillBatches:
    """PairBatches whose labels are teacher-annealed targets, shape [B, teachers, 2]; with ``as_score`` the
    positive-class target averaged over teachers, shape [B] (for CoSENT)."""

    def __init__(self, pairs, gold, teacher_probs, epochs, as_score=False):
        self.pairs, self.gold, self.teacher_probs = pairs, gold.astype("int64"), teacher_probs
        self.n, self.total, self.as_score = pairs.n, epochs * len(pairs), as_score

    def __len__(self):
        return len(self.pairs)

    def epoch(self, seed, epoch, start_step=0):
        onehot = np.eye(2, dtype="float32")
        for step, x, index in self.pairs.epoch(seed, epoch, start_step):
            lam = (epoch * len(self.pairs) + step) / max(self.total - 1, 1)
            index = index.astype("int64")
            targets = lam * onehot[self.gold[index]][:, None, :] + (1 - lam) * self.teacher_probs[index]
            if self.as_score:
                targets = targets[:, :, 1].mean(axis=1)
            yield step, x, targets.astype("float32")




# moved to modules of their own (streaming pair files; SimBERT, Mirror-BERT and inverse-cloze batches), still
# importable from here: looked up on first use, as those modules import this one
_MOVED = {"StreamingPairBatches": "streaming", "streamed_pairs": "streaming", "InverseClozeBatches": "text_batches",
          "SimBERTBatches": "text_batches", "MirrorBatches": "text_batches"}


def __getattr__(name):
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
