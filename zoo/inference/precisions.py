"""Inference engines for a task model's batched prediction (``encode(..., engine=...)``; internally "precision").

- ``fp32``: the Keras model itself (XLA-compiled on TensorFlow and JAX).
- ``bf16``: a bfloat16 copy of the model (weights and arithmetic). Only CPUs with AVX512-BF16 or AMX do bf16
  natively; elsewhere it would be emulated and slower, so zoo warns and runs fp32.
- ``onnx-fp32``: the model as a fused ONNX Runtime graph (``zoo.inference.fused_onnx``: 7 fused kernels per layer),
  float32: the Keras model's outputs within ``PARITY_TOLERANCE`` (tested).
- ``int8``: the same fused graph with ONNX Runtime's static quantization (``zoo.inference.quantization.quantize``: int8
  weights per output channel and uint8 activations for every matrix product, with fixed scales calibrated on texts
  shipped with zoo, so a text's vector does not depend on the texts in its batch).
- ``openvino-int8``: the same quantization (int8 activations symmetric, the attention's products included, the
  products' outputs left float) of the fused graph rewritten with standard ops, run by OpenVINO
  (``zoo.inference.openvino_engine``, extra ``openvino``): faster than ONNX Runtime's int8 in batches on machines with
  AVX-512 VNNI, and it runs several batches at once.
- ``auto`` (the default), lossless: never changes a vector beyond float32 rounding. ``onnx-fp32`` where ONNX
  Runtime is installed, the model has a fused graph and that graph's outputs were measured within
  ``PARITY_TOLERANCE`` of the Keras model's when it was written (``zoo.inference.graphs.parity``); Keras fp32
  otherwise (and on a GPU). ``$ZOO_PRECISION`` replaces it when set.
- ``fastest``, lossy by choice: the fastest path on this machine among those whose quality loss was measured
  small (``zoo.inference.autotune``). The first time a model's graph is seen on a machine, zoo measures on a probe set --
  the first ``PROBE_PAIRS`` pairs of LCQMC's valid split in zoo's data folder -- and keeps ``onnx-fp32`` when
  its parity holds and ``int8`` when, besides, its Spearman on the probe pairs is at most ``MAX_SPEARMAN_LOSS``
  below onnx-fp32's, then times Keras fp32 and the kept ONNX paths on a probe workload in interleaved rounds
  and picks the fastest in batches of 64 (bulk work; single rows are timed and reported, not deciding). The choice, with its numbers, is logged and
  recorded in zoo's cache. Without the probe data int8's quality cannot be measured: it is not a candidate.

The ONNX graphs and sessions are ``zoo.inference.graphs``'s, auto's measurement ``zoo.inference.autotune``'s. The bf16 copy and ONNX sessions are built at first use and
kept per model; they follow the weights: a change (more training, ``set_weights``) is noticed from a sample of
the weights at the next call and they are rebuilt. ``forget(model)`` drops them at once.
"""

from __future__ import annotations

import os
import weakref

from ..choices import ENGINES
from ..fingerprints import weights_fingerprint
from ..hardware import bf16_supported
from ..logs import log
from .autotune import decide, forget_record
from .graphs import ONNX_PRECISIONS, onnx_session

PRECISIONS = ENGINES  # the name before encode(engine=)
_RUNNERS = weakref.WeakKeyDictionary()  # model -> {"fingerprint": ..., precision: Runner, "auto": precision}
_warned = set()


class Runner:
    """A callable batch dict -> output array at one precision (its batches padded as
    ``zoo.inference.sessions.pad_length`` says). ``submit`` / ``wait``: ``fn``'s where it has them (a
    ``zoo.inference.sessions.GraphRunner``), else None."""

    def __init__(self, fn, precision):
        self.fn, self.precision = fn, precision
        self.submit, self.wait = getattr(fn, "submit", None), getattr(fn, "wait", None)

    def __call__(self, batch):
        import keras

        return keras.ops.convert_to_numpy(self.fn(batch))


def check_precision(precision):
    if precision not in PRECISIONS:
        raise ValueError(f"engine must be one of {ENGINES}, got {precision!r}")
    return precision


def resolve_precision(precision, model=None):
    """The precision that will run: ``precision``, auto's choice for ``model``, or fp32 (with one warning) for bf16
    on a CPU without it."""
    check_precision(precision)
    if precision in ("auto", "fastest"):
        precision = choose(model, precision) if model is not None else "fp32"
    if precision == "bf16" and not bf16_supported():
        if "bf16" not in _warned:
            log.warning("precision='bf16' needs a CPU with AVX512-BF16 or AMX (this one has neither): running fp32")
            _warned.add("bf16")
        return "fp32"
    return precision


def runner(model, precision="auto"):
    """A ``Runner`` of ``model`` at ``precision`` (built once per model and weights)."""
    check_precision(precision)
    if precision in ("auto", "fastest") and os.environ.get("ZOO_PRECISION"):
        precision = forced_precision()
        if precision in ONNX_PRECISIONS and (refusal := no_fused_graph(model)):  # a default, not a demand
            if not _RUNNERS.setdefault(model, {}).get("forced_to_fp32"):  # said once per model
                log.info("ZOO_PRECISION=%s: running fp32 for this %s (%s)", precision, type(model).__name__, refusal)
                _RUNNERS[model]["forced_to_fp32"] = True
            precision = "fp32"
    state = _RUNNERS.setdefault(model, {})
    if precision != "fp32":  # every other runner is derived from the weights: rebuilt when they change
        fingerprint = weights_fingerprint(model)
        if state.get("fingerprint") != fingerprint:
            state.clear()
            state["fingerprint"] = fingerprint
    precision = resolve_precision(precision, model)
    if precision not in state:
        if precision == "fp32":
            state[precision] = Runner(model._predict_batch, "fp32")
        elif precision == "bf16":
            state[precision] = Runner(bfloat16_copy(model).predict_on_batch, "bf16")
        else:
            state[precision] = Runner(onnx_session(model, precision), precision)
    return state[precision]


def no_fused_graph(model):
    """Why ``model`` has no fused ONNX graph (``zoo.inference.fused_onnx.describe``'s refusal), or None when it has one."""
    from .fused_onnx import describe

    try:
        describe(model)
    except TypeError as e:
        return str(e)
    return None


def forget(model):
    """Drop the bf16 copy, ONNX sessions and auto choice kept for ``model`` (rebuilt from its current weights)."""
    _RUNNERS.pop(model, None)


def copy_with_dtype(model, dtype):
    """``model`` rebuilt with the ``dtype`` policy ("bfloat16", "float32", "mixed_bfloat16" ...), its weights cast."""
    config = model.get_config()
    config["backbone"] = dict(config["backbone"], config=dict(config["backbone"]["config"], dtype=dtype))
    copy = type(model).from_config(config)
    copy.tokenizer = model.tokenizer
    copy.set_weights(model.get_weights())
    return copy


def bfloat16_copy(model):
    """``model`` rebuilt with the bfloat16 dtype policy and its weights cast to bfloat16."""
    return copy_with_dtype(model, "bfloat16")


# ----------------------------------------------------------------------------------- auto
def choose(model, mode="auto"):
    """The precision ``auto`` (lossless) or ``fastest`` runs for ``model`` (see the module's docstring); decided
    once per model and weights, logged."""
    state = _RUNNERS.setdefault(model, {})
    if mode not in state:
        choice, reason = (forced_precision(), "set by ZOO_PRECISION") if os.environ.get("ZOO_PRECISION") \
            else decide(model, mode)
        log.info("precision %s: %s for this %s (%s)", mode, choice, type(model).__name__, reason)
        state[mode] = choice
    return state[mode]


def remeasure(model):
    """Measure fastest's choice for ``model`` on this machine again, replacing its record (one taken while the
    machine was busy, say; ``zoo encode --precision fastest --remeasure`` on the command line) -> the choice."""
    forget_record(model)
    forget(model)
    return choose(model, "fastest")


def forced_precision():
    """``$ZOO_PRECISION``: what ``auto`` runs when it is set (ValueError for an unknown name)."""
    forced = os.environ.get("ZOO_PRECISION")
    if forced not in PRECISIONS[1:]:
        raise ValueError(f"ZOO_PRECISION must be one of {PRECISIONS[1:]}, got {forced!r}")
    return forced
