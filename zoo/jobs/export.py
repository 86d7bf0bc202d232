"""Export job: a model as a versioned folder that ``zoo serve`` serves (a SavedModel taking raw strings, or an ONNX
Runtime graph), or as a transformers folder. ``zoo export``; the library is ``zoo.export``."""

from __future__ import annotations

import dataclasses
import os

from ..choices import POOLINGS
from ..config import option
from ..errors import ConfigError
from ..logs import log


@dataclasses.dataclass
class ExportConfig:
    """Write MODEL as OUTPUT/NAME/VERSION/ (TF Serving's layout): a SavedModel that takes raw strings, or with
    --format onnx a fused ONNX Runtime graph that takes token ids (plus the tokenizer; `zoo serve` serves either)."""

    model: str = option(None, "a checkpoint folder (Google, transformers), a zoo preset (folder or name), run folder "
                              "or .keras file of a SentenceEncoder, SimBERT or CrossEncoder", required=True)
    output: str = option(None, "base folder; the export goes to OUTPUT/NAME/VERSION", required=True,
                         aliases=("--out",))
    format: str = option("saved_model", "saved_model: strings in (TF Serving); onnx: token ids in; transformers: "
                                        "a BertModel folder (+ sentence-transformers modules for cls/mean pooling)",
                         choices=("saved_model", "onnx", "transformers"))
    name: str = option("default", "model name")
    version: int | None = option(None, "version number (default: the next free one)")
    signature: str = option("text", "text: strings in, tokenizer in the graph (signatures text, ids, tokenize); "
                                    "ids: token ids in, no tf-text ops", choices=("text", "ids"))
    pooling: str | None = option(None, "pooling when MODEL is a checkpoint (default: cls)",
                                 choices=POOLINGS)
    maxlen: int | None = option(None, "tokens per text (default: the model's maxlen)")
    quantize: str = option("none", "none: float32, lossless; int8: ONNX Runtime static quantization with "
                                   "calibrated scales (onnx) or Keras int8 kernels (saved_model), lossy; bf16: a "
                                   "bfloat16 SavedModel; auto: int8 for onnx when precision fastest picks it for this "
                                   "model on this machine, else none", choices=("none", "int8", "bf16", "auto"))

    def __post_init__(self):
        if self.format == "onnx" and self.quantize == "bf16":
            raise ConfigError("--quantize bf16 is for --format saved_model (ONNX Runtime has no fast bf16 CPU "
                              "kernels); for ONNX use --quantize int8")
        if self.version is not None and self.version < 1:
            raise ConfigError(f"--version must be a positive integer, got {self.version}")


def run(config: ExportConfig):
    """Export ``--model``; returns the version folder written."""
    from ..checkpoints import save_transformers
    from ..export.exportable import load_exportable, version_path
    from ..export.onnx import export_onnx_folder
    from ..export.saved_model import export_saved_model, quantized_copy
    from ..paths import EXPORT_MANIFEST, atomic_dir, read_json_file

    model = load_exportable(config.model, pooling=config.pooling, maxlen=config.maxlen)
    path = version_path(config.output, config.name, config.version)
    if config.quantize == "auto" and config.format != "onnx":  # auto quantizes ONNX graphs only: Keras' own int8
        config = dataclasses.replace(config, quantize="none")   # measured no faster than fp32 (docs/inference.md)
    if os.path.exists(path):
        raise FileExistsError(f"{path} exists; choose another --version")
    if config.format == "transformers":
        if config.quantize != "none":
            raise ConfigError("--format transformers writes float32 weights; drop --quantize")
        if getattr(model, "dense", None):
            raise ConfigError(f"--format transformers writes no Dense modules, and {config.model} has Dense layers "
                              f"after its pooling: export it as a SavedModel (--format saved_model)")
        with atomic_dir(path) as tmp:
            save_transformers(model.backbone, tmp, model.tokenizer, pooling=getattr(model, "pooling", None),
                              maxlen=model.maxlen)
    elif config.format == "onnx":
        export_onnx_folder(model, path, quantize=config.quantize)
    else:
        export_saved_model(model if config.quantize == "none" else quantized_copy(model, config.quantize), path,
                           signature=config.signature)
    written = {"none": "float32", "int8": "int8", "bf16": "bfloat16"}[config.quantize]
    if config.format == "onnx":
        written = read_json_file(os.path.join(path, EXPORT_MANIFEST), "the export's manifest")["precision"]
    log.info("exported %s (maxlen %d, precision %s) to %s", type(model).__name__, model.maxlen, written, path)
    return path
