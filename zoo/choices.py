"""The named choices zoo accepts, in one leaf (the standard library only): the modules that act on them (poolings,
heads, losses, pretraining, distribution) and the command line's flags (``zoo.config``) import them from here, so
``zoo --help`` lists them without loading Keras."""

from __future__ import annotations

from .errors import ConfigError

# sentence vectors (``zoo.pooling``); the last four are sentence-transformers' max, lasttoken, weightedmean and
# mean_sqrt_len_tokens
DEPRECATED_IN, REMOVED_IN = "0.3", "0.4"  # old spellings (flags, arguments): still accepted until REMOVED_IN
# encode(engine=): the runtime that computes the vectors (``zoo.inference.precisions``); ``precision=`` is the output's
ENGINES = ("auto", "fastest", "fp32", "bf16", "onnx-fp32", "int8", "openvino-int8")
POOLINGS = ("cls", "mean", "first-last-avg", "pooler", "max", "lasttoken", "weightedmean", "mean_sqrt_len")
SCORE_HEADS = ("softmax", "cosent")  # a cross-encoder's score heads (``zoo.heads.HeadSpec``)
PAIR_OBJECTIVES = ("cosent", "sbert", "cosine_mse")  # a bi-encoder's pair losses (``zoo.losses.objective_loss``)
PRETRAINING_OBJECTIVES = ("mlm", "tacl", "taco")  # ``zoo.models.pretrainer``
DVBERT_OBJECTIVES = ("sbert", "cosent", "cosent-gap")  # ``zoo.train.distillation_trainer``
DISTRIBUTE_MODES = ("none", "data-parallel")  # ``zoo.distribute``
MIXED_PRECISIONS = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}  # --mixed-precision -> Keras' dtype policy
TASKS = ("LCQMC", "ATEC", "BQ", "PAWSX", "STS-B")  # the benchmarks (``zoo.data.tasks``)
# pair files by extension, each may end in .gz (``zoo.data.pair_files``)
PAIR_FILE_FORMATS = {".data": "tsv", ".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "json",
                     ".parquet": "parquet"}


def check_choice(value, choices, name):
    """``value`` when it is one of ``choices``, else ConfigError naming the parameter ``name`` and the choices."""
    if value not in choices:
        raise ConfigError(f"{name} must be one of {tuple(choices)}, got {value!r}", param=name)
    return value


def check_warmup(warmup, name="warmup"):
    """ConfigError naming ``name`` unless ``warmup`` (a share of the training steps) is None or in [0, 1)."""
    if warmup is not None and not 0 <= warmup < 1:
        raise ConfigError(f"{name} is a share of the training steps in [0, 1), got {warmup}", param=name)
