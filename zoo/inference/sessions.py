"""ONNX Runtime and OpenVINO sessions of a graph file: ``GraphRunner`` (one batch at once, or queued to an engine's
parallel streams), the thread count, and ``require_onnx``. Light at import: numpy only."""

from __future__ import annotations

import os

import numpy as np

from ..hardware import usable_cpus
from ..tokenizer.wordpiece import batch_length

ID_INPUTS = ("token_ids", "segment_ids", "padding_mask")


def engine_of(precision):
    """The runtime that runs a graph precision, as ``vector_source`` records it."""
    return "openvino" if precision == "openvino-int8" else "onnxruntime"


def pad_length(precision, batch, maxlen=None):
    """The length a batch of rows is padded to at ``precision``, or None for its longest row. Keras (fp32, bf16):
    a multiple of 8 tokens (``zoo.tokenizer.batch_length``), as XLA compiles one program per shape. OpenVINO's
    single rows too: it prepares its kernels again whenever the input shape changes from one call to the next
    (about 1 ms a call on 2 cores, one text at a time), so few shapes keep it fast; in batches that cost is shared
    by 64 rows and the padding would cost more. ONNX Runtime runs any length as it is. Padding does not change a
    vector (the padding mask; batch independence is tested)."""
    if precision in ("fp32", "bf16") or (precision == "openvino-int8" and len(batch) == 1):
        return batch_length(batch, maxlen)
    return None


def require_onnx():
    """``onnxruntime`` (``MissingExtra`` naming ``zoo[onnx]`` when it or ``onnx`` is missing)."""
    from ..errors import require

    require("onnx", "onnx", "ONNX Runtime graphs")
    return require("onnxruntime", "onnx", "ONNX Runtime graphs")


class GraphRunner:
    """A graph's session as ``runner(batch)`` -> output array, and ``submit(batch, done)`` / ``wait()``: the
    batch queued to the engine's parallel streams where it has them (OpenVINO), run at once otherwise
    (``zoo.inference.pipeline.predict_sorted`` uses these for many batches)."""

    def __init__(self, session):
        self.session = session

    @staticmethod
    def feeds(batch):
        return {k: np.asarray(batch[k], dtype="int32") for k in ID_INPUTS}

    def __call__(self, batch):
        return self.session.run(None, self.feeds(batch))[0]

    def submit(self, batch, done):
        if hasattr(self.session, "submit"):
            self.session.submit(self.feeds(batch), done)
        else:
            done(self(batch))

    def wait(self):
        if hasattr(self.session, "wait"):
            self.session.wait()


def open_session(path, precision):
    """The engine's session of the graph file ``path``: OpenVINO's for ``openvino-int8``, else ONNX Runtime's."""
    if precision == "openvino-int8":
        from .openvino_engine import OpenVinoSession

        return OpenVinoSession(path, runtime_threads())
    return new_session(path)


def runtime_threads():
    """Threads of a graph session: ``$ZOO_ORT_THREADS``, or TensorFlow's intra-op thread count when one is set
    (``zoo encode --processes``), else one per CPU this process may use."""
    import sys

    threads = int(os.environ.get("ZOO_ORT_THREADS") or 0)
    if not threads and "tensorflow" in sys.modules:
        threads = sys.modules["tensorflow"].config.threading.get_intra_op_parallelism_threads()
    return threads or usable_cpus()


def new_session(path):
    """An ONNX Runtime CPU session of ``path`` on ``runtime_threads()`` threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = runtime_threads()
    options.inter_op_num_threads = 1
    # ONNX Runtime's default, kept: between a run's ops the pool's threads spin instead of sleeping. A small model's
    # ops take microseconds, and waking sleeping threads for each one measured slower at batch 64 and much slower
    # for one sentence on 2 idle cores. ``ZOO_ORT_SPIN=0`` makes them sleep (a machine crowded with other work).
    options.add_session_config_entry("session.intra_op.allow_spinning", os.environ.get("ZOO_ORT_SPIN", "1"))
    return ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])
