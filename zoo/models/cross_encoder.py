"""Cross-encoders (interaction-based matching): both texts in one sequence, a score from [CLS]."""

from __future__ import annotations

import hashlib
import os

import keras
import numpy as np

from ..backbones import BertBackbone, backbone_inputs
from ..choices import SCORE_HEADS as HEADS
from ..errors import ConfigError
from ..heads import HeadSpec
from ..logs import log
from ..paths import atomic_file, resolve, sha256_of
from ..inference.pipeline import engine_argument
from ..tokenizer.wordpiece import Tokenizer
from .task import Task


@keras.saving.register_keras_serializable(package="zoo")
class CrossEncoder(Task):
    """``[CLS] a [SEP] b [SEP]`` -> last-layer [CLS] -> a score (sentence-transformers' ``CrossEncoder``).

    ```python
    ce = zoo.CrossEncoder.from_preset("chinese_L-12_H-768_A-12/")
    ce.score([("今天天气不错", "今天天气很好"), ("你好", "再见")])
    ```

    As a Keras model it maps ids (or (text_a, text_b) string pairs, through its ``preprocessor``) to the head's
    logits; ``score`` gives probabilities or scores.

    :param backbone: the transformer (a ``BertBackbone`` or another family's backbone).
    :param tokenizer: the ``Tokenizer`` that ``score`` and the preprocessor use (None: ids only).
    :param head: "softmax": Dense(2), trained with cross-entropy, the score is P(similar); "cosent": Dense(1),
        trained with the CoSENT ranking loss on raw scores (CoSENT 三), the score is raw.
    :param maxlen: tokens per pair (both texts; the longer one is cut first, as bert4keras does).
    :param zero_segments: every segment id 0, as bojone's interact.py (default: 1 for the second text).
    :param kwargs: Keras ``Model`` arguments (``name``, ``trainable``).
    """

    preprocessor_texts = 2

    def __init__(self, backbone, tokenizer=None, head="softmax", maxlen=128, zero_segments=False, **kwargs):
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        inputs = backbone_inputs()
        cls = backbone(inputs, first_token_only=True)["sequence_output"][:, 0, :]
        logits = keras.layers.Dense(HeadSpec.score(head).units, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
                                    name="classifier")(cls)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        backbone.get_layer("pooler_dense").trainable = False  # not on the path to the output
        self.backbone, self.tokenizer, self.head = backbone, tokenizer, head
        self.maxlen, self.zero_segments = maxlen, zero_segments

    @classmethod
    def _from_backbone_preset(cls, path, head="softmax", maxlen=128, zero_segments=False, **backbone_kwargs):
        model = cls(BertBackbone.from_preset(path, **backbone_kwargs), Tokenizer.from_preset(path), head=head,
                    maxlen=maxlen, zero_segments=zero_segments)
        model.check_vocabulary(path)
        return model

    def get_config(self):
        return self._config(head=self.head, maxlen=self.maxlen, zero_segments=self.zero_segments)

    def encode_pairs(self, texts_a, texts_b, maxlen=None):
        """(token_ids, segment_ids) rows for pairs (bert4keras truncation), segments zeroed if configured.

        :param texts_a: the first texts.
        :param texts_b: the second texts, as many.
        :param maxlen: tokens per pair (None: ``self.maxlen``).
        """
        maxlen = maxlen or self.maxlen
        pieces_a, pieces_b = self.tokenizer.piece_ids(texts_a), self.tokenizer.piece_ids(texts_b)
        rows = [self.tokenizer.assemble(a, b, maxlen) for a, b in zip(pieces_a, pieces_b)]
        if self.zero_segments:
            rows = [(ids, [0] * len(ids)) for ids, _ in rows]
        return rows

    def head_spec(self):
        return HeadSpec.score(self.head, self.zero_segments)

    def score(self, pairs, batch_size=64, show_progress_bar=None, engine="auto", precision=None):
        """Scores for (text_a, text_b) pairs, batched by length, in input order. Empty texts raise ValueError.

        :param pairs: (text_a, text_b) tuples.
        :param batch_size: pairs per forward pass.
        :param show_progress_bar: a progress bar with its rate (None: past 20 batches).
        :param engine: the runtime, as ``SentenceEncoder.encode``'s (``zoo.inference``).
        :param precision: the engine's name before zoo 0.3.
        :returns: float32 [n]: P(similar) for a softmax head, the raw score for cosent.
        """
        pairs = list(pairs)
        for i, pair in enumerate(pairs):
            if len(pair) != 2 or not all(isinstance(t, str) and t.strip() for t in pair):
                raise ValueError(f"pair {i} must be two non-empty texts, got {pair!r:.80}")
        if not pairs:
            return np.zeros(0, dtype="float32")
        rows = self.encode_pairs([a for a, _ in pairs], [b for _, b in pairs])
        logits = self.predict_rows(rows, batch_size, show_progress_bar=show_progress_bar, unit="pair",
                                   precision=engine_argument(engine, precision))
        return self.head_spec().serve_numpy(logits)


def predict_teachers(teachers, train, cache_path, progress=True):
    """Positive/negative probabilities of each softmax CrossEncoder on the train pairs -> [N, T, 2]; cached at
    ``cache_path`` (atomically), keyed by the sha256 of each teacher's files and of the train pairs."""
    def fingerprint(path):
        path = resolve(path)
        files = [path] if not os.path.isdir(path) else sorted(os.path.join(r, f) for r, _, fs in os.walk(path)
                                                             for f in fs)
        return hashlib.sha256("".join(sha256_of(f) for f in files).encode()).hexdigest()

    data = hashlib.sha256("\n".join(f"{a}\t{b}\t{y}" for a, b, y in zip(train.texts_a, train.texts_b, train.labels))
                          .encode()).hexdigest()
    key = np.array([fingerprint(path) for path in teachers] + [data])
    if os.path.exists(cache_path):
        with np.load(cache_path) as cached:
            if list(cached["key"]) == list(key):
                return cached["probs"]
    pairs = list(zip(train.texts_a, train.texts_b))
    probs = []
    for path in teachers:
        teacher = CrossEncoder.from_preset(path)
        if teacher.head != "softmax":
            raise ConfigError(f"{path}: the teacher must have a softmax head (got {teacher.head})")
        p1 = teacher.score(pairs, batch_size=128, show_progress_bar=progress)
        probs.append(np.stack([1 - p1, p1], axis=1))
        log.info("teacher %s: train accuracy %.2f", path, 100 * np.mean((p1 > 0.5) == train.labels))
    probs = np.stack(probs, axis=1).astype("float32")
    with atomic_file(cache_path, "wb") as f:
        np.savez(f, key=key, probs=probs)
    return probs
