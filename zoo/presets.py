"""zoo presets: a folder with ``zoo_config.json`` (the Keras config of any zoo model), ``model.weights.h5``
and the tokenizer (``vocab.txt``, ``tokenizer_config.json``). Written atomically; loaded by name or path.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil

from .checkpoints import PRESET_CONFIG, PRESET_WEIGHTS, CheckpointError

DATA_DIR = os.environ.get("ZOO_DATA_DIR") or os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
PRESETS_DIR = os.path.join(DATA_DIR, "presets")
DEFAULT_PRESET = "chinese_L-4_H-256_A-4"


def available_presets():
    if not os.path.isdir(PRESETS_DIR):
        return []
    return sorted(d for d in os.listdir(PRESETS_DIR) if os.path.exists(os.path.join(PRESETS_DIR, d, PRESET_CONFIG)))


def resolve(path):
    """A path as given if it exists (or is a checkpoint prefix), else the folder of a preset of that name."""
    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, PRESET_CONFIG)) \
            and os.path.exists(os.path.join(path, "model", PRESET_CONFIG)):
        return os.path.join(path, "model")  # a zoo run folder: its best model
    if os.path.exists(path) or os.path.exists(path + ".index"):
        return path
    if os.path.exists(path + ".old"):  # a replace_dir interrupted between its two renames
        return path + ".old"
    candidate = os.path.join(PRESETS_DIR, path)
    if os.path.exists(os.path.join(candidate, PRESET_CONFIG)):
        return candidate
    raise FileNotFoundError(f"{path}: no such file or folder, and no zoo preset of that name "
                            f"(presets in {PRESETS_DIR}: {available_presets()})")


def replace_dir(tmp, target):
    """Move a finished folder ``tmp`` to ``target``, replacing any old one; never leaves a half-written target."""
    old = target + ".old"
    if os.path.exists(old):
        shutil.rmtree(old)
    if os.path.exists(target):
        os.rename(target, old)
    os.rename(tmp, target)
    if os.path.exists(old):
        shutil.rmtree(old)


def save_preset(model, tokenizer, directory, metadata=None):
    """Save any zoo model (backbone, SentenceEncoder, ...) and its tokenizer as a preset folder, atomically."""
    import keras

    directory = os.path.abspath(os.fspath(directory))
    tmp = f"{directory}.tmp-{os.getpid()}"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    from . import __version__

    config = {
        "format": "zoo-preset",
        "format_version": 1,
        "model": keras.saving.serialize_keras_object(model),
        "metadata": {"zoo_version": __version__, "keras_version": keras.__version__,
                     "saved": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     **(metadata or {})},
    }
    with open(os.path.join(tmp, PRESET_CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1, ensure_ascii=False)
    model.save_weights(os.path.join(tmp, PRESET_WEIGHTS))
    if tokenizer is not None:
        tokenizer.save(tmp)
    replace_dir(tmp, directory)
    return directory


def read_preset_config(directory):
    path = os.path.join(directory, PRESET_CONFIG)
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: invalid JSON ({e})") from None
    if config.get("format") != "zoo-preset" or "model" not in config:
        raise CheckpointError(f"{path}: not a zoo preset (field 'format' must be 'zoo-preset', with 'model')")
    return config


def load_model(path):
    """Load a zoo model from a preset folder/name or a ``.keras`` file (weights included)."""
    import keras

    from . import backbone as _  # noqa: F401  (registers the zoo classes)

    path = os.fspath(path)
    if path.endswith(".keras"):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such .keras file")
        return keras.saving.load_model(path)
    directory = resolve(path)
    config = read_preset_config(directory)
    weights = os.path.join(directory, PRESET_WEIGHTS)
    if not os.path.exists(weights):
        raise CheckpointError(f"{weights}: preset weights file missing")
    model = keras.saving.deserialize_keras_object(config["model"])
    model.load_weights(weights)
    return model


def load_preset(path):
    """(model, tokenizer) of a preset."""
    from .tokenizer import load_tokenizer

    directory = resolve(path)
    return load_model(directory), load_tokenizer(directory)


def find_backbone(model):
    """The BertBackbone inside a zoo model (or the model itself)."""
    from .backbone import BertBackbone

    if isinstance(model, BertBackbone):
        return model
    backbone = getattr(model, "backbone", None)
    if isinstance(backbone, BertBackbone):
        return backbone
    raise CheckpointError(f"{type(model).__name__} holds no zoo BertBackbone")
