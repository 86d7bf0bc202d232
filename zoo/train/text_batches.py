"""Batch sources over texts without pair labels: the inverse cloze task over documents (``InverseClozeBatches``),
SimBERT's synonym groups (``SimBERTBatches``) and Mirror-BERT's self-pairs (``MirrorBatches``); batch sources as
``zoo.train.batches`` describes them."""

from __future__ import annotations

import math

import numpy as np

from ..data.augment import span_mask
from ..data.tasks import truncate_at_punctuation
from ..errors import ConfigError
from ..tokenizer.wordpiece import batch_length
from .batches import pair_batch



class InverseClozeBatches:
    """The inverse cloze task (Lee et al. 2019, "Latent Retrieval for Weakly Supervised Open Domain Question
    Answering", ORQA): unlabelled documents -> (query, passage) pairs for an in-batch ranking loss.

    In each document with at least 2 sentences, one sentence of ``min_chars``-``max_chars`` characters is the
    query and the sentences around it the passage (``zoo.data.corpus.cloze_passage``: up to ``passage_chars``
    characters, without the query, or with it at rate ``keep`` as ORQA's 10%, so that shared words still count);
    the batch's other passages are its negatives. Rows are interleaved (query, passage) as ``PairBatches``' and
    labels [B, 2] are ones: a CoSENT label that orders nothing and the anchor flag of
    ``zoo.losses.CoSENTInBatchLoss``. ``query_prefix`` goes before each query (an asymmetric "query: " marker).
    An epoch draws one sentence of each document (of a fixed sample of ``limit`` documents), a fixed function of
    (seed, epoch), so a resumed run sees the same batches. Usable as a part of ``MultiTaskBatches``."""

    def __init__(self, tokenizer, documents, batch_size, maxlen, passage_chars=200, query_prefix="", keep=0.1,
                 limit=None, min_chars=5, max_chars=64, seed=0):
        from ..data.corpus import sentences_of

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
        from ..data.corpus import cloze_passage

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
