"""What a task model's output means: one ``HeadSpec`` per model (``Task.head_spec()``), read by every path that
serves or scores it (the SavedModel and ONNX exports, the fused ONNX graph, the precision probe, the server and
``CrossEncoder.score``), so that "softmax -> P(similar)" and "L2-normalised embedding" are written once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from .choices import SCORE_HEADS
from .vectors import normalize_rows

EMBEDDING, SCORE = "embedding", "score"


@dataclass(frozen=True)
class HeadSpec:
    """The served meaning of a task model's raw output.

    ``texts``: the names of its text inputs, ("text",) for one text, ("text_a", "text_b") for a pair
    (``[CLS] a [SEP] b [SEP]``, segment ids 0/1, bert4keras truncation). ``output``: "embedding" (the output
    is a vector) or "score". ``pooling``: an embedding's pooling mode. ``normalize``: an embedding is served
    L2-normalised (False for a sentence-transformers folder without a Normalize module: its raw vectors, as
    sentence-transformers serves them). ``head``: a score's head, "softmax" (Dense(2): served as
    P(similar) = softmax(logits)[1]) or "cosent" (Dense(1): the raw logit). ``zero_segments``: every segment id
    counts as 0 (bojone's interact.py).
    """

    texts: tuple
    output: str
    pooling: str | None = None
    head: str | None = None
    zero_segments: bool = False
    normalize: bool = True

    def __post_init__(self):
        if self.output not in (EMBEDDING, SCORE):
            raise ValueError(f"output must be {EMBEDDING!r} or {SCORE!r}, got {self.output!r}")
        if self.texts not in (("text",), ("text_a", "text_b")):
            raise ValueError(f"texts must be ('text',) or ('text_a', 'text_b'), got {self.texts!r}")
        if self.output == SCORE and self.head not in SCORE_HEADS:
            raise ValueError(f"a score's head must be one of {SCORE_HEADS}, got {self.head!r}")

    @classmethod
    def embedding(cls, pooling, normalize=True):
        return cls(("text",), EMBEDDING, pooling=pooling, normalize=bool(normalize))

    @classmethod
    def score(cls, head, zero_segments=False):
        return cls(("text_a", "text_b"), SCORE, head=head, zero_segments=bool(zero_segments))

    @classmethod
    def from_record(cls, record):
        """The spec written by ``to_record`` (an export's manifest, whose other keys are ignored), or None where it
        holds none."""
        names = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in record.items() if k in names and k != "texts"}, texts=tuple(record["texts"]))
        except (KeyError, TypeError, ValueError):
            return None

    def to_record(self):
        return {**asdict(self), "texts": list(self.texts)}

    @property
    def pairs(self):
        """True when a row is a pair of texts."""
        return len(self.texts) == 2

    @property
    def units(self):
        """The width of a score head's raw output: 2 logits for softmax, 1 for cosent (None for an embedding)."""
        if self.output != SCORE:
            return None
        return 2 if self.head == "softmax" else 1

    def serve(self, outputs):
        """Raw outputs [n, width] (a backend tensor, or numpy) -> what is served, in keras.ops (so the same code
        runs inside an exported graph): vectors [n, width] (L2-normalised when ``normalize``), or scores [n]."""
        from keras import ops

        if self.output == EMBEDDING:
            from .losses import l2_normalize

            return l2_normalize(outputs) if self.normalize else outputs
        if self.head == "softmax":
            return ops.softmax(outputs, axis=-1)[:, 1]
        return outputs[:, 0]

    def serve_numpy(self, outputs):
        """``serve`` in numpy (no backend imported) -> float32 numpy."""
        outputs = np.asarray(outputs, "float32")
        if self.output == EMBEDDING:
            return normalize_rows(outputs) if self.normalize else outputs
        if self.head == "softmax":
            e = np.exp(outputs - outputs.max(1, keepdims=True))
            return (e / e.sum(1, keepdims=True))[:, 1]
        return outputs[:, 0]

    def write_onnx(self, g, output):
        """``serve`` as ONNX ops appended to the fused graph builder ``g`` (``zoo.inference.fused_onnx``): raw
        outputs [n, width] -> the served tensor's name."""
        if self.output == EMBEDDING:
            if not self.normalize:
                return output
            squares = g.op("ReduceSum", [g.op("Mul", [output, output]), g.const("axis", np.array([-1], "int64"))],
                           keepdims=1)  # x / sqrt(max(sum(x^2), 1e-24)), as zoo.losses.l2_normalize
            tiny = g.const("tiny", np.array(1e-24, "float32"))
            return g.op("Div", [output, g.op("Sqrt", [g.op("Max", [squares, tiny])])])
        if self.head == "softmax":
            output = g.op("Softmax", [output], axis=-1)
        index = g.const("index", np.array(1 if self.head == "softmax" else 0, "int64"))
        return g.op("Gather", [output, index], axis=1)

    def logits(self, served):
        """Served scores -> the logit of P(similar): log-odds of a softmax head's probability, a cosent head's
        score as it is."""
        if self.head == "softmax":
            p = np.clip(np.asarray(served, "float64"), 1e-7, 1 - 1e-7)
            return (np.log(p) - np.log1p(-p)).astype("float32")
        return np.asarray(served, "float32")

    def probabilities(self, served):
        """Served scores -> a probability: a softmax head's P(similar) as it is, a cosent score's sigmoid."""
        if self.head == "softmax":
            return np.asarray(served, "float32")
        return (1.0 / (1.0 + np.exp(-np.asarray(served, "float64")))).astype("float32")
