"""Batch sources: what the training engine reads.

A batch source has ``len()`` (steps per epoch), ``n`` (examples per epoch) and ``epoch(seed, epoch, start_step)``,
which yields ``(step, inputs, labels)`` from ``start_step`` on. The batches of an epoch are a fixed function of
(seed, epoch), so a resumed run sees exactly the batches the killed one would have. ``PairBatches`` (sentence
pairs in memory, for bi- and cross-encoders), ``StreamingPairBatches`` (the same, read lazily from files of any
size), ``MultiTaskBatches``, the inverse cloze task over unlabelled documents (``InverseClozeBatches``), and the
sources of SimBERT (``SimBERTBatches``), Mirror-BERT (``MirrorBatches``) and DvBERT (``DistillBatches``).
Pretraining's sources live in ``zoo.pretraining_data``.
"""

from __future__ import annotations

import functools
import math
import os

import numpy as np

from ..augment import span_mask
from ..data import iter_pairs, truncate_at_punctuation
from ..errors import ConfigError
from ..logs import log
from ..tokenizer import batch_length


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
            ids, segments = tokenizer.assemble(a, b, maxlen)
            rows.append((ids, [0] * len(ids) if zero_segments else segments))
        else:
            rows.append(tokenizer.assemble(a, None, maxlen))
            rows.append(tokenizer.assemble(b, None, maxlen))
    return tokenizer.pad(rows, pad_to=batch_length(rows, maxlen)), labels


class HardNegativeBatches:
    """A ``PairBatches`` (over ``dataset``) whose every batch gets ``per_batch`` more pairs (text, negative(text),
    ``label``): hard negatives made from the batch's own sentences (e.g. ``zoo.augment.word_order_rewrite``: the
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
                 zero_segments=False, limit=None, columns=None, label_kind="auto", skip_bad_lines=False):
        self.tokenizer, self.batch_size, self.maxlen, self.window = tokenizer, batch_size, maxlen, window
        self.reading = {"columns": columns, "labels": label_kind, "skip_bad_lines": skip_bad_lines}
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
            for row in iter_pairs(self.paths[k], **self.reading):
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


def streamed_pairs(tokenizer, task, batch_size, maxlen, label_fn, data_dir=None, files=None, columns=None,
                   labels="auto", skip_bad_lines=False, **kwargs):
    """``StreamingPairBatches`` over ``files["train"]`` (your file, folder or list of them), or else ``task``'s
    train file (in ``data_dir``, as ``zoo.data.resolve_data_dir``); ``label_fn(y, graded)`` maps each batch's labels
    (``graded``: the files hold labels above 1, as STS-B's 0-5, or ``labels="graded"``); ``columns``, ``labels``,
    ``skip_bad_lines`` as ``zoo.data.read_pairs`` (``DataOptions.reading`` gives them); ``kwargs`` go to
    ``StreamingPairBatches`` (``limit``, ``length_buckets``, ``joint``, ...)."""
    from ..data import resolve_data_dir, task_file

    paths = (files or {}).get("train") or [task_file(task, "train", resolve_data_dir(task, data_dir))]
    source = StreamingPairBatches(tokenizer, paths, batch_size, maxlen, columns=columns, label_kind=labels,
                                  skip_bad_lines=skip_bad_lines, **kwargs)
    graded = source.max_label > 1 or labels == "graded"
    source.label_fn = lambda y: label_fn(y, graded)
    return source



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
            raise ConfigError(f"paths: {path} not found")
    if not files:
        raise ConfigError(f"paths: no files in {paths}")
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


def anchor_labels(labels):
    """[N, 2]: each pair's label and its anchor flag for the in-batch loss (1: a paraphrase, label 1 of 0/1, or
    4 and up of STS-B's 0-5)."""
    top = 5.0 if labels.max() > 1 else 1.0
    return np.stack([labels, labels >= 0.8 * top], axis=1).astype("float32")


def pair_training_batches(tokenizer, train, batch_size, maxlen, *, objective="cosent", batching="task",
                          length_buckets=True, in_batch=False, word_order_negatives=0, seed=42, extra=()):
    """The batch source of a bi-encoder over ``train`` ({task: PairDataset}): one task's pairs, or several tasks'
    (``batching`` "task": each batch from one task; "mixed": all in a batch, graded labels scaled to [0, 1]), labels
    as ``objective`` wants them; with ``word_order_negatives`` N, each 0/1 task's batches get N word-order
    rewrites of their sentences as pairs labelled 0 (``zoo.augment``); with ``in_batch``, labels carry the anchor
    flag (``anchor_labels``); ``extra`` batch sources join as more parts."""
    from ..augment import word_order_rewrite
    from ..data import PairDataset
    from ..losses import objective_labels

    labels = {t: objective_labels(objective, d.labels) for t, d in train.items()}

    def pairs(dataset, y):
        batches = PairBatches(tokenizer, dataset, batch_size, maxlen, anchor_labels(y) if in_batch else y,
                              length_buckets)
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


class InverseClozeBatches:
    """The inverse cloze task (Lee et al. 2019, "Latent Retrieval for Weakly Supervised Open Domain Question
    Answering", ORQA): unlabelled documents -> (query, passage) pairs for an in-batch ranking loss.

    In each document with at least 2 sentences, one sentence of ``min_chars``-``max_chars`` characters is the
    query and the sentences around it the passage (``zoo.corpus.cloze_passage``: up to ``passage_chars``
    characters, without the query, or with it at rate ``keep`` as ORQA's 10%, so that shared words still count);
    the batch's other passages are its negatives. Rows are interleaved (query, passage) as ``PairBatches``' and
    labels [B, 2] are ones: a CoSENT label that orders nothing and the anchor flag of
    ``zoo.losses.CoSENTInBatchLoss``. ``query_prefix`` goes before each query (an asymmetric "query: " marker).
    An epoch draws one sentence of each document (of a fixed sample of ``limit`` documents), a fixed function of
    (seed, epoch), so a resumed run sees the same batches. Usable as a part of ``MultiTaskBatches``."""

    def __init__(self, tokenizer, documents, batch_size, maxlen, passage_chars=200, query_prefix="", keep=0.1,
                 limit=None, min_chars=5, max_chars=64, seed=0):
        from ..corpus import sentences_of

        self.tokenizer, self.batch_size, self.maxlen, self.passage_chars = tokenizer, batch_size, maxlen, passage_chars
        self.query_prefix, self.keep = query_prefix, keep
        self.sentences, self.candidates = [], []
        for doc in documents:
            sentences = sentences_of(doc)
            fits = [i for i, t in enumerate(sentences) if min_chars <= len(t) <= max_chars]
            if len(sentences) >= 2 and fits:
                self.sentences.append(sentences)
                self.candidates.append(fits)
        if limit is not None and limit < len(self.sentences):
            keep_docs = np.sort(np.random.default_rng(seed).choice(len(self.sentences), limit, replace=False))
            self.sentences = [self.sentences[i] for i in keep_docs]
            self.candidates = [self.candidates[i] for i in keep_docs]
        self.n = len(self.sentences)
        if self.n == 0:
            raise ConfigError("no document with 2 or more sentences for the inverse cloze task")
        self.labels = np.ones((self.n, 2), "float32")

    def __len__(self):
        return math.ceil(self.n / self.batch_size)

    def epoch_batches(self, seed, epoch):
        """Per batch, rows (document, query sentence, keep it in the passage) fixed by (seed, epoch)."""
        rng = np.random.default_rng([seed, epoch, 2])
        order = rng.permutation(self.n)
        picks = np.array([c[rng.integers(len(c))] for c in self.candidates])
        kept = rng.random(self.n) < self.keep
        rows = np.stack([order, picks[order], kept[order]], axis=1)
        return [rows[i:i + self.batch_size] for i in range(0, self.n, self.batch_size)]

    def epoch(self, seed, epoch, start_step=0):
        batches = self.epoch_batches(seed, epoch)
        for step in range(start_step, len(batches)):
            yield step, *self.make_batch(batches[step])

    def examples(self, rows):
        """(query, passage) texts of rows (document, sentence, keep)."""
        from ..corpus import cloze_passage

        return [(self.query_prefix + self.sentences[d][i], cloze_passage(self.sentences[d], i, self.passage_chars,
                                                                         bool(k))) for d, i, k in rows]

    def make_batch(self, rows):
        pairs = self.examples(rows)
        return pair_batch(self.tokenizer, self.tokenizer.piece_ids([q for q, _ in pairs]),
                          self.tokenizer.piece_ids([p for _, p in pairs]), self.labels[:len(pairs)], self.maxlen)


class SimBERTBatches:
    """Groups of similar texts -> SimBERT batches: per group two distinct texts (a, b), both row orders
    ``[CLS] a [SEP] b [SEP]`` and ``[CLS] b [SEP] a [SEP]`` next to each other. Fixed by (seed, epoch, step)."""

    def __init__(self, tokenizer, groups, batch_size=64, maxlen=32):
        self.tokenizer, self.groups, self.batch_size, self.maxlen = tokenizer, groups, batch_size, maxlen
        self.n = len(groups)

    def __len__(self):
        return -(-self.n // self.batch_size)

    def epoch(self, seed, epoch, start_step=0):
        order = np.random.default_rng([seed, epoch]).permutation(self.n)
        for step in range(start_step, len(self)):
            rng = np.random.default_rng([seed, epoch, step])
            rows = []
            for g in order[step * self.batch_size:(step + 1) * self.batch_size]:
                i, j = rng.choice(len(self.groups[g]), 2, replace=False)
                a = truncate_at_punctuation(self.groups[g][i], self.maxlen - 2)
                b = truncate_at_punctuation(self.groups[g][j], self.maxlen - 2)
                rows.append(self.tokenizer.encode(a, b, maxlen=2 * self.maxlen))
                rows.append(self.tokenizer.encode(b, a, maxlen=2 * self.maxlen))
            batch = self.tokenizer.pad(rows, pad_to=batch_length(rows))
            yield step, batch, np.zeros(len(rows) // 2, "float32")


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


class MirrorBatches:
    """Sentences -> [N originals; N augmented copies] rows (Mirror-BERT; SimCSE when ``k=0``: dropout only)."""

    def __init__(self, tokenizer, sentences, batch_size=200, maxlen=50, k=5, min_chars=6, pad_to_maxlen=True):
        self.tok, self.sentences, self.batch_size, self.maxlen = tokenizer, list(sentences), batch_size, maxlen
        self.k, self.min_chars, self.pad_to_maxlen = k, min_chars, pad_to_maxlen
        self.n = len(self.sentences) // batch_size * batch_size  # drop_last, as the original

    def __len__(self):
        return self.n // self.batch_size

    def epoch(self, seed, epoch, start_step=0):
        order = np.random.default_rng([seed, epoch]).permutation(len(self.sentences))
        for step in range(start_step, len(self)):
            rng = np.random.default_rng([seed, epoch, step])
            texts = [self.sentences[i] for i in order[step * self.batch_size:(step + 1) * self.batch_size]]
            views = texts + [span_mask(t, self.k, self.min_chars, rng) for t in texts]
            x = self.tok(views, maxlen=self.maxlen, pad_to=self.maxlen if self.pad_to_maxlen else None)
            yield step, x, np.zeros(len(texts), "float32")
