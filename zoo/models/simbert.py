"""SimBERT: one UniLM-masked BERT with a retrieval head (linear pooler on [CLS]) and a generation head (tied MLM)."""

from __future__ import annotations

import difflib
import unicodedata

import keras
import numpy as np

from ..backbones import BertBackbone, backbone_inputs
from ..backbones.masks import AttentionMask
from ..logs import log
from ..losses import SimBERTLoss
from ..retrieval.lexical import normalized
from ..tokenizer.wordpiece import Tokenizer
from .bi_encoder import SentenceEncoder
from .task import Task


@keras.saving.register_keras_serializable(package="zoo")
class SimBERT(Task):
    """SimBERT (Su, 2020): one UniLM-masked BERT with a retrieval head and a generation head.

    ```python
    sim = zoo.SimBERT.from_preset("zoo-simbert-zh-L4")
    sim.gen_synonyms("微信和支付宝哪个好？", n=100, k=20)
    sim.most_similar("怎么开通花呗", corpus, topk=5)
    ```

    Called on ``[CLS] a [SEP] b [SEP]`` rows (segments 0/1) it applies the UniLM mask and returns
    ``pooled_output`` (the retrieval vector of ``a``: [CLS] only sees the source) and ``mlm_logits`` (position t
    predicts token t+1 of ``b``). ``encode`` and ``similarity_pairwise`` use the retrieval head
    (``encoder``, a ``SentenceEncoder`` on the same weights).

    :param backbone: a ``BertBackbone`` built with its MLM head (``with_mlm=True``).
    :param tokenizer: the ``Tokenizer`` of generation and retrieval (None: ids only).
    :param maxlen: tokens per source text (and per generated text, by default).
    :param paraphrase_cosine: the retrieval head's paraphrase threshold (``fit_paraphrase_cosine``), which
        ``gen_synonyms`` takes as "keeps the meaning"; saved with the model.
    :param kwargs: Keras ``Model`` arguments (``name``, ``trainable``).
    """

    def __init__(self, backbone, tokenizer=None, maxlen=32, paraphrase_cosine=None, **kwargs):
        if not backbone.with_mlm:
            raise ValueError("SimBERT needs a backbone with its MLM head (with_mlm=True)")
        inputs = backbone_inputs()
        mask = AttentionMask("unilm", name="unilm_mask")(inputs["segment_ids"])
        out = backbone({**inputs, "attention_mask": mask})
        outputs = {"pooled_output": out["pooled_output"], "mlm_logits": out["mlm_logits"]}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.backbone, self.tokenizer, self.maxlen = backbone, tokenizer, maxlen
        # the retrieval head's paraphrase threshold (fitted on labelled pairs: ``fit_paraphrase_cosine``), which
        # gen_synonyms' ranking takes as "keeps the meaning"; saved with the model
        self.paraphrase_cosine = paraphrase_cosine
        self._runtime = _Runtime()  # encoder / decoders built on demand (kept out of Keras' layer tracking)

    @classmethod
    def _from_backbone_preset(cls, path, maxlen=32, simplified=False, pooler_activation="linear", **backbone_kwargs):
        """A new SimBERT on a checkpoint's backbone; its MLM head and pooler are loaded when present (SimBERT:
        linear pooler). ``simplified=True`` slims the vocabulary as the original SimBERT did (bert4keras
        ``load_vocab(simplified=True)``: 21,128 -> ~13.6k tokens for bert-base-chinese), which makes the
        generation head cheaper."""
        tokenizer = Tokenizer.from_preset(path, simplified=simplified)
        backbone = BertBackbone.from_preset(path, with_mlm=True, pooler_activation=pooler_activation,
                                            keep_tokens=tokenizer.keep_tokens, **backbone_kwargs)
        model = cls(backbone, tokenizer, maxlen=maxlen)
        model.check_vocabulary(path)
        return model

    def get_config(self):
        return self._config(maxlen=self.maxlen, paraphrase_cosine=self.paraphrase_cosine)

    # ------------------------------------------------------------------ retrieval head
    @property
    def encoder(self):
        """A SentenceEncoder on the same weights: ``[CLS] s [SEP]``, linear pooler (the retrieval vector)."""
        if self._runtime.encoder is None or self._runtime.encoder.tokenizer is not self.tokenizer:
            self._runtime.encoder = SentenceEncoder(self.backbone, self.tokenizer, pooling="pooler",
                                                    maxlen=self.maxlen)
            source = getattr(self, "_zoo_source", None)
            if source:  # the encoder's graphs are the preset's while this model's weights are unchanged
                import weakref

                object.__setattr__(self._runtime.encoder, "_zoo_source", source[:3] + (weakref.ref(self),))
        return self._runtime.encoder

    def head_spec(self):
        return self.encoder.head_spec()

    def served_model(self):
        return self.encoder

    def encode(self, texts, **kwargs):
        """The retrieval vectors of ``texts`` (``SentenceEncoder.encode`` on the retrieval head).

        :param texts: a list of texts, or one text.
        :param kwargs: ``SentenceEncoder.encode``'s arguments.
        """
        return self.encoder.encode(texts, **kwargs)

    def vector_source(self, engine="auto", precision=None):
        """How ``encode`` makes vectors (``SentenceEncoder.vector_source``).

        :param engine: as ``SentenceEncoder.encode``'s.
        :param precision: the engine's name before zoo 0.3.
        """
        return self.encoder.vector_source(engine, precision)

    def similarity_pairwise(self, a, b, batch_size=64, engine="auto", precision=None):
        """The retrieval head's cosine of each pair (a[i], b[i]) -> [n].

        :param a: the first texts.
        :param b: the second texts, as many.
        :param batch_size: texts per forward pass.
        :param engine: as ``SentenceEncoder.encode``'s.
        :param precision: the engine's name before zoo 0.3.
        """
        return self.encoder.similarity_pairwise(a, b, batch_size=batch_size, engine=engine, precision=precision)

    def fit_paraphrase_cosine(self, dataset, batch_size=64):
        """Set ``paraphrase_cosine`` to the retrieval head's accuracy-best cosine threshold on labelled pairs
        (``zoo.evaluation.best_threshold``).

        :param dataset: a 0/1-labelled ``PairDataset`` (e.g. LCQMC valid; never test).
        :param batch_size: texts per forward pass.
        :returns: (threshold, accuracy).
        """
        from ..evaluation import best_threshold

        scores = self.similarity_pairwise(dataset.texts_a, dataset.texts_b, batch_size=batch_size)
        threshold, acc = best_threshold(scores, dataset.labels)
        self.paraphrase_cosine = float(threshold)
        return self.paraphrase_cosine, acc

    def most_similar(self, query, corpus, topk=10, batch_size=64):
        """The ``topk`` texts of ``corpus`` closest to ``query`` by cosine.

        :param query: one text.
        :param corpus: the texts to search.
        :param topk: how many to return (at least 1).
        :param batch_size: texts per forward pass.
        :returns: [(text, score)], best first.
        """
        from ..retrieval.base import SemanticIndex

        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        index = SemanticIndex(self.encoder)
        index.add(list(corpus), batch_size=batch_size)
        return index.search(query, topk)[0]

    # ------------------------------------------------------------------ generation head
    def decoder(self, use_cache=True, maxlen=None):
        """The generation head's ``zoo.generation.Seq2SeqDecoder`` (built once per settings).

        :param use_cache: keep the attention keys and values of decoded tokens (faster, same output).
        :param maxlen: the longest generated text in tokens (None: ``self.maxlen``).
        """
        from ..generation import Seq2SeqDecoder

        maxlen = maxlen or self.maxlen
        key = (use_cache, maxlen, id(self.tokenizer))
        if key not in self._runtime.decoders:
            self._runtime.decoders[key] = Seq2SeqDecoder(self.backbone, self.tokenizer, maxlen=maxlen,
                                                         use_cache=use_cache, max_source_len=self.maxlen)
        return self._runtime.decoders[key]

    def gen_synonyms(self, text, n=100, k=20, topk=None, topp=0.95, temperature=1.0, use_cache=True, seed=None,
                     filters=True, rank="edits", min_similarity=None, min_edits=1):
        """Sample ``n`` paraphrases, de-duplicate, drop the input, rank; bert4keras' ``gen_synonyms``.

        Sampling uses top-p 0.95 by default (the later bert4keras example); ``topk=5, topp=None`` is the
        original SimBERT script. A text longer than ``maxlen`` tokens is truncated (the cut is logged).

        :param text: the text to paraphrase.
        :param n: how many samples to draw.
        :param k: how many candidates to return.
        :param topk: sample among the ``topk`` likeliest tokens (None: no such cut).
        :param topp: sample within the smallest set of tokens whose probability reaches ``topp`` (None: no cut).
        :param temperature: divides the logits before sampling.
        :param use_cache: as ``decoder``'s.
        :param seed: the sampling seed (None: random).
        :param filters: drop copies that differ from the input (or from a better candidate) only in punctuation,
            spaces or letter case, samples with a character repeated 3+ times in a row, and stutters (a doubled
            character the input does not have and that is not a word: ``stutters``).
        :param rank: "cosine" orders by the retrieval head's cosine; "edits" puts first the candidates that change
            at least ``min_edits`` characters beyond particles and punctuation (``content_edits``) and keep the
            meaning (cosine >= ``min_similarity``), each group by cosine; without a threshold it orders by cosine.
        :param min_similarity: the "keeps the meaning" cosine (None: the model's ``paraphrase_cosine``).
        :param min_edits: the changed characters that make a candidate a rewording rather than a copy.
        :returns: up to ``k`` (text, cosine to ``text``) tuples.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"gen_synonyms needs a non-empty text, got {text!r}")
        if n < 1 or k < 1:
            raise ValueError(f"n and k must be >= 1, got n={n}, k={k}")
        if rank not in RANKINGS:
            raise ValueError(f"rank must be one of {RANKINGS}, got {rank!r}")
        pieces = self.tokenizer.piece_ids([text])[0]
        if len(pieces) + 2 > self.maxlen:
            log.warning("gen_synonyms: text has %d tokens, truncated to maxlen=%d", len(pieces) + 2, self.maxlen)
        samples = self.decoder(use_cache).random_sample(text, n, topk=topk, topp=topp, temperature=temperature,
                                                        seed=seed)
        candidates = list(dict.fromkeys(self.tokenizer.decode(s) for s in samples))
        candidates = [c for c in candidates if c and c != text]
        if filters:
            candidates = filter_candidates(text, candidates)
        if not candidates:
            return []
        vectors = self.encode([text] + candidates)
        scores = vectors[1:] @ vectors[0]
        threshold = self.paraphrase_cosine if min_similarity is None else min_similarity
        if rank == "edits" and threshold is not None:
            order = rank_candidates(text, candidates, scores, threshold, min_edits)[:k]
        else:
            order = np.argsort(-scores, kind="stable")[:k]
        return [(candidates[i], float(scores[i])) for i in order]

    # ------------------------------------------------------------------ training
    def loss_model(self):
        """An uncompiled model from ``[CLS] a [SEP] b [SEP]`` rows (both orders of each pair, adjacent) to the
        joint SimBERT loss (``zoo.losses.simbert_loss``); compile it with ``zoo.losses.passthrough_loss``."""
        inputs = backbone_inputs()
        out = self(inputs)
        loss = SimBERTLoss(name="simbert_loss")(inputs["token_ids"], inputs["segment_ids"], out["mlm_logits"],
                                                out["pooled_output"])
        return keras.Model(inputs, loss, name="simbert_trainer")


class _Runtime:
    def __init__(self):
        self.encoder, self.decoders = None, {}


RANKINGS = ("edits", "cosine")
# modal and structural particles: adding or dropping one does not change what a sentence asks
PARTICLES = frozenset("啊呀呢吗嘛么吧哦喔哈啦呗哇咯嘞哟呐噢嗯了的")


def filter_candidates(text, candidates, stutter=True):
    """``candidates`` without copies of ``text`` or of an earlier candidate up to punctuation, spaces and case,
    without degenerate repeats (a character 3+ times in a row) that ``text`` does not have, and (``stutter``)
    without ``stutters``; order kept."""
    seen, kept = {normalized(text)}, []
    for c in candidates:
        key = normalized(c)
        if key and key not in seen and (has_repeat(text) or not has_repeat(c)) and not (stutter and stutters(text, c)):
            seen.add(key)
            kept.append(c)
    return kept


def has_repeat(text, times=3):
    """True when one character occurs ``times`` or more times in a row (a degenerate sample: 吃吃吃)."""
    run = 1
    for a, b in zip(text, text[1:]):
        run = run + 1 if a == b else 1
        if run >= times:
            return True
    return False


def stutters(text, candidate):
    """The doubled Chinese characters of ``candidate`` that ``text`` does not have and that jieba's dictionary does
    not read as one word there: 帮我我开通 (帮/我/我/开通), 剑剑圣 (剑/剑圣); not 我想看看手机 (看看 is a word)."""
    doubled = {i for i in range(len(candidate) - 1) if candidate[i] == candidate[i + 1]
               and unicodedata.category(candidate[i]) == "Lo" and candidate[i:i + 2] not in text}
    if not doubled:
        return []
    import jieba

    inside, start = set(), 0
    for word in jieba.lcut(candidate, HMM=False):
        inside.update(range(start, start + len(word) - 1))  # i: a word holds characters i and i + 1
        start += len(word)
    return [candidate[i:i + 2] for i in sorted(doubled - inside)]


def content_edits(text, candidate):
    """Characters changed between two texts beyond particles (``PARTICLES``), punctuation, spaces and case: the
    sum over difflib's differing blocks of the longer side."""
    a, b = ("".join(ch for ch in normalized(t) if ch not in PARTICLES) for t in (text, candidate))
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b,
                                                                                       autojunk=False).get_opcodes()
               if tag != "equal")


def rank_candidates(text, candidates, scores, min_similarity, min_edits=1):
    """Indices of ``candidates`` best first: those with at least ``min_edits`` ``content_edits`` and a cosine
    ``scores[i]`` of at least ``min_similarity`` (edits that keep the meaning), then the others; each group by
    cosine."""
    scores = np.asarray(scores)
    substantive = np.array([content_edits(text, c) >= min_edits for c in candidates])
    first = substantive & (scores >= min_similarity)
    return np.lexsort((-scores, ~first))
