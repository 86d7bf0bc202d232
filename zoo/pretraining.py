"""Pretraining and self-supervised encoders: corpus reading, (whole-word) dynamic masking, MLM (+NSP), TaCL, TACO
(methods.md §2, §3), and Mirror-BERT / SimCSE sentence encoders (§1)."""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
import re

import keras
import numpy as np
from keras import ops

from .losses import NEG_INF, in_batch_softmax_loss, l2_normalize
from .utils import batch_length

SENTENCE_END = re.compile(r"(?<=[。！？!?；;\n])")


# ---------------------------------------------------------------------------------- corpus
def _lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        yield from f


def read_documents(path):
    """Documents of one corpus file, by its format (see the shared data README): plain one-per-line, ``label\\ttext``,
    CSV with a ``review`` column, ``_!_``-separated chineseGLUE files, and People's Daily ``word/POS`` text."""
    name = os.path.basename(path).replace(".gz", "")
    if name.endswith(".csv"):
        rows = csv.DictReader(io.StringIO("".join(_lines(path))))
        return [r["review"].lstrip("\ufeff") for r in rows if r.get("review")]
    docs = []
    for line in _lines(path):
        line = line.rstrip("\n")
        if "_!_" in line:  # inews: label_!_id_!_title_!_content ; iflytek: label_!_text
            parts = line.split("_!_", 3)
            line = "。".join(p for p in parts[2:] if p) if len(parts) == 4 else parts[-1]
        elif name == "199801.txt":  # word/POS tokens separated by two spaces; [..]nt compounds
            words = [w.rsplit("/", 1)[0].lstrip("[") for w in line.split()]
            line = "".join(w for w in words[1:] if w) if words and re.match(r"^\d{8}-", words[0]) else "".join(words)
        elif re.match(r"^\d+\t", line):  # label<TAB>text
            line = line.split("\t", 1)[1]
        if line.strip():
            docs.append(line.strip())
    return docs


def read_corpus(paths):
    """Documents from files or folders (recursively), de-duplicated with whitespace ignored."""
    files = []
    for p in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            files += sorted(os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs
                            if f.endswith((".txt", ".csv", ".txt.gz", ".csv.gz")))
        elif os.path.exists(p):
            files.append(p)
        else:
            raise FileNotFoundError(f"{p}: corpus file or folder not found")
    return unique_documents(d for f in files for d in read_documents(f))


def unique_documents(docs):
    """Documents in order, without repeats (whitespace ignored) or empty ones."""
    seen, out = set(), []
    for d in docs:
        key = re.sub(r"\s+", "", d)
        if key and key not in seen:
            seen.add(key)
            out.append(d)
    return out


def task_documents(tasks, data_dir=None):
    """The **train** split texts of sentence-pair tasks as two-sentence documents ``a\\nb`` (no labels), as the
    reference checkpoints were pretrained; valid and test texts are never read."""
    from .data import load_task
    from .training import resolve_data_dir

    docs = []
    for task in tasks:
        train = load_task(task, "train", resolve_data_dir(task, data_dir))
        docs += [f"{a}\n{b}" for a, b in zip(train.texts_a, train.texts_b)]
    return docs


# ---------------------------------------------------------------------------------- examples and masking
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
        # truncate the longer part until both fit
        while len(a[0]) + len(b[0]) > budget:
            longer = a if len(a[0]) >= len(b[0]) else b
            longer[0].pop()
            longer[1].pop()
        return a, b, is_next


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
        tok = self.ex.tokenizer
        rows, chosen_rows, nsp = [], [], []
        for i in index:
            a, b, is_next = self.ex.examples[i]
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


def gather_positions(sequence, positions):
    """sequence [B, T, ...] at positions [B, P] -> [B, P, ...]."""
    index = positions
    for _ in range(len(sequence.shape) - 2):
        index = ops.expand_dims(index, -1)
    return ops.take_along_axis(sequence, index, axis=1)


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


# ---------------------------------------------------------------------------------- losses
def mlm_loss_and_accuracy(logits, truth_ids, weights):
    ce = keras.losses.sparse_categorical_crossentropy(truth_ids, ops.cast(logits, "float32"), from_logits=True)
    total = ops.maximum(ops.sum(weights), 1.0)
    correct = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), ops.cast(truth_ids, "int32")),
                       "float32")
    return ops.sum(ce * weights) / total, ops.sum(correct * weights) / total


def tacl_loss(student, teacher, positions, weights, padding_mask, temperature=0.01):
    """TaCL token contrast. ``student`` [B, P, H]: the student's vectors at the masked ``positions`` [B, P]
    (``weights`` 0 marks unused slots); ``teacher`` [B, T, H]. For each masked position i of a row: softmax over
    the teacher's positions of that row (cosine / temperature) with target i. Padding positions are removed from
    the denominator (zoo's choice; the original keeps them)."""
    s, t = l2_normalize(ops.cast(student, "float32")), l2_normalize(ops.cast(ops.stop_gradient(teacher), "float32"))
    logits = ops.einsum("bid,bjd->bij", s, t) / temperature
    logits = ops.where(ops.cast(padding_mask, "bool")[:, None, :], logits, NEG_INF)
    ce = keras.losses.sparse_categorical_crossentropy(positions, logits, from_logits=True)
    return ops.sum(ce * weights) / ops.maximum(ops.sum(weights), 1.0)


def taco_loss(hidden, embeddings, positive, negative, padding_mask, temperature=0.07):
    """TACO: g = h - e; anchor vs one positive and k negatives (stop-gradient), cosine / temperature, CE to the
    positive, averaged over real (non-padding) anchors."""
    g = ops.cast(hidden, "float32") - ops.cast(embeddings, "float32")
    d = ops.shape(g)[-1]
    flat = ops.stop_gradient(l2_normalize(ops.reshape(g, (-1, d))))
    anchor = l2_normalize(g)
    pos = ops.take(flat, positive, axis=0)  # [B, L, d]
    neg = ops.take(flat, negative, axis=0)  # [B, L, K, d]
    logits = ops.concatenate([ops.sum(anchor * pos, -1)[..., None], ops.einsum("bld,blkd->blk", anchor, neg)],
                             axis=-1) / temperature
    ce = keras.losses.sparse_categorical_crossentropy(ops.zeros(ops.shape(logits)[:2], "int32"), logits,
                                                      from_logits=True)
    w = ops.cast(padding_mask, "float32")
    return ops.sum(ce * w) / ops.maximum(ops.sum(w), 1.0)


@keras.saving.register_keras_serializable(package="zoo")
class PretrainingLoss(keras.layers.Layer):
    """MLM (+ NSP) (+ TaCL or TACO) from the model's outputs; returns [loss, masked-token accuracy].
    ``masked_hidden`` [B, P, H] and ``mlm_logits`` [B, P, V] are at the masked positions ``x["mlm_positions"]``."""

    def __init__(self, objective="mlm", nsp=True, **kwargs):
        super().__init__(**kwargs)
        self.objective, self.nsp = objective, nsp

    def call(self, x, masked_hidden, mlm_logits, hidden_states=None, nsp_logits=None, teacher=None):
        truth = gather_positions(x["truth_ids"], x["mlm_positions"])
        loss, acc = mlm_loss_and_accuracy(mlm_logits, truth, x["mlm_weights"])
        if self.nsp:
            loss = loss + ops.mean(keras.losses.sparse_categorical_crossentropy(x["nsp_labels"], nsp_logits,
                                                                                from_logits=True))
        if self.objective == "tacl":
            loss = loss + tacl_loss(masked_hidden, teacher, x["mlm_positions"], x["mlm_weights"], x["padding_mask"])
        elif self.objective == "taco":
            loss = loss + taco_loss(hidden_states[-1], hidden_states[0], x["taco_positive"], x["taco_negative"],
                                    x["padding_mask"])
        return ops.stack([loss, acc])

    def compute_output_shape(self, *args, **kwargs):
        return (2,)

    def get_config(self):
        return {**super().get_config(), "objective": self.objective, "nsp": self.nsp}


def build_pretrainer(backbone, objective="mlm", nsp=True, teacher=None, lr=1e-4, total_steps=1000, warmup=0.1,
                     jit_compile=True):
    """A compiled model whose outputs are [loss, masked accuracy] for MLM (+NSP) (+TaCL with ``teacher``, a frozen
    backbone copy, or TACO, which needs ``backbone.output_hidden_states``)."""
    from .training import WarmupLinear

    if objective not in ("mlm", "tacl", "taco"):
        raise ValueError(f"objective must be mlm, tacl or taco, got {objective!r}")
    if objective == "tacl" and teacher is None:
        raise ValueError("TaCL needs a frozen teacher backbone")
    if objective == "taco" and not backbone.output_hidden_states:
        raise ValueError("TACO needs a backbone built with output_hidden_states=True")
    names = ("token_ids", "segment_ids", "padding_mask", "truth_ids", "mlm_positions", "taco_positive")
    x = {n: keras.Input((None,), dtype="int32", name=n) for n in names}
    x["mlm_weights"] = keras.Input((None,), dtype="float32", name="mlm_weights")
    x["nsp_labels"] = keras.Input((), dtype="int32", name="nsp_labels")
    x["taco_negative"] = keras.Input((None, None), dtype="int32", name="taco_negative")
    model_inputs = {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    out = backbone(model_inputs)
    nsp_logits = keras.layers.Dense(2, name="nsp")(out["pooled_output"]) if nsp else None
    teacher_out = None
    if objective == "tacl":
        teacher.trainable = False
        teacher_out = teacher({**model_inputs, "token_ids": x["truth_ids"]})["sequence_output"]
    masked_hidden = gather_positions(out["sequence_output"], x["mlm_positions"])  # the vocabulary projection
    mlm_logits = backbone.mlm_head(masked_hidden)  # runs on the masked positions only
    result = PretrainingLoss(objective, nsp, name="pretraining_loss")(
        x, masked_hidden, mlm_logits, out.get("hidden_states"), nsp_logits, teacher_out)
    model = keras.Model(x, result, name=f"{objective}_pretrainer")
    model.compile(optimizer=keras.optimizers.AdamW(WarmupLinear(lr, int(warmup * total_steps), total_steps),
                                                   weight_decay=0.01, clipnorm=1.0),
                  loss=lambda y, p: p[0], jit_compile=jit_compile)
    return model


def masked_accuracy(pretrainer, batches, seed=12345, steps=4):
    """Mean masked-token accuracy on ``steps`` fixed batches of the held-out examples, which training never
    draws (the same masks every call)."""
    if not len(batches.held_out):
        raise ValueError("no held-out examples to measure masked-token accuracy on (the corpus is too small)")
    accs = []
    for step in range(steps):
        rng = np.random.default_rng([seed, step])
        index = batches.held_out[rng.integers(0, len(batches.held_out), batches.batch_size)]
        out = pretrainer.predict_on_batch(batches.batch(rng, index))
        accs.append(float(np.asarray(out)[1]))
    return float(np.mean(accs))


# ---------------------------------------------------------------------------------- Mirror-BERT / SimCSE
def span_mask(text, k=5, min_chars=30, rng=None):
    """Mirror-BERT input augmentation: replace a random span of ``k`` characters by one ``[MASK]``.

    The original leaves strings shorter than ``min_chars`` = 30 characters intact, which for Chinese means
    almost every LCQMC/BQ sentence; zoo makes the guard a parameter (its Mirror-BERT job uses ``min_chars=k+1``).
    The span is cut by position (the original cut at the first occurrence of the substring, a quirk)."""
    if k <= 0 or len(text) <= k or len(text) < min_chars:
        return text
    rng = rng or np.random.default_rng()
    i = int(rng.integers(0, len(text) - k))
    return text[:i] + "[MASK]" + text[i + k:]


@keras.saving.register_keras_serializable(package="zoo")
class InBatchSoftmaxLoss(keras.losses.Loss):
    """SimCSE / Mirror-BERT InfoNCE on [2N, d] embeddings: rows i and (i + N) mod 2N are the two views."""

    def __init__(self, temperature=0.04, name="in_batch_softmax", **kwargs):
        super().__init__(name=name, **kwargs)
        self.temperature = temperature

    def call(self, y_true, y_pred):
        n2 = ops.shape(y_pred)[0]
        partner = (ops.arange(n2) + n2 // 2) % n2
        return in_batch_softmax_loss(y_pred, partner, 1.0 / self.temperature)

    def get_config(self):
        return {**super().get_config(), "temperature": self.temperature}


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


# ---------------------------------------------------------------------------------- jobs
def pretrain(objective="mlm", start=None, config=None, corpus=None, task_texts=("LCQMC", "BQ", "STS-B"),
             data_dir=None, wwm=False, nsp=True, steps=1000, eval_every=200, batch_size=32, maxlen=128, lr=1e-4,
             output="runs/pretrain", seed=42, limit_docs=None, save_every=200, jit_compile=True, progress=True):
    """Continue pretraining ``start`` (any checkpoint zoo loads) or train ``config`` = (layers, hidden, heads)
    from scratch with MLM (+NSP) (+TaCL / TACO) on ``corpus`` (files/folders; default ../shared/data/corpus)
    plus the train-split texts of ``task_texts`` (found in ``data_dir`` as the task jobs find them).

    Every ``eval_every`` steps is an "epoch": masked-token accuracy on fixed held-out batches, the best backbone
    saved as a preset in OUTPUT/model (``zoo.load_backbone(OUTPUT)`` loads it), resumable from OUTPUT/checkpoint.
    Writes results.json (loss curve, accuracy) and loss.png."""
    import sys
    import time

    from .backbone import BertBackbone
    from .checkpoints import load_backbone
    from .evaluation import token_self_similarity
    from .presets import DEFAULT_PRESET, save_preset
    from .tokenizer import load_tokenizer
    from .training import run_epochs
    from .utils import save_results

    t0 = time.time()
    os.makedirs(output, exist_ok=True)
    shared_corpus = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "corpus")
    corpus = corpus or [os.path.normpath(shared_corpus)]
    docs = unique_documents(read_corpus(corpus) + task_documents(task_texts, data_dir))
    if limit_docs is not None:  # a random sample, so that it spans all sources
        docs = [docs[i] for i in np.random.default_rng(seed).permutation(len(docs))[:limit_docs]]
    keras.utils.set_random_seed(seed)
    hidden_states = objective == "taco"
    if config is not None:
        layers, hidden, heads = config
        tokenizer = load_tokenizer(start or DEFAULT_PRESET)
        backbone = BertBackbone(tokenizer.vocab_size, layers, heads, hidden, 4 * hidden, with_mlm=True,
                                output_hidden_states=hidden_states)
    else:
        start = start or DEFAULT_PRESET
        tokenizer = load_tokenizer(start)
        backbone = load_backbone(start, with_mlm=True, output_hidden_states=hidden_states)
    teacher = None
    if objective == "tacl":
        import warnings

        with warnings.catch_warnings():  # the teacher needs no MLM head: not worth a warning
            warnings.simplefilter("ignore")
            teacher = load_backbone(start, with_mlm=False)
    examples = PretrainingExamples(tokenizer, docs, maxlen=maxlen, nsp=nsp, wwm=wwm, seed=seed)
    print(f"[zoo] {len(docs)} documents -> {len(examples.examples)} examples", file=sys.stderr)
    epochs = max(1, steps // eval_every)
    batches = PretrainingBatches(examples, batch_size=batch_size, steps=eval_every)
    trainer = build_pretrainer(backbone, objective, nsp, teacher, lr, epochs * eval_every, jit_compile=jit_compile)
    model_dir = os.path.join(output, "model")

    def evaluate():
        return 100 * masked_accuracy(trainer, batches)

    def save_best(epoch, value):
        save_preset(backbone, tokenizer, model_dir, metadata={"job": f"pretrain-{objective}", "wwm": wwm,
                                                               "step": epoch * eval_every,
                                                               "masked_accuracy": value})

    probe = anisotropy_sentences(docs, seed=seed)
    anisotropy = {"start": token_self_similarity(backbone, tokenizer, probe)}  # before any (resumed) step
    state = run_epochs(trainer, batches, os.path.join(output, "checkpoint"), epochs, seed, evaluate, save_best,
                       save_every=save_every, show_progress=progress, metric="masked_accuracy", unit="seq")
    anisotropy["best"] = token_self_similarity(load_backbone(model_dir, with_mlm=True), tokenizer, probe)
    plot_curve(state["history"], os.path.join(output, "loss.png"), f"{objective} pretraining")
    table = "| round | step | masked-token accuracy % | train loss (EMA) |\n|---|---|---|---|\n" + "\n".join(
        f"| {h['epoch']} | {h['epoch'] * eval_every} | {h['masked_accuracy']:.2f} | "
        f"{'' if h['train_loss_ema'] is None else format(h['train_loss_ema'], '.4f')} |" for h in state["history"])
    table += (f"\n\nanisotropy ({len(probe)} sentences of the pretraining text; mean token cosine): "
              f"start intra {anisotropy['start']['intra']:.3f} inter {anisotropy['start']['inter']:.3f}, "
              f"best intra {anisotropy['best']['intra']:.3f} inter {anisotropy['best']['inter']:.3f}")
    return save_results(output, {
        "config": {"objective": objective, "start": start, "config": config, "corpus": corpus,
                   "task_texts": list(task_texts), "wwm": wwm, "nsp": nsp,
                   "steps": epochs * eval_every, "batch_size": batch_size, "maxlen": maxlen, "lr": lr,
                   "documents": len(docs), "examples": len(examples.examples), "seed": seed},
        "curve": state["history"], "best": state["best"], "anisotropy": anisotropy,
        "train_seconds": state["train_seconds"], "seconds": time.time() - t0}, table + "\n")


def anisotropy_sentences(docs, n=1000, min_chars=5, seed=0):
    """A fixed sample of ``n`` sentences (at least ``min_chars`` characters) of the documents, for
    ``token_self_similarity`` before and after pretraining."""
    sentences = [t.strip() for d in docs for t in SENTENCE_END.split(d) if len(t.strip()) >= min_chars]
    index = np.random.default_rng(seed).permutation(len(sentences))[:n]
    return [sentences[i] for i in sorted(index)]


def plot_curve(history, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    trained = [h for h in history if h["train_loss_ema"] is not None]
    ax.plot([h["epoch"] for h in trained], [h["train_loss_ema"] for h in trained], "o-", label="train loss (EMA)")
    ax.set_xlabel("evaluation round")
    ax.set_ylabel("loss")
    ax2 = ax.twinx()
    ax2.plot([h["epoch"] for h in history], [h["masked_accuracy"] for h in history], "s--", color="C1",
             label="masked-token accuracy %")
    ax2.set_ylabel("masked accuracy %")
    ax.set_title(title)
    fig.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pretrain_main(argv=None):
    import argparse

    p = argparse.ArgumentParser(description="MLM / TaCL / TACO pretraining of a BERT backbone.")
    p.add_argument("--objective", choices=("mlm", "tacl", "taco"), default="mlm")
    p.add_argument("--wwm", action="store_true", help="whole-word masking with jieba")
    p.add_argument("--no-nsp", dest="nsp", action="store_false")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--from", dest="start", help="checkpoint to continue from (default: the embedded preset)")
    g.add_argument("--config", help="L,H,A: train from scratch (vocabulary of the embedded preset)")
    p.add_argument("--corpus", nargs="+", help="files or folders (default ../shared/data/corpus)")
    p.add_argument("--task-texts", default="LCQMC,BQ,STS-B",
                   help="tasks whose train-split texts join the corpus, comma-separated ('' for none)")
    p.add_argument("--data-dir", help="where the tasks' files are (as for the task jobs)")
    for name, default in (("steps", 1000), ("eval_every", 200), ("batch_size", 32), ("maxlen", 128),
                          ("seed", 42), ("limit_docs", None), ("save_every", 200)):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--output", default="runs/pretrain")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    a = vars(p.parse_args(argv))
    a["task_texts"] = tuple(t for t in a["task_texts"].split(",") if t)
    if a["config"]:
        a["config"] = tuple(int(v) for v in a["config"].split(","))
    pretrain(**a)


def mirror_bert(start=None, sentences=None, pooling="mean", k=5, min_chars=6, temperature=0.04, batch_size=200,
                maxlen=50, lr=2e-5, epochs=1, dropout=0.1, output="runs/mirror", seed=42, data_dir=None,
                jit_compile=True, progress=True):
    """Mirror-BERT (k > 0) or SimCSE (k = 0): two views per sentence, InfoNCE, no labels. ``sentences``: a list
    (default 10k random texts of the LCQMC/BQ/STS-B train splits). Reports zero-shot test Spearman before/after."""
    import time

    from .data import load_task
    from .evaluation import evaluate_encoder
    from .models.bi_encoder import SentenceEncoder
    from .presets import DEFAULT_PRESET
    from .training import resolve_data_dir, run_epochs
    from .utils import save_results

    t0 = time.time()
    start = start or DEFAULT_PRESET
    os.makedirs(output, exist_ok=True)
    tasks = {}
    for task in ("LCQMC", "BQ", "STS-B"):
        try:
            tasks[task] = resolve_data_dir(task, data_dir)
        except FileNotFoundError:
            pass
    if sentences is None:
        texts = []
        for task, folder in tasks.items():
            texts += load_task(task, "train", folder).texts
        rng = np.random.default_rng(seed)
        sentences = [texts[i] for i in rng.choice(len(texts), min(10_000, len(texts)), replace=False)]
    keras.utils.set_random_seed(seed)
    encoder = SentenceEncoder.from_checkpoint(start, pooling=pooling, maxlen=maxlen, dropout=dropout)
    batches = MirrorBatches(encoder.tokenizer, sentences, batch_size, maxlen, k, min_chars)
    from .models.bi_encoder import backbone_inputs

    inputs = backbone_inputs()
    trainer = keras.Model(inputs, encoder(inputs))
    trainer.compile(optimizer=keras.optimizers.AdamW(lr, weight_decay=0.01), loss=InBatchSoftmaxLoss(temperature),
                    jit_compile=jit_compile)
    tests = {task: load_task(task, "test", folder) for task, folder in tasks.items()}
    before = {t: evaluate_encoder(encoder, d, 128)[0]["spearman"] for t, d in tests.items()}
    valid = load_task("LCQMC", "valid", tasks.get("LCQMC") or resolve_data_dir("LCQMC", data_dir))
    model_dir = os.path.join(output, "model")
    state = run_epochs(trainer, batches, os.path.join(output, "checkpoint"), epochs, seed,
                       lambda: evaluate_encoder(encoder, valid, 128)[0]["spearman"],
                       lambda e, v: encoder.save(model_dir, metadata={"job": "mirror-bert" if k else "simcse"}),
                       save_every=1000, show_progress=progress, unit="sent")
    best = SentenceEncoder.load(model_dir)
    after = {t: evaluate_encoder(best, d, 128)[0]["spearman"] for t, d in tests.items()}
    table = "| task | zero-shot test Spearman before | after |\n|---|---|---|\n" + "\n".join(
        f"| {t} | {before[t]:.2f} | {after[t]:.2f} |" for t in tests)
    return save_results(output, {
        "config": {"start": start, "pooling": pooling, "k": k, "min_chars": min_chars, "temperature": temperature,
                   "batch_size": batch_size, "maxlen": maxlen, "lr": lr, "epochs": epochs, "dropout": dropout,
                   "sentences": len(sentences)},
        "zero_shot_test_spearman_before": before, "zero_shot_test_spearman_after": after,
        "epochs": state["history"], "train_seconds": state["train_seconds"], "seconds": time.time() - t0},
        table + "\n")


def mirror_main(argv=None):
    import argparse

    p = argparse.ArgumentParser(description="Mirror-BERT / SimCSE unsupervised sentence encoder.")
    p.add_argument("--from", dest="start")
    p.add_argument("--sentences", help="a text file, one sentence per line (default: 10k task train texts)")
    p.add_argument("--pooling", default="mean", choices=("cls", "mean", "first-last-avg", "pooler"))
    p.add_argument("--k", type=int, default=5, help="span length to mask; 0 = SimCSE (dropout only)")
    p.add_argument("--min-chars", type=int, default=6, help="leave shorter strings unmasked (original: 30)")
    p.add_argument("--temperature", type=float, default=0.04)
    for name, default in (("batch_size", 200), ("maxlen", 50), ("epochs", 1), ("seed", 42)):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--data-dir")
    p.add_argument("--output", default="runs/mirror")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    a = vars(p.parse_args(argv))
    if a["sentences"]:
        with open(a["sentences"], encoding="utf-8") as f:
            a["sentences"] = [line.strip() for line in f if line.strip()]
    mirror_bert(**a)
