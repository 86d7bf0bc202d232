"""Inference: what runs a task model's forward pass, and how fast.

- ``precisions``: the engines of ``encode(..., engine=...)`` and their runners (Keras fp32, a bf16 copy,
  ONNX Runtime and OpenVINO graphs), ``auto``'s and ``fastest``'s choice;
- ``autotune``: ``fastest``'s measurement on this machine, recorded in zoo's cache;
- ``fused_onnx`` and ``standard_onnx``: the fused ONNX Runtime graph written from a model's weights, and its
  rewrite with standard ops (OpenVINO's form);
- ``quantization``: their int8 versions, calibrated with fixed scales;
- ``graphs``: the graph cache, shipped graphs, parity with Keras, links to presets;
- ``sessions`` and ``openvino_engine``: the engines' sessions;
- ``pipeline``: the encoding pipeline (rows longest first, windows of long texts, normalisation) that Keras and
  the light runtime share;
- ``light``: ``OnnxEncoder``, sentence vectors without TensorFlow, Keras or JAX.

The names below are this package's public API (and the old modules' ``zoo.inference``, ``zoo.inference.graphs`` and
``zoo.inference.light``); zoo's own modules import from the module that defines a name.
"""

from ..fingerprints import weights_fingerprint
from ..hardware import bf16_supported, cpu_flags
from .graphs import (
                     CACHE_INFO,
                     FP32_GRAPH,
                     GRAPH_FOLDER,
                     GRAPH_INFO,
                     INT8_GRAPH,
                     ONNX_FILES,
                     ONNX_PRECISIONS,
                     OPENVINO_GRAPH,
                     PARITY_TEXTS,
                     PARITY_TOLERANCE,
                     cached_graphs,
                     encoder_record,
                     export_info,
                     find_graphs,
                     graph_key,
                     graph_path,
                     int8_graph,
                     link_folder,
                     link_preset,
                     loaded_preset,
                     onnx_session,
                     parity,
                     preset_weights_sha256,
                     write_graphs,
                     write_preset_graphs,
)
from .light import RUNTIME_PRECISIONS, OnnxEncoder, light_encoder
from .pipeline import embed_texts, predict_sorted
from .precisions import (
                     PRECISIONS,
                     Runner,
                     bfloat16_copy,
                     check_precision,
                     choose,
                     copy_with_dtype,
                     forced_precision,
                     forget,
                     no_fused_graph,
                     resolve_precision,
                     runner,
)
from .quantization import (
                     CALIBRATION_BATCH,
                     CALIBRATION_TEXTS,
                     OPENVINO_QUANTIZATION,
                     QUANTIZATION,
                     calibration_batches,
                     quantize,
                     transposes_after_quantization,
                     with_contrib_output_types,
)
from .sessions import ID_INPUTS, GraphRunner, engine_of, new_session, open_session, require_onnx, runtime_threads

__all__ = ["CACHE_INFO", "CALIBRATION_BATCH", "CALIBRATION_TEXTS", "FP32_GRAPH", "GRAPH_FOLDER", "GRAPH_INFO",
           "ID_INPUTS", "INT8_GRAPH", "ONNX_FILES", "ONNX_PRECISIONS", "OPENVINO_GRAPH", "OPENVINO_QUANTIZATION",
           "PARITY_TEXTS", "PARITY_TOLERANCE", "PRECISIONS", "QUANTIZATION", "RUNTIME_PRECISIONS", "GraphRunner",
           "OnnxEncoder", "Runner", "bf16_supported", "bfloat16_copy", "cached_graphs", "calibration_batches",
           "check_precision", "choose", "copy_with_dtype", "cpu_flags", "embed_texts", "encoder_record", "engine_of",
           "export_info", "find_graphs", "forced_precision", "forget", "graph_key", "graph_path", "int8_graph",
           "light_encoder", "link_folder", "link_preset", "loaded_preset", "new_session", "no_fused_graph",
           "onnx_session", "open_session", "parity", "predict_sorted", "preset_weights_sha256", "quantize",
           "require_onnx", "resolve_precision", "runner", "runtime_threads", "transposes_after_quantization",
           "weights_fingerprint", "with_contrib_output_types", "write_graphs", "write_preset_graphs"]
