"""Pretraining examples and dynamic masking: documents -> ``[CLS] A [SEP] B [SEP]`` pairs (NSP) or single chunks,
BERT masking (whole words with jieba), the masked positions kept for the MLM head, and TACO's sampling."""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..tokenizer.wordpiece import batch_length
from .corpus import SENTENCE_END


def word_piece_ids(tokenizer, text, wwm):
    """(piece ids, word ids): with ``wwm`` the text is cut into words by jieba and every piece of a word shares
    its word id (each word is tokenised on its own); otherwise every piece is its own word."""
    if not wwm:
        ids = tokenizer.piece_ids([text])[0]
        return ids, list(range(len(ids)))
    import jieba

    jieba.setLogLevel(60)
    words = [w for w in jieba.lcut(text) if w.strip()]
    ids, word_ids = [], []
    for i, pieces in enumerate(tokenizer.piece_ids(words)):
        ids += pieces
        word_ids += [i] * len(pieces)
    return ids, word_ids


class PretrainingExamples:
    """Documents -> ``[CLS] A [SEP] B [SEP]`` pairs (NSP: B follows A, or with probability 0.5 comes from another
    document) or, without NSP, ``[CLS] chunk [SEP]``; word ids kept for whole-word masking."""

    def __init__(self, tokenizer, documents, maxlen=128, nsp=True, wwm=False, seed=0):
        self.tokenizer, self.maxlen, self.nsp, self.wwm = tokenizer, maxlen, nsp, wwm
        rng = np.random.default_rng(seed)
        self.sentences = []  # per document: list of (ids, word ids)
        for doc in documents:
            sents = [s for s in SENTENCE_END.split(doc) if s.strip()]
            encoded = [word_piece_ids(tokenizer, s, wwm) for s in sents]
            encoded = [e for e in encoded if e[0]]
            if encoded:
                self.sentences.append(encoded)
        if not self.sentences:
            raise ValueError("no text in the corpus")
        self.examples = []  # (segment A, segment B or None, is_next)
        budget = maxlen - (3 if nsp else 2)
        for d, sents in enumerate(self.sentences):  # pack whole sentences into chunks of <= budget pieces
            chunk, length = [], 0
            for ids, wids in sents:
                ids, wids = ids[:budget], wids[:budget]
                if chunk and length + len(ids) > budget:
                    self.examples.append(self._make(chunk, d, rng))
                    chunk, length = [], 0
                chunk.append((ids, wids))
                length += len(ids)
            if chunk:
                self.examples.append(self._make(chunk, d, rng))

    def _make(self, chunk, doc, rng):
        return self._split(chunk, doc, rng) if self.nsp else (_join(chunk, self.maxlen - 2), None, 1)

    def _split(self, chunk, doc, rng):
        budget = self.maxlen - 3
        cut = int(rng.integers(1, len(chunk))) if len(chunk) > 1 else 1
        a = _join(chunk[:cut], budget)
        if len(chunk) == 1 or rng.random() < 0.5:  # a random segment from another document
            other = int(rng.integers(len(self.sentences) - 1)) if len(self.sentences) > 1 else doc
            other += other >= doc and len(self.sentences) > 1
            sents = self.sentences[other]
            start = int(rng.integers(len(sents)))
            b, is_next = _join(sents[start:], max(budget - len(a[0]), 1)), 0
        else:
            b, is_next = _join(chunk[cut:], max(budget - len(a[0]), 1)), 1
        return _fit(a, b, budget), b, is_next


def _fit(a, b, budget):
    """Truncate the longer of segments ``a`` and ``b`` (in place) until both fit in ``budget`` pieces; returns a."""
    while len(a[0]) + len(b[0]) > budget:
        longer = a if len(a[0]) >= len(b[0]) else b
        longer[0].pop()
        longer[1].pop()
    return a


def _join(parts, budget):
    ids = [i for p, _ in parts for i in p][:budget]
    offset, wids = 0, []
    for _, w in parts:  # word ids unique across sentences
        wids += [x + offset for x in w]
        offset += (max(w) + 1) if w else 0
    return ids, wids[:budget]


def mask_tokens(ids, word_ids, special, rng, vocab_ids, mask_id, rate=0.15, max_fraction=0.25):
    """BERT dynamic masking of one row: choose ``min(max_fraction * len, max(1, round(rate * candidates)))``
    tokens among non-special positions (whole words at a time when words span several pieces), then
    80% -> [MASK], 10% -> a random token, 10% kept. Returns (masked ids, chosen positions mask)."""
    ids = np.asarray(ids)
    candidates = [i for i in range(len(ids)) if not special[i]]
    chosen = np.zeros(len(ids), bool)
    if not candidates:
        return ids.copy(), chosen
    budget = min(int(max_fraction * len(ids)), max(1, int(round(rate * len(candidates)))))
    budget = max(budget, 1)
    words = {}
    for i in candidates:
        words.setdefault(word_ids[i], []).append(i)
    picked = 0
    for w in rng.permutation(list(words)):
        positions = words[w]
        if picked + len(positions) > budget:
            continue
        chosen[positions] = True
        picked += len(positions)
        if picked >= budget:
            break
    masked = ids.copy()
    r = rng.random(len(ids))
    masked[chosen & (r < 0.8)] = mask_id
    random_pos = chosen & (r >= 0.8) & (r < 0.9)
    masked[random_pos] = rng.choice(vocab_ids, int(random_pos.sum()))
    return masked, chosen


class PretrainingBatches:
    """Dynamic masking per (seed, epoch, step): inputs for the pretraining model (masked ids, original ids,
    segments, padding, MLM weights, NSP labels, TACO positive/negative indices)."""

    def __init__(self, examples, batch_size=32, steps=100, taco_negatives=50, rate=0.15, held_out=None):
        self.ex, self.batch_size, self.steps, self.k, self.rate = examples, batch_size, steps, taco_negatives, rate
        n = len(examples.examples)
        held_out = min(4 * batch_size, n // 10) if held_out is None else held_out
        order = np.random.default_rng(0).permutation(n)
        self.held_out, self.train_index = np.sort(order[:held_out]), np.sort(order[held_out:])
        tok = examples.tokenizer
        self.n = steps * batch_size
        self.vocab_ids = np.array([i for i, t in enumerate(tok.vocab) if i not in tok.special_ids
                                   and not (t.startswith("[") and t.endswith("]"))])
        self.special_ids = tok.special_ids | {tok.unk_id}

    def __len__(self):
        return self.steps

    def batch(self, rng, index):
        """The masked batch of examples ``index`` (masks drawn from ``rng``)."""
        return self.masked_batch(rng, [self.ex.examples[i] for i in index])

    def masked_batch(self, rng, examples):
        """The model inputs of ``examples`` ((segment A, segment B or None, is_next) each), masks drawn from
        ``rng``."""
        tok = self.ex.tokenizer
        rows, chosen_rows, nsp = [], [], []
        for a, b, is_next in examples:
            ids = [tok.cls_id, *a[0], tok.sep_id]
            wids = [-1, *a[1], -2]
            segs = [0] * len(ids)
            if b is not None:
                ids += [*b[0], tok.sep_id]
                wids += [w + 10_000 for w in b[1]] + [-3]
                segs += [1] * (len(b[0]) + 1)
            special = [t in self.special_ids for t in ids]
            masked, chosen = mask_tokens(ids, wids, special, rng, self.vocab_ids, tok.mask_id, self.rate)
            rows.append((ids, segs, masked))
            chosen_rows.append(chosen)
            nsp.append(is_next)
        length = batch_length([(r[0],) for r in rows])
        x = tok.pad([(r[2], r[1]) for r in rows], pad_to=length)
        x["truth_ids"] = tok.pad([(r[0], r[1]) for r in rows], pad_to=length)["token_ids"]
        x["mlm_positions"], x["mlm_weights"] = masked_positions(chosen_rows, max_predictions(length, self.rate))
        x["nsp_labels"] = np.array(nsp, "int32")
        x["taco_positive"], x["taco_negative"] = taco_indices(x["padding_mask"], self.k, rng)
        return x

    def epoch(self, seed, epoch, start_step=0):
        for step in range(start_step, self.steps):
            rng = np.random.default_rng([seed, epoch, step])
            index = self.train_index[rng.integers(0, len(self.train_index), self.batch_size)]
            yield step, self.batch(rng, index), np.zeros(self.batch_size, "float32")


class StreamingPretrainingBatches(PretrainingBatches):
    """``PretrainingBatches`` over documents read lazily (``zoo.data.corpus.document_sources``), for corpora larger than
    memory: memory holds one buffer of ``window`` documents, whatever the corpus size.

    The stream runs through the sources in passes (their order shuffled per pass), buffer by buffer: a buffer's
    documents are cut into sentences, packed into chunks of at most ``maxlen`` characters (a BERT piece covers at
    least one character, so a chunk fits; the pieces are cut at ``maxlen`` all the same), made into NSP pairs (B
    follows A, or with probability 0.5 comes from another document of the buffer) or single chunks, shuffled and cut
    into full batches (the few examples left over are dropped). Only the batches that train are tokenised and
    masked. Round ``epoch`` trains the stream's steps ``epoch * steps`` onwards; everything is a fixed function of the
    seed, so a resumed run reads up to its step again (characters only, no tokenising). The first ``held_out_docs``
    documents never train: they are the held-out examples (``held_out``) and ``held_out_documents``. The stream is
    not de-duplicated (that would hold every document's key in memory)."""

    def __init__(self, tokenizer, sources, batch_size=32, steps=100, maxlen=128, nsp=True, wwm=False, window=1000,
                 held_out_docs=None, taco_negatives=50, rate=0.15, seed=0):
        self.sources, self.window, self.nsp, self.wwm, self.maxlen = list(sources), window, nsp, wwm, maxlen
        if not self.sources:
            raise ValueError("no corpus sources to stream")
        held_out_docs = 4 * batch_size if held_out_docs is None else held_out_docs
        self.held_out_documents, self.held_per_source = [], []
        for _, documents in self.sources:  # the first documents in source order are held out
            taken = list(itertools.islice(documents(), held_out_docs - len(self.held_out_documents)))
            self.held_out_documents += taken
            self.held_per_source.append(len(taken))
        held_out = PretrainingExamples(tokenizer, self.held_out_documents, maxlen, nsp, wwm, seed)
        super().__init__(held_out, batch_size, steps, taco_negatives, rate, held_out=len(held_out.examples))
        self._cursor = {}  # seed -> (global step, its planned batch, the stream after it): rounds continue the stream

    def epoch(self, seed, epoch, start_step=0):
        for step in range(start_step, self.steps):
            rng = np.random.default_rng([seed, epoch, step])
            planned = self.planned(seed, epoch * self.steps + step)
            yield step, self.masked_batch(rng, [self.example(p) for p in planned]), np.zeros(self.batch_size, "float32")

    def planned(self, seed, step):
        """The planned batch of global step ``step``: the stream continues from the last step asked for (or that step
        again), else it starts afresh and skips to ``step``."""
        last, planned, stream = self._cursor.get(seed, (None, None, None))
        if step == last:
            return planned
        if last is None or step != last + 1:
            stream = self.stream(seed, step)
        planned = next(stream)
        self._cursor[seed] = (step, planned, stream)
        return planned

    def stream(self, seed, skip=0):
        """Planned batches (lists of ``plan`` entries) of global steps ``skip``, ``skip + 1``, ... (forever)."""
        step = 0
        for repeat in itertools.count():
            before = step
            order = np.random.default_rng([seed, repeat]).permutation(len(self.sources))
            for k, buffer in enumerate(self.buffers(order)):
                rng = np.random.default_rng([seed, repeat, k])
                plan = self.plan(buffer, rng)
                batches = len(plan) // self.batch_size
                if step + batches <= skip:  # skipped without tokenising
                    step += batches
                    continue
                order_in_buffer = rng.permutation(len(plan))
                for j in range(batches):
                    if step >= skip:
                        yield [plan[i] for i in order_in_buffer[j * self.batch_size:(j + 1) * self.batch_size]]
                    step += 1
            if step == before:
                raise ValueError(f"fewer than {self.batch_size} training examples in a buffer of the corpus (after "
                                 f"the {len(self.held_out_documents)} held-out documents)")

    def buffers(self, order):
        """Lists of ``window`` documents (each a list of sentences) of the sources in ``order``."""
        buffer = []
        for i in order:
            for doc in itertools.islice(self.sources[i][1](), self.held_per_source[i], None):
                sentences = [s for s in SENTENCE_END.split(doc) if s.strip()]
                if sentences:
                    buffer.append(sentences)
                if len(buffer) == self.window:
                    yield buffer
                    buffer = []
        if buffer:
            yield buffer

    def plan(self, buffer, rng):
        """The examples of a buffer as (A sentences, B sentences or None, is_next), packed by characters."""
        budget, plan = self.maxlen - (3 if self.nsp else 2), []
        for d, sentences in enumerate(buffer):
            chunk, length = [], 0
            for s in sentences:
                n = min(len(s.replace(" ", "")), budget)
                if chunk and length + n > budget:
                    plan.append(self._plan_one(chunk, d, buffer, rng))
                    chunk, length = [], 0
                chunk.append(s)
                length += n
            if chunk:
                plan.append(self._plan_one(chunk, d, buffer, rng))
        return plan

    def _plan_one(self, chunk, doc, buffer, rng):
        if not self.nsp:
            return chunk, None, 1
        cut = int(rng.integers(1, len(chunk))) if len(chunk) > 1 else 1
        if len(chunk) == 1 or rng.random() < 0.5:  # B from another document of the buffer
            other = int(rng.integers(len(buffer) - 1)) if len(buffer) > 1 else doc
            other += other >= doc and len(buffer) > 1
            return chunk[:cut], buffer[other][int(rng.integers(len(buffer[other]))):], 0
        return chunk[:cut], chunk[cut:], 1

    def example(self, planned):
        """The (segment A, segment B or None, is_next) example of a ``plan`` entry: tokenised here."""
        a_sentences, b_sentences, is_next = planned
        encode = lambda sentences: [e for e in (word_piece_ids(self.ex.tokenizer, s, self.wwm) for s in sentences)  # noqa: E731
                                    if e[0]]
        if b_sentences is None:
            return _join(encode(a_sentences), self.maxlen - 2), None, 1
        budget = self.maxlen - 3
        a = _join(encode(a_sentences), budget)
        b = _join(encode(b_sentences), max(budget - len(a[0]), 1))
        return _fit(a, b, budget), b, is_next


def max_predictions(length, rate=0.15):
    """Masked positions kept per row of a batch padded to ``length``: ceil(rate * length) >= what
    ``mask_tokens`` picks (round(rate * candidates), candidates < length); fixed per length, so XLA compiles one
    program per padded length (Google BERT's ``max_predictions_per_seq``)."""
    return max(1, math.ceil(rate * length))


def masked_positions(chosen_rows, size):
    """(positions [B, size] int32, weights [B, size] float32) of the chosen positions, padded with position 0
    and weight 0."""
    positions, weights = np.zeros((len(chosen_rows), size), "int32"), np.zeros((len(chosen_rows), size), "float32")
    for j, chosen in enumerate(chosen_rows):
        where = np.flatnonzero(chosen)
        if len(where) > size:
            raise ValueError(f"{len(where)} masked positions in a row, more than max_predictions={size}")
        positions[j, : len(where)], weights[j, : len(where)] = where, 1.0
    return positions, weights


def taco_indices(padding_mask, k, rng):
    """TACO sampling (FUZHIYI/TACO sampler.py) as flat indices into the [B*L] positions.

    positive[b, i]: position i + d of the same row, d uniform in {-2, -1, 1, 2}; when outside the row's real
    tokens, another uniformly drawn real position j != i. negative[b, i, :]: k positions drawn uniformly from
    the real tokens of the other rows (the original samples over all L positions of unpadded chunks)."""
    b, length = padding_mask.shape
    lengths = padding_mask.sum(1)
    i = np.arange(length)[None, :].repeat(b, 0)
    d = rng.choice([-2, -1, 1, 2], size=(b, length))
    pos = i + d
    outside = (pos < 0) | (pos >= lengths[:, None])
    other = (i + rng.integers(1, np.maximum(lengths, 2)[:, None], (b, length))) % np.maximum(lengths, 1)[:, None]
    pos = np.where(outside, other, pos)
    positive = (np.arange(b)[:, None] * length + pos).astype("int32")
    rows = (np.arange(b)[:, None, None] + rng.integers(1, max(b, 2), (b, length, k))) % max(b, 1)
    cols = (rng.random((b, length, k)) * lengths[rows]).astype(int)
    negative = (rows * length + cols).astype("int32")
    return positive, negative
