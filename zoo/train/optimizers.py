"""The training jobs' optimizers, built in one place (``training_optimizer``): Adam or AdamW with Keras' own weight
average (``use_ema``) and gradient accumulation, and two things bert4keras users reach for: layer-wise learning-rate
decay (per-variable step sizes: scaling the gradients would do nothing under Adam) and a piecewise-linear schedule
(``extend_with_piecewise_linear_lr``)."""

from __future__ import annotations

import re

import keras

from ..errors import ConfigError

LAYER = re.compile(r"(?:^|/)transformer_layer_(\d+)/")
EMBEDDINGS = ("token_embedding/", "position_embedding/", "segment_embedding/", "embeddings_layer_norm/",
              "embeddings_projection/")


def layer_factors(variables, decay):
    """{variable path: step-size factor} of layer-wise decay: the top transformer layer 1, each layer below it
    ``decay`` times the one above, the embeddings ``decay`` times the lowest layer; everything else (pooler, heads)
    1. Layers are found by their Keras paths (``transformer_layer_N/``)."""
    layers = {v.path: int(m.group(1)) for v in variables if (m := LAYER.search(v.path))}
    count = max(layers.values(), default=-1) + 1
    factors = {}
    for v in variables:
        if v.path in layers:
            factors[v.path] = decay ** (count - 1 - layers[v.path])
        elif v.path.startswith(EMBEDDINGS):
            factors[v.path] = decay ** count
    return factors


class LayerDecay:
    """Mixin of an optimizer whose step size of each variable is scaled by ``layer_factors(..., layer_decay)``."""

    def __init__(self, *args, layer_decay=1.0, **kwargs):
        super().__init__(*args, **kwargs)
        if not 0 < layer_decay <= 1:
            raise ConfigError(f"layer_decay must be in (0, 1], got {layer_decay}", param="layer_decay")
        self.layer_decay, self._factors = layer_decay, []

    def build(self, variables):
        factors = layer_factors(variables, self.layer_decay)
        self._factors = [factors.get(v.path, 1.0) for v in variables]  # in the optimizer's order of its variables
        super().build(variables)

    def update_step(self, gradient, variable, learning_rate):
        factor = self._factors[self._get_variable_index(variable)]  # (the backend's variable here: no Keras path)
        return super().update_step(gradient, variable, learning_rate if factor == 1.0 else learning_rate * factor)

    def get_config(self):
        return {**super().get_config(), "layer_decay": self.layer_decay}


@keras.saving.register_keras_serializable(package="zoo")
class LayerDecayAdam(LayerDecay, keras.optimizers.Adam):
    """Adam with layer-wise learning-rate decay: the top transformer layer's step size 1, each layer below it
    ``layer_decay`` times the one above, the embeddings ``layer_decay`` times the lowest layer (per-variable step
    sizes: scaling gradients would do nothing under Adam).

    :param args: ``keras.optimizers.Adam``'s arguments.
    :param layer_decay: the factor per layer, in (0, 1].
    :param kwargs: ``keras.optimizers.Adam``'s arguments.
    """


@keras.saving.register_keras_serializable(package="zoo")
class LayerDecayAdamW(LayerDecay, keras.optimizers.AdamW):
    """AdamW with layer-wise learning-rate decay (as ``LayerDecayAdam``).

    :param args: ``keras.optimizers.AdamW``'s arguments.
    :param layer_decay: the factor per layer, in (0, 1].
    :param kwargs: ``keras.optimizers.AdamW``'s arguments.
    """


@keras.saving.register_keras_serializable(package="zoo")
class PiecewiseLinear(keras.optimizers.schedules.LearningRateSchedule):
    """bert4keras' piecewise-linear learning rate: ``peak`` times a factor that runs linearly between the points
    and stays at the last one after it: {1000: 1, 2000: 0.1} warms up over 1,000 steps, decays to a tenth by step
    2,000, then stays there.

    :param peak: the peak learning rate.
    :param points: {step: factor} (from 0 at step 0 unless step 0 is given).
    """

    def __init__(self, peak, points):
        self.peak = peak
        self.points = sorted((int(k), float(v)) for k, v in dict(points).items())
        if not self.points or any(step < 0 for step, _ in self.points):
            raise ConfigError(f"a piecewise-linear schedule needs steps >= 0, got {points}", param="lr_schedule")
        if self.points[0][0] != 0:
            self.points.insert(0, (0, 0.0))

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        factor = keras.ops.convert_to_tensor(self.points[-1][1], "float32")
        for (x0, y0), (x1, y1) in reversed(list(zip(self.points, self.points[1:]))):
            between = y0 + (y1 - y0) * (step - x0) / max(x1 - x0, 1)
            factor = keras.ops.where(step < x1, between, factor)
        return self.peak * factor

    def get_config(self):
        return {"peak": self.peak, "points": dict(self.points)}


OPTIMIZERS = {"adam": (keras.optimizers.Adam, LayerDecayAdam), "adamw": (keras.optimizers.AdamW, LayerDecayAdamW)}


def training_optimizer(kind, learning_rate, *, ema_momentum=None, gradient_accumulation_steps=1, layer_decay=None,
                       lr_schedule=None, loss_scale=False, **kwargs):
    """The optimizer of every zoo job, with the training options every job takes.

    :param kind: "adam" or "adamw".
    :param learning_rate: a number or a schedule.
    :param ema_momentum: keep an exponential moving average of the weights (Keras' ``use_ema``); the average is
        what ``fit`` evaluates and keeps (None: no average).
    :param gradient_accumulation_steps: micro-batches per optimizer step.
    :param layer_decay: layer-wise step sizes (``LayerDecayAdam``; None: none).
    :param lr_schedule: {step: factor}: a ``PiecewiseLinear`` of the peak rate, which replaces ``learning_rate``'s
        own schedule.
    :param loss_scale: wrap it in Keras' ``LossScaleOptimizer`` (float16 training).
    :param kwargs: the optimizer's arguments (e.g. ``weight_decay``).
    """
    plain, decayed = OPTIMIZERS[kind]
    if lr_schedule:
        peak = learning_rate if isinstance(learning_rate, (int, float)) else getattr(learning_rate, "peak", None)
        if peak is None:
            raise ConfigError("lr_schedule replaces the job's schedule: give a number as the learning rate",
                              param="lr_schedule")
        learning_rate = PiecewiseLinear(peak, lr_schedule)
    if ema_momentum is not None:
        kwargs.update(use_ema=True, ema_momentum=ema_momentum)
    if gradient_accumulation_steps and gradient_accumulation_steps > 1:
        kwargs["gradient_accumulation_steps"] = gradient_accumulation_steps
    if layer_decay is not None and layer_decay != 1.0:
        optimizer = decayed(learning_rate, layer_decay=layer_decay, **kwargs)
    else:
        optimizer = plain(learning_rate, **kwargs)
    return keras.optimizers.LossScaleOptimizer(optimizer) if loss_scale else optimizer
