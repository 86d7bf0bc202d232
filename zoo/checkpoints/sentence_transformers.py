"""sentence-transformers folders (bge-*-zh, text2vec, m3e ...): a BERT folder plus ``modules.json``, read as what a
``zoo.SentenceEncoder`` needs -- the Transformer module's folder (backbone and tokenizer), the pooling, the Dense
layers (weights included), whether a Normalize module ends the pipeline, and the length and casing of
``sentence_bert_config.json``. Modules other than Transformer, Pooling, Dense and Normalize are refused by name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import CheckpointError
from ..logs import log
from .transformers import read_state_dict, weight_files

MODULES_FILE = "modules.json"
ST_CONFIG = "sentence_bert_config.json"
ST_MODEL_CONFIG = "config_sentence_transformers.json"
SUPPORTED_MODULES = ("Transformer", "Pooling", "Dense", "Normalize")

# sentence-transformers' pooling modes (``pooling_mode`` values, and the legacy ``pooling_mode_*`` flags in the
# order sentence-transformers concatenates them) -> zoo's names (``zoo.config.POOLINGS``)
POOLING_MODES = {"cls": "cls", "max": "max", "mean": "mean", "mean_sqrt_len_tokens": "mean_sqrt_len",
                 "weightedmean": "weightedmean", "lasttoken": "lasttoken"}
LEGACY_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                        "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                        "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}

# torch activation classes a Dense module names (``torch.nn.modules.activation.Tanh``) -> Keras activations with the
# same formula and defaults (GELU: the exact erf form, torch's and Keras' default)
ACTIVATIONS = {"Tanh": "tanh", "Identity": "linear", "ReLU": "relu", "GELU": "gelu", "Sigmoid": "sigmoid",
               "SiLU": "silu", "ELU": "elu", "SELU": "selu", "Softplus": "softplus", "Softsign": "softsign",
               "Mish": "mish", "Hardsigmoid": "hard_sigmoid"}
DEFAULT_ACTIVATION = "torch.nn.modules.activation.Tanh"  # a Dense config without activation_function
UNSET_LENGTH = 1_000_000  # tokenizer_config.json's model_max_length above this means "not set" (transformers: 1e30)


@dataclass
class SentenceTransformersFolder:
    """What ``read_folder`` found. ``dense``: one dict per Dense module, ``units``, ``activation`` (a Keras name)
    and ``use_bias`` (``SentenceEncoder(dense=...)``), with its weights apart in ``dense_weights`` (Keras order:
    kernel [in, out], then bias). ``maxlen``: max_seq_length (None: not recorded)."""

    folder: str
    transformer: str
    pooling: str
    dense: list = field(default_factory=list)
    dense_weights: list = field(default_factory=list)
    normalize: bool = False
    maxlen: int | None = None
    do_lower_case: bool | None = None
    prompts: dict = field(default_factory=dict)
    default_prompt_name: str | None = None
    embedding_dimension: int | None = None
    similarity_fn_name: str = "cosine"

    def summary(self):
        """One line: pooling, Dense layers, normalisation and length."""
        dense = ", ".join(f"{d['units']} {d['activation']}" for d in self.dense) or "none"
        return (f"pooling {self.pooling}, dense layers: {dense}, normalize {self.normalize}, "
                f"max_seq_length {self.maxlen}")

    def check_width(self, hidden_dim, pooling=None):
        """CheckpointError unless the Pooling and Dense widths fit a backbone of ``hidden_dim`` under ``pooling``
        (default the folder's)."""
        if self.embedding_dimension is not None and int(self.embedding_dimension) != int(hidden_dim):
            raise CheckpointError(f"{self.folder}: the Pooling module expects {self.embedding_dimension}-wide token "
                                  f"vectors, but the Transformer module's model is {hidden_dim} wide")
        width = int(hidden_dim) * len((pooling or self.pooling).split("+"))
        for i, (spec, weights) in enumerate(zip(self.dense, self.dense_weights)):
            if weights[0].shape[0] != width:
                raise CheckpointError(f"{self.folder}: Dense module {i} takes {weights[0].shape[0]} features, but "
                                      f"the pooling {pooling or self.pooling!r} gives {width}")
            width = spec["units"]


def is_sentence_transformers_folder(path):
    """True when ``path`` is a folder with a ``modules.json``."""
    return os.path.isdir(os.fspath(path)) and os.path.isfile(os.path.join(os.fspath(path), MODULES_FILE))


def read_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing ({what})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({what}: {e})") from None


def module_kind(entry, folder):
    """"Transformer", "Pooling", "Dense" or "Normalize" for a modules.json entry; CheckpointError for another."""
    kind = str(entry.get("type", ""))
    name = kind.rsplit(".", 1)[-1]
    if not kind.startswith("sentence_transformers.") or name not in SUPPORTED_MODULES:
        raise CheckpointError(f"{folder}: module {entry.get('path') or entry.get('name')!r} of {MODULES_FILE} is a "
                              f"{kind or 'module without a type'}, which zoo cannot load; supported are "
                              f"sentence-transformers' {', '.join(SUPPORTED_MODULES)}")
    return name


def read_folder(path):
    """A sentence-transformers folder as a ``SentenceTransformersFolder``: modules in the order Transformer,
    Pooling, Dense (any number), Normalize (optional, last). CheckpointError naming the folder and module for
    anything else."""
    folder = os.fspath(path)
    modules = read_json(os.path.join(folder, MODULES_FILE), "the sentence-transformers modules")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise CheckpointError(f"{os.path.join(folder, MODULES_FILE)}: expected a list of modules")
    kinds = [module_kind(m, folder) for m in modules]
    order = " -> ".join(kinds)
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Dense" for k in kinds[2:len(kinds) - 1]) \
            or (len(kinds) > 2 and kinds[-1] not in ("Dense", "Normalize")):
        raise CheckpointError(f"{folder}: modules {order}; zoo loads Transformer -> Pooling -> Dense (any number) "
                              f"-> Normalize (optional)")
    paths = [os.path.join(folder, m.get("path") or "") for m in modules]
    transformer = os.path.normpath(paths[0])
    st_config = _read_optional(os.path.join(transformer, ST_CONFIG))
    task = st_config.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise CheckpointError(f"{os.path.join(transformer, ST_CONFIG)}: transformer_task {task!r}; zoo loads "
                              f"sentence embedding models (feature-extraction)")
    pooling, dimension, include_prompt = _read_pooling(paths[1])
    result = SentenceTransformersFolder(folder=folder, transformer=transformer, pooling=pooling,
                                        embedding_dimension=dimension, normalize=kinds[-1] == "Normalize",
                                        maxlen=_max_seq_length(transformer, st_config),
                                        do_lower_case=st_config.get("do_lower_case"))
    for kind, module_path in zip(kinds[2:], paths[2:]):
        if kind == "Dense":
            spec, weights = _read_dense(module_path)
            result.dense.append(spec)
            result.dense_weights.append(weights)
        else:
            _check_io_names(module_path, "Normalize")
    _read_model_config(folder, result, include_prompt)
    return result


def _read_optional(path):
    return read_json(path, "sentence-transformers settings") if os.path.exists(path) else {}


def _read_pooling(folder):
    """(zoo pooling name, embedding dimension, include_prompt) of a Pooling module."""
    path = os.path.join(folder, "config.json")
    config = read_json(path, "the Pooling module's settings")
    modes = config.get("pooling_mode")
    if modes is None:  # the legacy flags; none set means mean (sentence-transformers' rule)
        modes = [mode for flag, mode in LEGACY_POOLING_FLAGS.items() if config.get(flag)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else list(modes)
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown or not modes:
        raise CheckpointError(f"{path}: pooling mode {unknown or modes} unknown to zoo; known: "
                              f"{', '.join(POOLING_MODES)}")
    dimension = config.get("embedding_dimension", config.get("word_embedding_dimension"))
    return "+".join(POOLING_MODES[m] for m in modes), dimension, bool(config.get("include_prompt", True))


def keras_activation(name, where):
    """The Keras activation of a torch activation class name; CheckpointError naming an unknown one."""
    short = str(name).rsplit(".", 1)[-1]
    if not str(name).startswith("torch.") or short not in ACTIVATIONS:
        raise CheckpointError(f"{where}: activation_function {name!r} unknown to zoo; known: torch.nn "
                              f"{', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[short]


def _check_io_names(folder, kind):
    config = _read_optional(os.path.join(folder, "config.json"))
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, "sentence_embedding") not in (None, "sentence_embedding"):
            raise CheckpointError(f"{os.path.join(folder, 'config.json')}: a {kind} module on {config[key]!r}; "
                                  f"zoo loads {kind} modules on the sentence embedding only")
    return config


def _read_dense(folder):
    """({units, activation, use_bias}, [kernel [in, out], bias]) of a Dense module."""
    path = os.path.join(folder, "config.json")
    config = _check_io_names(folder, "Dense")
    if not config:
        raise CheckpointError(f"{path}: missing (the Dense module's settings)")
    if config.get("use_residual"):
        raise CheckpointError(f"{path}: a Dense module with use_residual; zoo loads plain Dense modules")
    try:
        in_features, out_features = int(config["in_features"]), int(config["out_features"])
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{path}: in_features and out_features must be integers") from None
    use_bias = bool(config.get("bias", True))
    activation = keras_activation(config.get("activation_function") or DEFAULT_ACTIVATION, path)
    files = weight_files(folder)
    if not files:
        raise CheckpointError(f"{folder}: no model.safetensors or pytorch_model.bin (the Dense module's weights)")
    state = read_state_dict(files[0])
    expected = {"linear.weight": (out_features, in_features)}
    if use_bias:
        expected["linear.bias"] = (out_features,)
    for key, shape in expected.items():
        if key not in state:
            raise CheckpointError(f"{files[0]}: no {key!r} (the Dense module's weights); found {sorted(state)[:8]}")
        if tuple(state[key].shape) != shape:
            raise CheckpointError(f"{files[0]}: {key!r} has shape {tuple(state[key].shape)}, expected {shape} "
                                  f"({in_features} -> {out_features} in {path})")
    weights = [np.asarray(state["linear.weight"], "float32").T]
    if use_bias:
        weights.append(np.asarray(state["linear.bias"], "float32"))
    return {"units": out_features, "activation": activation, "use_bias": use_bias}, weights


def _max_seq_length(transformer, st_config):
    """sentence_bert_config.json's max_seq_length, else tokenizer_config.json's model_max_length (where newer
    sentence-transformers keep it), capped at the model's position embeddings as sentence-transformers caps it."""
    value = st_config.get("max_seq_length")
    if value is not None:
        return int(value)
    positions = _read_optional(os.path.join(transformer, "config.json")).get("max_position_embeddings")
    value = _read_optional(os.path.join(transformer, "tokenizer_config.json")).get("model_max_length")
    if value is None or value > UNSET_LENGTH:
        return int(positions) if positions else None
    return int(min(value, positions)) if positions else int(value)


def _read_model_config(folder, result, include_prompt):
    """config_sentence_transformers.json: its similarity function, prompts and default prompt; prompts kept out of
    the pooling (include_prompt false), which zoo does not do, are dropped with a warning."""
    config = _read_optional(os.path.join(folder, ST_MODEL_CONFIG))
    result.similarity_fn_name = config.get("similarity_fn_name") or "cosine"
    prompts = {str(k): str(v) for k, v in (config.get("prompts") or {}).items()}
    if any(prompts.values()) and not include_prompt:
        log.warning("%s: the prompts are kept out of the pooling (include_prompt false), which zoo does not do: "
                    "they are not used", folder)
        return
    result.prompts = prompts
    result.default_prompt_name = config.get("default_prompt_name") if config.get("default_prompt_name") in prompts \
        else None
