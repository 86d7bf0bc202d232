"""ONNX exports: the fused ONNX Runtime graph of a model's ``ids`` signature (float32, or int8 with calibrated
scales), alone or as a folder ``zoo serve`` serves (graph, tokenizer, manifest)."""

from __future__ import annotations

import os

from ..errors import ConfigError
from ..paths import EXPORT_MANIFEST, atomic_dir, file_manifest, write_json_atomic
from .exportable import described, serving_spec

ONNX_FILE = "model.onnx"


def export_onnx(model, path, quantize="none"):
    """``model`` as one ONNX file: the fused ONNX Runtime graph (``zoo.inference.fused_onnx``) of the ``ids``
    signature, ``token_ids``, ``segment_ids``, ``padding_mask`` int32 [batch, length] -> the served output
    (``embedding``, as ``encode`` gives it, or ``score``).

    :param model: a SentenceEncoder, CrossEncoder or SimBERT.
    :param path: the ``.onnx`` file.
    :param quantize: "none" (float32, lossless), "int8" (ONNX Runtime's static quantization with calibrated scales:
        batch-independent) or "auto" (int8 when engine "fastest" picks it for this model on this machine).
    :returns: the engine written: "onnx-fp32" or "int8".
    """
    import tempfile

    from ..inference.precisions import choose
    from ..inference.quantization import quantize as quantize_graph
    from ..inference.sessions import require_onnx

    if quantize not in ("none", "int8", "auto"):
        raise ConfigError(f"ONNX export quantizes to int8 only (ONNX Runtime has no fast bf16 CPU kernels), "
                          f"got {quantize!r}")
    require_onnx()
    import onnx

    from ..inference.fused_onnx import fused_graph

    serving_spec(model)
    if quantize == "auto":
        quantize = "int8" if choose(model.served_model(), "fastest") == "int8" else "none"
    graph = fused_graph(model, served=True)
    path = os.fspath(path)
    if quantize == "none":
        onnx.save(graph, path)
        return "onnx-fp32"
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(graph, os.path.join(tmp, ONNX_FILE))
        quantize_graph(os.path.join(tmp, ONNX_FILE), path, model.tokenizer, model.maxlen, serving_spec(model).pairs)
    return "int8"


def export_onnx_folder(model, path, quantize="none", maxlen=None):
    """An ONNX export folder at ``path`` (written to a temporary folder, then renamed), which ``zoo serve`` serves
    behind the same APIs as a SavedModel and ``OnnxEncoder`` loads: ``model.onnx`` (``export_onnx``), the tokenizer
    (``vocab.txt``, ``tokenizer_config.json``) and ``zoo_manifest.json`` (text inputs, output, maxlen, precision,
    prompts, the sha256 of every file).

    :param model: a SentenceEncoder, CrossEncoder or SimBERT.
    :param path: the folder.
    :param quantize: as ``export_onnx``'s.
    :param maxlen: tokens per input (None: ``model.maxlen``).
    """
    spec = serving_spec(model)
    maxlen = int(maxlen or model.maxlen)
    max_positions = model.backbone.max_sequence_length
    if maxlen > max_positions:
        raise ValueError(f"maxlen={maxlen} is above the model's {max_positions} position embeddings")
    with atomic_dir(path) as tmp:
        precision = export_onnx(model, os.path.join(tmp, ONNX_FILE), quantize=quantize)
        model.tokenizer.save_to_preset(tmp)
        write_json_atomic(os.path.join(tmp, EXPORT_MANIFEST), {
            "format": "zoo-onnx", "model": described(model, spec), "text_inputs": list(spec.texts),
            "vocabulary_size": model.backbone.vocabulary_size,
            "num_segments": model.backbone.num_segments, "max_positions": model.backbone.max_sequence_length,
            "output": spec.output, "maxlen": maxlen, "precision": precision,
            "zero_segments": spec.zero_segments, "files": file_manifest(tmp)})
    return path
