"""Checkpoints of other frameworks: Google TF1 folders, transformers folders (and a zoo preset's backbone).

Every format is read as a mapping from **Google variable names** (``bert/encoder/layer_0/attention/self/
query/kernel``, kernels [in, out]) to numpy arrays; ``variable_map`` is the whole truth about how those
names land on ``zoo.BertBackbone`` weights. transformers names are translated to Google names first.
``BertBackbone.from_preset`` builds a backbone and fills it with ``assign_weights``.
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
from dataclasses import dataclass, field

import numpy as np

from .errors import CheckpointError
from .logs import log
from .paths import GOOGLE_CONFIG, HF_CONFIG, PRESET_CONFIG, PRESET_WEIGHTS, read_json_file, resolve
from .presets import load_saved

OPTIONAL_PREFIXES = ("bert/pooler/", "cls/predictions/")
OPTIMIZER_PATTERN = re.compile(r"(adam_[mv]|/Adam(_\d+)?$|global_step|good_steps|bad_steps|loss_scale|"
                               r"_slot_|/Momentum$|/accumulator)")


# ----------------------------------------------------------------------------------------- the mapping
def variable_map(backbone):
    """[(zoo weight path, Google variable name)] for every weight of ``backbone``."""
    rows = [
        ("token_embedding/embeddings", "bert/embeddings/word_embeddings"),
        ("position_embedding/embeddings", "bert/embeddings/position_embeddings"),
        ("segment_embedding/embeddings", "bert/embeddings/token_type_embeddings"),
        ("embeddings_layer_norm/gamma", "bert/embeddings/LayerNorm/gamma"),
        ("embeddings_layer_norm/beta", "bert/embeddings/LayerNorm/beta"),
    ]
    for i in range(backbone.num_layers):
        z, g = f"transformer_layer_{i}", f"bert/encoder/layer_{i}"
        for part in ("query", "key", "value"):
            rows += [(f"{z}/self_attention_layer/{part}/kernel", f"{g}/attention/self/{part}/kernel"),
                     (f"{z}/self_attention_layer/{part}/bias", f"{g}/attention/self/{part}/bias")]
        rows += [
            (f"{z}/self_attention_layer/attention_output/kernel", f"{g}/attention/output/dense/kernel"),
            (f"{z}/self_attention_layer/attention_output/bias", f"{g}/attention/output/dense/bias"),
            (f"{z}/self_attention_layer_norm/gamma", f"{g}/attention/output/LayerNorm/gamma"),
            (f"{z}/self_attention_layer_norm/beta", f"{g}/attention/output/LayerNorm/beta"),
            (f"{z}/feedforward_intermediate_dense/kernel", f"{g}/intermediate/dense/kernel"),
            (f"{z}/feedforward_intermediate_dense/bias", f"{g}/intermediate/dense/bias"),
            (f"{z}/feedforward_output_dense/kernel", f"{g}/output/dense/kernel"),
            (f"{z}/feedforward_output_dense/bias", f"{g}/output/dense/bias"),
            (f"{z}/feedforward_layer_norm/gamma", f"{g}/output/LayerNorm/gamma"),
            (f"{z}/feedforward_layer_norm/beta", f"{g}/output/LayerNorm/beta"),
        ]
    rows += [("pooler_dense/kernel", "bert/pooler/dense/kernel"), ("pooler_dense/bias", "bert/pooler/dense/bias")]
    if backbone.with_mlm:
        rows += [
            ("mlm_transform/kernel", "cls/predictions/transform/dense/kernel"),
            ("mlm_transform/bias", "cls/predictions/transform/dense/bias"),
            ("mlm_layer_norm/gamma", "cls/predictions/transform/LayerNorm/gamma"),
            ("mlm_layer_norm/beta", "cls/predictions/transform/LayerNorm/beta"),
            ("mlm_bias/bias", "cls/predictions/output_bias"),
        ]
    return rows


def _google_shape(zoo_path, shape):
    """The Google-layout shape of a zoo weight (attention kernels are stored per head in Keras)."""
    if "/self_attention_layer/" in zoo_path and "attention_output" not in zoo_path:
        return (shape[0], shape[1] * shape[2]) if zoo_path.endswith("kernel") else (shape[0] * shape[1],)
    if zoo_path.endswith("attention_output/kernel"):
        return (shape[0] * shape[1], shape[2])
    return tuple(shape)


def _hf_to_google(name):
    """transformers state-dict name -> (Google name, transpose?) or None for buffers/aliases."""
    n = name[len("bert."):] if name.startswith("bert.") else name
    if n.endswith("position_ids") or n.startswith("cls.predictions.decoder."):
        return None  # a buffer, or the decoder tied to the word embeddings / output bias
    if n == "cls.predictions.bias":
        return "cls/predictions/output_bias", False
    if n.startswith("cls.seq_relationship."):
        return ("cls/seq_relationship/output_weights" if n.endswith("weight")
                else "cls/seq_relationship/output_bias"), False
    parts = n.split(".")
    leaf = parts.pop()
    path = "/".join(parts).replace("encoder/layer/", "encoder/layer_")
    if parts and parts[-1] == "LayerNorm":
        return f"{path if n.startswith('cls.') else 'bert/' + path}/{'gamma' if leaf in ('weight', 'gamma') else 'beta'}", False
    if parts and parts[-1].endswith("embeddings"):
        return f"bert/{path}", False
    prefix = "" if n.startswith("cls.") else "bert/"
    return (f"{prefix}{path}/kernel", True) if leaf == "weight" else (f"{prefix}{path}/bias", False)


# ----------------------------------------------------------------------------------------- sources
class GoogleCheckpoint:
    """Variables of a TF1 checkpoint (``bert_model.ckpt.index`` + data files; TF checks each tensor's CRC-32C)."""

    def __init__(self, prefix):
        import tensorflow as tf

        self.file = prefix
        index = prefix + ".index"
        if not os.path.exists(index):
            raise CheckpointError(f"{index}: TF checkpoint index not found")
        try:
            self._reader = tf.train.load_checkpoint(prefix)
            self.shapes = {k: tuple(v) for k, v in self._reader.get_variable_to_shape_map().items()}
        except Exception as e:  # noqa: BLE001 -- a damaged index, or a data file missing
            raise CheckpointError(f"{self._culprit(e)}: cannot read the TF checkpoint ({_first_line(e)})") from None

    def _culprit(self, error):
        """The file a TF error is about: a named data file, else the index."""
        data = re.search(r"\S*\.data-\d+-of-\d+", str(error))
        return data.group(0).rstrip(";:,") if data else self.file + ".index"

    def get(self, name):
        try:
            return np.asarray(self._reader.get_tensor(name))
        except Exception as e:  # noqa: BLE001 -- a data file damaged (checksum), truncated or missing
            import glob

            data, shards = self._culprit(e), sorted(glob.glob(glob.escape(self.file) + ".data-*"))
            if data.endswith(".index"):
                data = shards[0] if len(shards) == 1 else f"{self.file}.data-*"
            raise CheckpointError(f"{data}: cannot read variable {name} ({_first_line(e)})") from None


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


class HFCheckpoint:
    """A transformers state dict (safetensors, sharded safetensors or pytorch_model.bin), Google-named."""

    def __init__(self, folder):
        self.folder = folder
        files = _hf_weight_files(folder)
        if not files:
            raise CheckpointError(
                f"{folder}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")
        self.file = files[0] if len(files) == 1 else folder
        self._arrays, self.shapes, self.ignored = {}, {}, []
        for f in files:
            for hf_name, array in _read_state_dict(f).items():
                target = _hf_to_google(hf_name)
                if target is None:
                    self.ignored.append(hf_name)
                    continue
                name, transpose = target
                self._arrays[name] = (array, transpose, f)
                self.shapes[name] = tuple(array.shape[::-1] if transpose else array.shape)

    def get(self, name):
        array, transpose, _ = self._arrays[name]
        array = np.asarray(array)
        return array.T if transpose else array


class ArraySource:
    """Google-named arrays held in memory (a zoo preset's backbone, converted)."""

    def __init__(self, arrays, file):
        self._arrays, self.file = arrays, file
        self.shapes = {k: tuple(v.shape) for k, v in arrays.items()}

    def get(self, name):
        return self._arrays[name]


def _hf_weight_files(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(folder, s) for s in shards]
    for name in ("model.safetensors", "pytorch_model.bin"):
        if os.path.exists(os.path.join(folder, name)):
            return [os.path.join(folder, name)]
    return []


def _read_state_dict(path):
    if path.endswith(".safetensors"):
        from safetensors.numpy import load_file

        try:
            return load_file(path)
        except Exception as e:
            raise CheckpointError(f"{path}: cannot read safetensors file ({e})") from None
    try:
        import torch
    except ImportError:
        return _read_torch_zip(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path}: cannot read PyTorch file ({e})") from None
    return {k: v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy() for k, v in state.items()}


def _read_torch_zip(path):
    """Read a torch>=1.6 zip ``pytorch_model.bin`` without torch (tensors only).

    The file is untrusted: only tensor-rebuilding globals are allowed, and each tensor's declared offset, shape and
    strides must stay inside its storage (no element read past the buffer, no tensor larger than its storage).
    """
    import pickle

    dtypes = {"FloatStorage": np.float32, "HalfStorage": np.float16, "DoubleStorage": np.float64,
              "LongStorage": np.int64, "IntStorage": np.int32, "ByteStorage": np.uint8, "BoolStorage": np.bool_}
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a zip archive (a legacy pre-1.6 PyTorch file, or damaged); install "
                              f"torch to read legacy files")

    def rebuild(storage, offset, size, stride, *args):
        size, stride = tuple(size), tuple(stride)
        numbers = (offset, *size, *stride)
        if (len(size) != len(stride) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                 for v in numbers)):
            raise CheckpointError(f"{path}: a tensor declares an invalid offset/shape/stride "
                                  f"({offset}, {size}, {stride})")
        count = math.prod(size)
        if count == 0:
            return np.zeros(size, storage.dtype)
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= len(storage) or count > len(storage):
            raise CheckpointError(f"{path}: a tensor of shape {size} (offset {offset}, stride {stride}) reaches "
                                  f"past its storage of {len(storage)} elements")
        item = storage.itemsize
        return np.lib.stride_tricks.as_strided(storage[offset:], size, [s * item for s in stride]).copy()

    try:
        with zipfile.ZipFile(path) as z:
            pkl = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
            if pkl is None:
                raise CheckpointError(f"{path}: no data.pkl inside (not a PyTorch checkpoint)")
            root = pkl[: -len("data.pkl")]

            class Unpickler(pickle.Unpickler):
                def find_class(self, module, name):
                    if module == "torch._utils" and name == "_rebuild_tensor_v2":
                        return rebuild
                    if module == "torch" and name in dtypes:
                        return name
                    if module == "collections" and name == "OrderedDict":
                        import collections

                        return collections.OrderedDict
                    raise CheckpointError(f"{path}: unsupported object {module}.{name} in PyTorch file")

                def persistent_load(self, pid):
                    _, storage_type, key, _, _ = pid
                    if storage_type not in dtypes:
                        raise CheckpointError(f"{path}: unsupported storage type {storage_type!r}")
                    return np.frombuffer(z.read(f"{root}data/{key}"), dtype=dtypes[storage_type])

            state = Unpickler(z.open(pkl)).load()
    except CheckpointError:
        raise
    except Exception as e:  # damaged zip (bad CRC, truncated member), malformed pickle
        raise CheckpointError(f"{path}: cannot read PyTorch file ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise CheckpointError(f"{path}: not a state dict of tensors")
    return dict(state)


# ----------------------------------------------------------------------------------------- configs
_CONFIG_KEYS = {  # BertBackbone argument <- config key (same in Google and transformers configs)
    "vocabulary_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "hidden_dim": "hidden_size",
    "intermediate_dim": "intermediate_size",
    "max_sequence_length": "max_position_embeddings",
}


def google_to_hf(name):
    """Google variable name -> (transformers BertModel state-dict name, transpose?); None for the MLM/NSP heads
    (``_hf_to_google`` reversed, and checked against it)."""
    if not name.startswith("bert/"):
        return None
    parts = name[len("bert/"):].replace("encoder/layer_", "encoder/layer/").split("/")
    leaf = parts.pop()
    if leaf in ("word_embeddings", "token_type_embeddings", "position_embeddings"):
        parts, leaf = parts + [leaf], "weight"
    else:
        leaf = {"kernel": "weight", "gamma": "weight", "beta": "bias", "bias": "bias"}[leaf]
    hf = ".".join(parts + [leaf])
    transpose = name.endswith("/kernel")
    if _hf_to_google(hf) != (name, transpose):
        raise AssertionError(f"name tables disagree on {name} -> {hf}")
    return hf, transpose


def save_transformers(backbone, folder, tokenizer=None, pooling=None, maxlen=None):
    """Write a backbone as a transformers BertModel folder (``config.json``, ``model.safetensors``, vocab); with
    ``pooling`` "cls" or "mean", also the sentence-transformers modules (Transformer, Pooling, Normalize), so
    ``SentenceTransformer(folder)`` embeds as the zoo SentenceEncoder does."""
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    state = {}
    for name, array in backbone_arrays(backbone).items():
        target = google_to_hf(name)
        if target is not None:
            state[target[0]] = np.ascontiguousarray(array.T if target[1] else array, dtype="float32")
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(folder, "config.json"), {"architectures": ["BertModel"], "model_type": "bert",
                                                      "pad_token_id": 0, **bert_config(backbone)})
    if tokenizer is not None:
        tokenizer.save(folder)
        _write_json(os.path.join(folder, "tokenizer_config.json"),
                    {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": maxlen or 512})
    if pooling in ("cls", "mean"):
        _write_json(os.path.join(folder, "modules.json"), [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
        _write_json(os.path.join(folder, "sentence_bert_config.json"), {"max_seq_length": maxlen or 512,
                                                                         "do_lower_case": False})
        os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
        os.makedirs(os.path.join(folder, "2_Normalize"), exist_ok=True)
        _write_json(os.path.join(folder, "1_Pooling", "config.json"), {
            "word_embedding_dimension": backbone.hidden_dim, "pooling_mode_cls_token": pooling == "cls",
            "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False})
    elif pooling is not None:
        log.warning("sentence-transformers has no %r pooling: %s holds the transformers model only", pooling, folder)
    return folder


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)


def read_bert_config(path):
    """``bert_config.json`` / transformers ``config.json`` -> BertBackbone keyword arguments."""
    config = read_json_file(path, "a BERT config")
    model_type = config.get("model_type", "bert")
    if model_type != "bert":  # Chinese RoBERTa-wwm / MacBERT checkpoints are model_type "bert"
        raise CheckpointError(f"{path}: model_type {model_type!r} is not supported (zoo reads BERT layouts)")
    missing = [k for k in _CONFIG_KEYS.values() if k not in config]
    if missing:
        raise CheckpointError(f"{path}: missing field(s) {missing}")
    try:
        kwargs = {arg: int(config[key]) for arg, key in _CONFIG_KEYS.items()}
        kwargs["num_segments"] = int(config.get("type_vocab_size", 2))
        kwargs["dropout"] = float(config.get("hidden_dropout_prob", 0.1))
        kwargs["layer_norm_epsilon"] = float(config.get("layer_norm_eps", 1e-12))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: a size or rate field is not a number ({e})") from None
    kwargs["activation"] = config.get("hidden_act", "gelu")
    if min(kwargs[k] for k in _CONFIG_KEYS) < 1:
        raise CheckpointError(f"{path}: sizes must be positive, got {[config[k] for k in _CONFIG_KEYS.values()]}")
    return kwargs


def write_bert_config(backbone, path):
    """Google ``bert_config.json`` for a backbone."""
    _write_json(path, bert_config(backbone))


def bert_config(backbone):
    """The BERT config fields of a backbone (Google's ``bert_config.json``; transformers reads the same keys)."""
    return {
        "attention_probs_dropout_prob": backbone.dropout, "hidden_act": backbone.activation,
        "hidden_dropout_prob": backbone.dropout, "hidden_size": backbone.hidden_dim,
        "initializer_range": 0.02, "intermediate_size": backbone.intermediate_dim,
        "max_position_embeddings": backbone.max_sequence_length, "num_attention_heads": backbone.num_heads,
        "num_hidden_layers": backbone.num_layers, "type_vocab_size": backbone.num_segments,
        "vocab_size": backbone.vocabulary_size, "layer_norm_eps": backbone.layer_norm_epsilon,
    }


# ----------------------------------------------------------------------------------------- layout
@dataclass
class Layout:
    kind: str  # "google" | "hf" | "preset"
    folder: str
    config: str
    weights: str


def detect_layout(path):
    """Find what a path holds: a Google TF1 folder / ckpt prefix, a transformers folder, or a zoo preset."""
    path = resolve(path)
    if os.path.isfile(path + ".index"):  # a bert4keras-style checkpoint prefix ".../bert_model.ckpt"
        folder = os.path.dirname(path) or "."
        return Layout("google", folder, os.path.join(folder, GOOGLE_CONFIG), path)
    if not os.path.isdir(path):
        raise CheckpointError(f"{path}: no such checkpoint folder or file")
    files = sorted(os.listdir(path))
    if PRESET_CONFIG in files:
        return Layout("preset", path, os.path.join(path, PRESET_CONFIG), os.path.join(path, PRESET_WEIGHTS))
    if GOOGLE_CONFIG in files:
        indexes = [f for f in files if f.endswith(".ckpt.index")]
        if not indexes and "checkpoint" in files:
            import tensorflow as tf

            prefix = tf.train.latest_checkpoint(path)
            # the "checkpoint" file may hold an absolute path written on another machine or folder: only a
            # checkpoint inside this folder counts
            if prefix and os.path.isfile(os.path.join(path, os.path.basename(prefix)) + ".index"):
                return Layout("google", path, os.path.join(path, GOOGLE_CONFIG),
                              os.path.join(path, os.path.basename(prefix)))
        if not indexes:
            raise CheckpointError(f"{path}: {GOOGLE_CONFIG} found but no *.ckpt.index (the TF checkpoint)")
        name = "bert_model.ckpt.index" if "bert_model.ckpt.index" in indexes else indexes[0]
        return Layout("google", path, os.path.join(path, GOOGLE_CONFIG),
                      os.path.join(path, name[: -len(".index")]))
    if HF_CONFIG in files:
        if not _hf_weight_files(path):
            raise CheckpointError(f"{path}: {HF_CONFIG} found but no model.safetensors or pytorch_model.bin")
        return Layout("hf", path, os.path.join(path, HF_CONFIG), path)
    raise CheckpointError(
        f"{path}: unknown checkpoint layout (expected {GOOGLE_CONFIG} + bert_model.ckpt.* for Google, "
        f"{HF_CONFIG} + model.safetensors/pytorch_model.bin for transformers, or {PRESET_CONFIG} for a zoo "
        f"preset); found {files[:12]}")


# ----------------------------------------------------------------------------------------- loading
@dataclass
class LoadReport:
    """What a checkpoint load did. ``missing``: weights left at their random initialisation."""

    source: str
    loaded: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    unused: list = field(default_factory=list)
    optimizer_state: int = 0

    def __str__(self):
        return self.summary()

    def summary(self):
        """One line: how many variables were loaded, and which heads were missing or left unused."""
        lines = [f"loaded {len(self.loaded)} variables from {self.source}"]
        if self.missing:
            lines.append(f"not in the checkpoint, left randomly initialised: {_group(self.missing)}")
        if self.unused:
            lines.append(f"in the checkpoint but not used by this model: {_group(self.unused)}")
        if self.optimizer_state:
            lines.append(f"ignored {self.optimizer_state} optimizer-state variables")
        return "; ".join(lines)


HEADS = {"cls/predictions/": "MLM head", "cls/seq_relationship/": "NSP head", "bert/pooler/": "pooler"}


def _group(names):
    """Names grouped by head: 'MLM head (5 variables), NSP head (2 variables), other/name'."""
    parts, rest = [], []
    for prefix, head in HEADS.items():
        n = sum(name.startswith(prefix) for name in names)
        if n:
            parts.append(f"{head} ({n} variable{'s' * (n > 1)})")
    rest = [name for name in names if not name.startswith(tuple(HEADS))]
    return ", ".join(parts + rest)


def assign_weights(backbone, source, keep_tokens=None):
    """Copy Google-named arrays from ``source`` into ``backbone``; returns a LoadReport.

    Raises CheckpointError naming the file and variable for a missing required variable or a shape
    mismatch. Missing pooler / MLM-head variables and unused variables are reported (and warned about).
    """
    report = LoadReport(source=source.file)
    weights = {w.path: w for w in backbone.weights}
    used = set()
    for zoo_path, name in variable_map(backbone):
        variable = weights[zoo_path]
        if name not in source.shapes:
            if name.startswith(OPTIONAL_PREFIXES):
                report.missing.append(name)
                continue
            raise CheckpointError(f"{source.file}: variable {name!r} not found (needed for {zoo_path})")
        array = source.get(name)
        if keep_tokens is not None and name in ("bert/embeddings/word_embeddings", "cls/predictions/output_bias"):
            if max(keep_tokens) >= array.shape[0]:
                raise CheckpointError(f"{source.file}: keep_tokens has id {max(keep_tokens)} but {name} "
                                      f"has only {array.shape[0]} rows")
            array = array[np.asarray(keep_tokens)]
        expected = _google_shape(zoo_path, tuple(variable.shape))
        if tuple(array.shape) != expected:
            raise CheckpointError(f"{source.file}: variable {name!r} has shape {tuple(array.shape)}, "
                                  f"the model expects {expected} (for {zoo_path})")
        variable.assign(array.reshape(variable.shape).astype(variable.dtype))
        used.add(name)
        report.loaded.append(name)
    for name in sorted(set(source.shapes) - used):
        if OPTIMIZER_PATTERN.search(name):
            report.optimizer_state += 1
        else:
            report.unused.append(name)
    if report.missing:  # weights that stay random: worth a warning
        log.warning("%s", report.summary())
    else:
        log.info("%s", report.summary())
    return report


def backbone_arrays(backbone):
    """A backbone's weights as Google-named numpy arrays (the inverse of ``assign_weights``)."""
    weights = {w.path: w for w in backbone.weights}
    out = {}
    for zoo_path, name in variable_map(backbone):
        v = weights[zoo_path]
        out[name] = np.asarray(keras_to_numpy(v)).reshape(_google_shape(zoo_path, tuple(v.shape)))
    return out


def keras_to_numpy(variable):
    from keras import ops

    return ops.convert_to_numpy(variable)


def save_google_checkpoint(backbone, folder, tokenizer=None):
    """Write a backbone as a Google TF1 folder (``bert_config.json``, ``bert_model.ckpt.*``, vocab)."""
    import tensorflow as tf

    os.makedirs(folder, exist_ok=True)
    arrays = backbone_arrays(backbone)
    variables = {name: tf.Variable(a) for name, a in arrays.items()}
    tf.compat.v1.train.Saver(var_list=variables).save(None, os.path.join(folder, "bert_model.ckpt"))
    write_bert_config(backbone, os.path.join(folder, GOOGLE_CONFIG))
    if tokenizer is not None:
        tokenizer.save(folder)


def find_backbone(model):
    """The BertBackbone inside a zoo model (``model.backbone``), or the model itself when it is one."""
    backbone = getattr(model, "backbone", model)
    if type(backbone).__name__ != "BertBackbone":
        raise CheckpointError(f"{type(model).__name__} holds no zoo BertBackbone")
    return backbone


def stored_backbone_config(backbone):
    """The constructor arguments of a stored backbone, without the ones a new load decides."""
    config = backbone.get_config()
    for key in ("name", "trainable", "dtype", "with_mlm", "output_hidden_states"):
        config.pop(key, None)
    return config


def checkpoint_source(path):
    """(backbone constructor arguments, Google-named source) for anything zoo loads a backbone from: a Google TF1
    folder or ckpt prefix, a transformers folder, a zoo preset folder or name, a run folder, a ``.keras`` file."""
    if str(path).endswith(".keras"):
        stored = find_backbone(load_saved(path))
        return stored_backbone_config(stored), ArraySource(backbone_arrays(stored), str(path))
    layout = detect_layout(path)
    if layout.kind == "preset":
        stored = find_backbone(load_saved(layout.folder))
        return stored_backbone_config(stored), ArraySource(backbone_arrays(stored), layout.weights)
    kwargs = read_bert_config(layout.config)
    return kwargs, GoogleCheckpoint(layout.weights) if layout.kind == "google" else HFCheckpoint(layout.folder)
