"""SimBERT: one UniLM-masked BERT with a retrieval head (linear pooler on [CLS]) and a generation head (tied MLM)."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from ..losses import in_batch_softmax_loss
from ..masks import AttentionMask
from .bi_encoder import SentenceEncoder, TokenizerAssetsMixin, backbone_inputs


@keras.saving.register_keras_serializable(package="zoo")
class SimBERT(TokenizerAssetsMixin, keras.Model):
    """SimBERT (Su, 2020). Called on ``[CLS] a [SEP] b [SEP]`` rows (segments 0/1) it applies the UniLM mask and
    returns ``pooled_output`` (the retrieval vector of ``a``: [CLS] only sees the source) and ``mlm_logits``
    (position t predicts token t+1 of ``b``).

    >>> sim = zoo.SimBERT.from_checkpoint("chinese_simbert_L-12_H-768_A-12")
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
    def from_checkpoint(cls, path, maxlen=32, simplified=False, pooler_activation="linear", **backbone_kwargs):
        """From any checkpoint zoo loads; MLM head and pooler are loaded when present (SimBERT: linear pooler).

        ``simplified=True`` slims the vocabulary as the original SimBERT did (bert4keras ``load_vocab(
        simplified=True)``: 21,128 -> ~13.6k tokens for bert-base-chinese), which makes the generation head cheaper.
        """
        from ..checkpoints import load_backbone
        from ..tokenizer import load_tokenizer

        tokenizer = load_tokenizer(path, simplified=simplified)
        backbone = load_backbone(path, with_mlm=True, pooler_activation=pooler_activation,
                                 keep_tokens=tokenizer.keep_tokens, **backbone_kwargs)
        return cls(backbone, tokenizer, maxlen=maxlen)

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

    def gen_synonyms(self, text, n=100, k=20, topk=None, topp=0.95, temperature=1.0, use_cache=True, seed=None):
        """Sample ``n`` paraphrases, de-duplicate, drop the input, rank by cosine to ``text``: top ``k`` [(text, score)].

        Sampling uses top-p 0.95 by default (the later bert4keras example); ``topk=5, topp=None`` is the
        original SimBERT script. A text longer than ``maxlen`` tokens is truncated (the cut is logged).
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"gen_synonyms needs a non-empty text, got {text!r}")
        if n < 1 or k < 1:
            raise ValueError(f"n and k must be >= 1, got n={n}, k={k}")
        pieces = self.tokenizer.piece_ids([text])[0]
        if len(pieces) + 2 > self.maxlen:
            import warnings

            warnings.warn(f"gen_synonyms: text has {len(pieces) + 2} tokens, truncated to maxlen={self.maxlen}",
                          stacklevel=2)
        samples = self.decoder(use_cache).random_sample(text, n, topk=topk, topp=topp, temperature=temperature,
                                                        seed=seed)
        candidates = list(dict.fromkeys(self.tokenizer.decode(s) for s in samples))
        candidates = [c for c in candidates if c and c != text]
        if not candidates:
            return []
        vectors = self.encode([text] + candidates)
        scores = vectors[1:] @ vectors[0]
        order = np.argsort(-scores, kind="stable")[:k]
        return [(candidates[i], float(scores[i])) for i in order]


class _Runtime:
    def __init__(self):
        self.encoder, self.decoders = None, {}


# ---------------------------------------------------------------------------------- training
def simbert_loss(token_ids, segment_ids, mlm_logits, pooled, scale=30.0):
    """Seq2seq CE on target tokens (position t predicts t+1 where token t+1 is in segment 1) + in-batch
    similarity CE over L2-normalised pooled vectors with partner ``i XOR 1`` (rows come in both orders)."""
    y_true = token_ids[:, 1:]
    y_mask = ops.cast(segment_ids[:, 1:], "float32")
    ce = keras.losses.sparse_categorical_crossentropy(y_true, ops.cast(mlm_logits[:, :-1], "float32"),
                                                      from_logits=True)
    gen = ops.sum(ce * y_mask) / ops.maximum(ops.sum(y_mask), 1.0)
    partner = ops.arange(ops.shape(pooled)[0]) ^ 1
    return gen + in_batch_softmax_loss(pooled, partner, scale)


@keras.saving.register_keras_serializable(package="zoo")
class SimBERTLoss(keras.layers.Layer):
    def __init__(self, scale=30.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale

    def call(self, token_ids, segment_ids, mlm_logits, pooled):
        return ops.reshape(simbert_loss(token_ids, segment_ids, mlm_logits, pooled, self.scale), (1,))

    def compute_output_shape(self, *input_shapes):
        return (1,)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


def passthrough_loss(y_true, y_pred):
    """The model already computed its loss: use its output."""
    return ops.mean(y_pred)


def build_simbert_trainer(simbert, lr=2e-6, weight_decay=0.01, jit_compile=True):
    """A compiled Keras model whose output is the joint SimBERT loss (AdamW, as the original script)."""
    inputs = backbone_inputs()
    out = simbert(inputs)
    loss = SimBERTLoss(name="simbert_loss")(inputs["token_ids"], inputs["segment_ids"], out["mlm_logits"],
                                            out["pooled_output"])
    trainer = keras.Model(inputs, loss, name="simbert_trainer")
    trainer.compile(optimizer=keras.optimizers.AdamW(lr, weight_decay=weight_decay), loss=passthrough_loss,
                    jit_compile=jit_compile)
    return trainer


SENTENCE_SEPARATORS = "\n。！？!?；;，, "


def truncate_at_punctuation(text, maxchars):
    """SimBERT's cut: a text over ``maxchars`` keeps its first clause that fits (split at 。！？；，...), else a hard cut."""
    if len(text) <= maxchars:
        return text
    head = text[:maxchars]
    cut = max(head.rfind(c) for c in SENTENCE_SEPARATORS)
    return head[:cut].strip() or head if cut > 0 else head


class SimBERTBatches:
    """Groups of similar texts -> SimBERT batches: per group two distinct texts (a, b), both row orders
    ``[CLS] a [SEP] b [SEP]`` and ``[CLS] b [SEP] a [SEP]`` next to each other. Deterministic per (seed, epoch, step)."""

    def __init__(self, tokenizer, groups, batch_size=64, maxlen=32):
        self.tokenizer, self.groups, self.batch_size, self.maxlen = tokenizer, groups, batch_size, maxlen
        self.n = len(groups)

    def __len__(self):
        return -(-self.n // self.batch_size)

    def epoch(self, seed, epoch, start_step=0):
        from ..utils import batch_length

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
