"""Learning-rate schedules."""

from __future__ import annotations

import keras

from ..choices import check_warmup


@keras.saving.register_keras_serializable(package="zoo")
class WarmupLinear(keras.optimizers.schedules.LearningRateSchedule):
    """Learning rate: linear warm-up to ``peak`` over ``warmup`` steps, then linear decay to 0 at ``total``.

    :param peak: the peak learning rate.
    :param warmup: warm-up steps.
    :param total: the step where the rate reaches 0.
    """

    def __init__(self, peak, warmup, total):
        self.peak, self.warmup, self.total = peak, warmup, total

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        up = step / max(self.warmup, 1)
        down = (self.total - step) / max(self.total - self.warmup, 1)
        return self.peak * keras.ops.maximum(keras.ops.minimum(up, down), 0.0)

    def get_config(self):
        return {"peak": self.peak, "warmup": self.warmup, "total": self.total}


def learning_rate(peak, warmup, total_steps):
    """A constant ``peak`` when ``warmup`` is None (bojone's CoSENT), else WarmupLinear over that share of steps.

    :param peak: the peak learning rate.
    :param warmup: the share of steps spent warming up, in [0, 1) (None: a constant rate).
    :param total_steps: the training's optimizer steps.
    """
    check_warmup(warmup, "warmup")
    return peak if warmup is None else WarmupLinear(peak, int(warmup * total_steps), total_steps)
