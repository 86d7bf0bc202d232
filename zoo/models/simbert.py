"""SimBERT: one UniLM-masked BERT with a retrieval head (linear pooler on [CLS]) and a generation head (tied MLM)."""

from __future__ import annotations

import keras
import numpy as np

from ..backbone import BertBackbone, backbone_inputs
from ..logs import log
from ..losses import SimBERTLoss
from ..attention_masks import AttentionMask
from ..retrieval import normalized
from ..tokenizer import Tokenizer
from .bi_encoder import SentenceEncoder
from .task import Task


@keras.saving.register_keras_serializable(package="zoo")
class SimBERT(Task):
    """SimBERT (Su, 2020). Called on ``[CLS] a [SEP] b [SEP]`` rows (segments 0/1) it applies the UniLM mask and
    returns ``pooled_output`` (the retrieval vector of ``a``: [CLS] only sees the source) and ``mlm_logits``
    (position t predicts token t+1 of ``b``).

    >>> sim = zoo.SimBERT.from_preset("chinese_simbert_L-12_H-768_A-12")
    >>> sim.gen_synonyms("微信和支付宝哪个好？", n=100, k=20)
    >>> sim.most_similar("怎么开通花呗", corpus, topk=5)
    """

    def __init__(self, backbone, tokenizer=None, maxlen=32, **kwargs):
        if not backbone.with_mlm:
            raise ValueError("SimBERT needs a backbone with its MLM head (with_mlm=True)")
        inputs = backbone_inputs()
        mask = AttentionMask("unilm", name="unilm_mask")(inputs["segment_ids"])
        out = backbone({**inputs, "attention_mask": mask})
        outputs = {"pooled_output": out["pooled_output"], "mlm_logits": out["mlm_logits"]}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.backbone, self.tokenizer, self.maxlen = backbone, tokenizer, maxlen
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
        return self._config(maxlen=self.maxlen)

    # ------------------------------------------------------------------ retrieval head
    @property
    def encoder(self):
        """A SentenceEncoder on the same weights: ``[CLS] s [SEP]``, linear pooler (the retrieval vector)."""
        if self._runtime.encoder is None or self._runtime.encoder.tokenizer is not self.tokenizer:
            self._runtime.encoder = SentenceEncoder(self.backbone, self.tokenizer, pooling="pooler",
                                                    maxlen=self.maxlen)
        return self._runtime.encoder

    def encode(self, texts, **kwargs):
        return self.encoder.encode(texts, **kwargs)

    def similarity_pairwise(self, a, b, batch_size=64):
        return self.encoder.similarity_pairwise(a, b, batch_size=batch_size)

    def most_similar(self, query, corpus, topk=10, batch_size=64):
        """The ``topk`` texts of ``corpus`` closest to ``query`` by cosine: [(text, score)]."""
        from ..retrieval import SemanticIndex

        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        index = SemanticIndex(self.encoder)
        index.add(list(corpus), batch_size=batch_size)
        return index.search(query, topk)[0]

    # ------------------------------------------------------------------ generation head
    def decoder(self, use_cache=True, maxlen=None):
        from ..generation import Seq2SeqDecoder

        maxlen = maxlen or self.maxlen
        key = (use_cache, maxlen, id(self.tokenizer))
        if key not in self._runtime.decoders:
            self._runtime.decoders[key] = Seq2SeqDecoder(self.backbone, self.tokenizer, maxlen=maxlen,
                                                         use_cache=use_cache, max_source_len=self.maxlen)
        return self._runtime.decoders[key]

    def gen_synonyms(self, text, n=100, k=20, topk=None, topp=0.95, temperature=1.0, use_cache=True, seed=None,
                     filters=True):
        """Sample ``n`` paraphrases, de-duplicate, drop the input, rank by cosine to ``text``: top ``k`` [(text, score)].

        Sampling uses top-p 0.95 by default (the later bert4keras example); ``topk=5, topp=None`` is the
        original SimBERT script. A text longer than ``maxlen`` tokens is truncated (the cut is logged).
        ``filters`` (default on) also drops copies that differ from the input (or from a better candidate) only in
        punctuation, spaces or letter case, and degenerate samples with a character repeated 3+ times in a row
        that the input does not have.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"gen_synonyms needs a non-empty text, got {text!r}")
        if n < 1 or k < 1:
            raise ValueError(f"n and k must be >= 1, got n={n}, k={k}")
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


def filter_candidates(text, candidates):
    """``candidates`` without copies of ``text`` or of an earlier candidate up to punctuation, spaces and case,
    and without degenerate repeats (a character 3+ times in a row) that ``text`` does not have; order kept."""
    seen, kept = {normalized(text)}, []
    for c in candidates:
        key = normalized(c)
        if key and key not in seen and (has_repeat(text) or not has_repeat(c)):
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
