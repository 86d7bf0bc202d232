"""Training steps a job and its recipe share, on plain parameters: a model's compiled trainer (and, where the
targets depend on the schedule, its batches)."""

from __future__ import annotations

import keras
import numpy as np

from ..choices import DVBERT_OBJECTIVES
from ..errors import ConfigError
from ..losses import CoSENTLoss, SoftTargetLoss, first_output_loss
from ..models.bi_encoder import build_pair_trainer
from ..models.pretrainer import build_pretrainer
from .adversarial import adversarial
from .batches import DistillBatches, PairBatches
from .optimizers import training_optimizer
from .schedules import WarmupLinear, learning_rate


def distillation_trainer(student, train, teacher_probs, objective="sbert", *, batch_size=16, maxlen=64, epochs=4,
                         lr=2e-5, warmup=0.1, jit_compile=True, optimizer_options=None, adversarial_epsilon=None):
    """DvBERT's step: (batches, compiled trainer) of the bi-encoder ``student`` on the pairs ``train`` (0/1
    labels), each pair's target annealed over ``epochs`` from ``teacher_probs`` (the teachers' probabilities) to
    its gold label (``DistillBatches``). ``objective`` "sbert": the softmax head against the targets; "cosent":
    CoSENT ranked by them; "cosent-gap": each ordered pair weighted by its target gap. Adam at ``lr``
    (``learning_rate(lr, warmup, steps)``; ``optimizer_options``: ``training_optimizer``'s, e.g. ``ema_momentum``);
    ``adversarial_epsilon``: FGM on the word embeddings (``zoo.train.adversarial``)."""
    if objective not in DVBERT_OBJECTIVES:
        raise ConfigError(f"objective must be one of {DVBERT_OBJECTIVES}, got {objective!r}")
    pairs = PairBatches(student.tokenizer, train, batch_size, maxlen,
                        np.arange(len(train), dtype="float32"))  # labels: pair indices, for the targets
    cosent = objective.startswith("cosent")
    batches = DistillBatches(pairs, train.labels, teacher_probs, epochs, as_score=cosent)
    trainer = adversarial(build_pair_trainer(student, "cosent" if cosent else "sbert"), adversarial_epsilon)
    trainer.compile(optimizer=training_optimizer("adam", learning_rate(lr, warmup, batches.total),
                                                 **(optimizer_options or {})),
                    loss=CoSENTLoss(gap_weighted=objective == "cosent-gap") if cosent else SoftTargetLoss(),
                    jit_compile=jit_compile)
    return batches, trainer


def pretraining_trainer(backbone, objective="mlm", nsp=True, teacher=None, *, lr=1e-4, steps=1000, jit_compile=True):
    """The pretraining step: ``backbone``'s pretrainer (``build_pretrainer``: MLM (+NSP), TaCL against the frozen
    ``teacher``, or TACO) compiled with AdamW (weight decay 0.01, clipnorm 1.0) at ``lr``: linear warm-up over
    the first 10% of ``steps``, then linear decay to 0."""
    trainer = build_pretrainer(backbone, objective, nsp, teacher)
    trainer.compile(optimizer=keras.optimizers.AdamW(WarmupLinear(lr, int(0.1 * steps), steps), weight_decay=0.01,
                                                     clipnorm=1.0),
                    loss=first_output_loss, jit_compile=jit_compile)
    return trainer
