"""Checkpoints of other frameworks: Google TF1 folders, transformers folders (and a zoo preset's backbone).

Every format is read as a mapping from **Google variable names** (``bert/encoder/layer_0/attention/self/
query/kernel``, kernels [in, out]) to numpy arrays; ``mapping.variable_map`` is the whole truth about how those
names land on ``zoo.BertBackbone`` weights, and transformers names are translated to Google names first.
One module per format: ``google`` (TF1), ``transformers``, ``torch_zip`` (PyTorch files without torch), and
``mapping`` (the name and config tables). ``BertBackbone.from_preset`` builds a backbone and fills it with
``assign_weights``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import CheckpointError
from ..logs import log
from ..paths import GOOGLE_CONFIG, HF_CONFIG, PRESET_CONFIG, PRESET_WEIGHTS, resolve
from ..presets import load_saved
from .google import GoogleCheckpoint, save_google_checkpoint, write_bert_config
from .keras_hub import keras_hub_source, keras_hub_weights
from .sentence_transformers import MODULES_FILE, read_folder
from .mapping import (OPTIONAL_PREFIXES, backbone_arrays, bert_config, google_shape, google_to_hf, read_config,
                      tf1_family, tf1_to_canonical, variable_map)
from .transformers import HFCheckpoint, save_transformers, weight_files

OPTIMIZER_PATTERN = re.compile(r"(adam_[mv]|/Adam(_\d+)?$|global_step|good_steps|bad_steps|loss_scale|"
                               r"_slot_|/Momentum$|/accumulator)")

__all__ = ["ArraySource", "GoogleCheckpoint", "HFCheckpoint", "Layout", "LoadReport", "assign_weights",
           "backbone_arrays", "bert_config", "checkpoint_source", "detect_layout", "find_backbone", "google_to_hf",
           "read_config", "save_google_checkpoint", "save_transformers", "variable_map", "write_bert_config"]


class ArraySource:
    """Google-named arrays held in memory (a zoo preset's backbone, converted)."""

    def __init__(self, arrays, file):
        self._arrays, self.file = arrays, file
        self.shapes = {k: tuple(v.shape) for k, v in arrays.items()}

    def get(self, name):
        return self._arrays[name]


@dataclass
class Layout:
    kind: str  # "google" (any family's TF1 release) | "hf" | "keras_hub" | "preset"
    folder: str
    config: str
    weights: str


def tf1_config(folder):
    """The config file of a TF1 release folder: ``bert_config.json``, or a family's own (``albert_config.json``,
    ELECTRA's ``*discriminator_config.json``...); None when there is none."""
    files = sorted(os.listdir(folder))
    for name in (GOOGLE_CONFIG, "albert_config.json"):
        if name in files:
            return name
    return next((f for f in files if f.endswith("_config.json") and "generator" not in f
                 and f not in ("tokenizer_config.json", "sentence_bert_config.json", "generation_config.json")), None)


def detect_layout(path):
    """Find what a path holds: a TF1 folder / ckpt prefix, a transformers folder, a keras-hub preset, or a zoo
    preset."""
    path = resolve(path)
    if os.path.isfile(path + ".index"):  # a bert4keras-style checkpoint prefix ".../bert_model.ckpt"
        folder = os.path.dirname(path) or "."
        return Layout("google", folder, os.path.join(folder, tf1_config(folder) or GOOGLE_CONFIG), path)
    if not os.path.isdir(path):
        raise CheckpointError(f"{path}: no such checkpoint folder or file")
    files = sorted(os.listdir(path))
    if PRESET_CONFIG in files:
        return Layout("preset", path, os.path.join(path, PRESET_CONFIG), os.path.join(path, PRESET_WEIGHTS))
    if MODULES_FILE in files and HF_CONFIG not in files:  # an older sentence-transformers folder: 0_Transformer/
        return detect_layout(read_folder(path).transformer)
    config = tf1_config(path)
    indexes = [f for f in files if f.endswith(".index")]
    if config == GOOGLE_CONFIG or (config and indexes):
        if not indexes and "checkpoint" in files:
            import tensorflow as tf

            prefix = tf.train.latest_checkpoint(path)
            # the "checkpoint" file may hold an absolute path written on another machine or folder: only a
            # checkpoint inside this folder counts
            if prefix and os.path.isfile(os.path.join(path, os.path.basename(prefix)) + ".index"):
                return Layout("google", path, os.path.join(path, config),
                              os.path.join(path, os.path.basename(prefix)))
        if not indexes:
            raise CheckpointError(f"{path}: {config} found but no *.ckpt.index (the TF checkpoint)")
        name = "bert_model.ckpt.index" if "bert_model.ckpt.index" in indexes else indexes[0]
        return Layout("google", path, os.path.join(path, config), os.path.join(path, name[: -len(".index")]))
    if HF_CONFIG in files and (weights := keras_hub_weights(path)):  # written by keras-hub's save_to_preset
        return Layout("keras_hub", path, os.path.join(path, HF_CONFIG), weights)
    if HF_CONFIG in files:
        if not weight_files(path):
            raise CheckpointError(f"{path}: {HF_CONFIG} found but no model.safetensors or pytorch_model.bin")
        return Layout("hf", path, os.path.join(path, HF_CONFIG), path)
    raise CheckpointError(
        f"{path}: unknown checkpoint layout (expected {GOOGLE_CONFIG} + bert_model.ckpt.* for Google, "
        f"{HF_CONFIG} + model.safetensors/pytorch_model.bin for transformers, {HF_CONFIG} + model.weights.h5 "
        f"for keras-hub, or {PRESET_CONFIG} for a zoo preset); found {files[:12]}")


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
        expected = google_shape(zoo_path, tuple(variable.shape))
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


def find_backbone(model):
    """The backbone inside a zoo model (``model.backbone``), or the model itself when it is one."""
    backbone = getattr(model, "backbone", model)
    if not hasattr(backbone, "family") or not hasattr(backbone, "transformer_layers"):
        raise CheckpointError(f"{type(model).__name__} holds no zoo backbone")
    return backbone


def stored_backbone_config(backbone):
    """The constructor arguments of a stored backbone, without the ones a new load decides."""
    config = backbone.get_config()
    for key in ("name", "trainable", "dtype", "with_mlm", "output_hidden_states"):
        config.pop(key, None)
    return config


def checkpoint_source(path):
    """(family, backbone constructor arguments, source of arrays named as the family's table names them) for
    anything zoo loads a backbone from: a TF1 folder or ckpt prefix, a transformers folder, a keras-hub preset, a zoo
    preset folder or name, a run folder, a ``.keras`` file."""
    if str(path).endswith(".keras"):
        stored = find_backbone(load_saved(path))
        return stored.family, stored_backbone_config(stored), ArraySource(backbone_arrays(stored), str(path))
    layout = detect_layout(path)
    if layout.kind == "preset":
        stored = find_backbone(load_saved(layout.folder))
        return stored.family, stored_backbone_config(stored), ArraySource(backbone_arrays(stored), layout.weights)
    if layout.kind == "keras_hub":
        return ("bert", *keras_hub_source(layout.folder))
    if layout.kind == "google":
        source = GoogleCheckpoint(layout.weights)
        family, kwargs = read_config(layout.config, tf1_family(source.shapes))
        return family, kwargs, source.renamed(lambda name: tf1_to_canonical(family, name))
    family, kwargs = read_config(layout.config)
    return family, kwargs, HFCheckpoint(layout.folder, family)
