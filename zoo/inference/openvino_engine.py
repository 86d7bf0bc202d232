"""OpenVINO as the engine of precision ``openvino-int8``: zoo's fused graph rewritten with standard ops
(``zoo.inference.standard_onnx``), quantized by ONNX Runtime's static QDQ quantizer with symmetric int8 activations, every
matrix product's inputs included (the attention's too; the outputs stay float and fuse into the product's kernel:
``zoo.inference.quantization.quantize``), compiled by OpenVINO's CPU plugin, which runs its products as int8 kernels.

On machines where OpenVINO's int8 kernels are faster than ONNX Runtime's (AVX-512 VNNI, measured in
bench/results/inference.json), ``fastest`` picks it (``zoo.inference.autotune``). Its float parts run in float32 on every
CPU (``INFERENCE_PRECISION_HINT`` f32: OpenVINO's default is bf16 where the CPU has it), so a text's vector is
the same on hosts of one CPU kind whatever their bf16 support.

``OpenVinoSession`` has ONNX Runtime's ``run(None, feeds)`` (one request, the latency configuration: every core
on one batch) and ``submit(feeds, done)`` / ``wait()``: batches queued to OpenVINO's throughput configuration,
one stream per core group, each on its own batch (``zoo.inference.pipeline.predict_sorted`` uses it for many batches).
Both compile the same graph with the same kernels: a text's vector does not depend on the path it took.
Compiled models are cached in ``zoo.paths.cache_dir("openvino")``."""

from __future__ import annotations

import os
import threading

from ..paths import cache_dir

OPENVINO_INT8 = "openvino-int8"


def require_openvino():
    """``openvino`` (``MissingExtra`` naming ``zoo[openvino]`` when missing)."""
    from ..errors import require

    return require("openvino", "openvino", "precision 'openvino-int8'")


def openvino_available():
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


class OpenVinoSession:
    """An OpenVINO CPU model of the graph file ``path`` on ``threads`` threads (see the module's docstring)."""

    def __init__(self, path, threads):
        ov = require_openvino()
        self._ov, self._path = ov, os.fspath(path)
        self._core = ov.Core()
        self._config = {"INFERENCE_NUM_THREADS": int(threads), "INFERENCE_PRECISION_HINT": "f32"}
        try:
            self._config["CACHE_DIR"] = cache_dir("openvino")
            os.makedirs(self._config["CACHE_DIR"], exist_ok=True)
        except OSError:
            self._config.pop("CACHE_DIR", None)
        self._request = self._compile("LATENCY").create_infer_request()
        self._queue, self._lock = None, threading.Lock()

    def _compile(self, hint):
        return self._core.compile_model(self._path, "CPU", {**self._config, "PERFORMANCE_HINT": hint})

    def run(self, output_names, feeds):
        """ONNX Runtime's ``InferenceSession.run``: [the graph's output] for ``feeds`` (name -> array)."""
        return [self._request.infer(feeds)[0].copy()]

    def submit(self, feeds, done):
        """Queue ``feeds``; ``done(output)`` is called (from OpenVINO's thread) when it has run. Blocks while
        every stream is busy."""
        if self._queue is None:
            with self._lock:
                if self._queue is None:
                    compiled = self._compile("THROUGHPUT")
                    queue = self._ov.AsyncInferQueue(compiled, compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
                    queue.set_callback(lambda request, callback: callback(request.get_output_tensor(0).data.copy()))
                    self._queue = queue
        self._queue.start_async(feeds, done)

    def wait(self):
        """Return when every submitted batch has run."""
        if self._queue is not None:
            self._queue.wait_all()
