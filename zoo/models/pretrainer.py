"""The pretraining model: a BertBackbone with its MLM head (+ an NSP head) whose output is [loss, masked-token
accuracy] for MLM, TaCL (with a frozen teacher copy) or TACO (docs/methods.md)."""

from __future__ import annotations

import keras

from ..choices import PRETRAINING_OBJECTIVES as OBJECTIVES
from ..losses import PretrainingLoss, gather_positions


def build_pretrainer(backbone, objective="mlm", nsp=True, teacher=None):
    """An uncompiled model from a ``zoo.data.pretraining.PretrainingBatches`` batch to [loss, masked-token accuracy]
    (compile it with ``loss=lambda y, p: p[0]``). TaCL needs ``teacher``, a frozen backbone copy; TACO a backbone
    built with ``output_hidden_states=True``. The MLM head runs on the masked positions only."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
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
    return keras.Model(x, result, name=f"{objective}_pretrainer")
