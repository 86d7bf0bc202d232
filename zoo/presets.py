"""zoo presets: a folder with ``zoo_config.json`` (the Keras config of any zoo model and a manifest with the
sha256 and size of every other file), ``model.weights.h5`` and the tokenizer (``vocab.txt``,
``tokenizer_config.json``). Written atomically; checked against the manifest when loaded.

This module saves and restores whatever zoo model a preset holds by its registered Keras class name; the
classes themselves are registered by ``import zoo``. Building a model from a checkpoint of another framework
is each class's ``from_preset``.
"""

from __future__ import annotations

import datetime
import json
import os

from .errors import CheckpointError, MissingFileError
from .logs import log
from .paths import (
    PRESET_CONFIG,
    PRESET_WEIGHTS,
    PRESETS_DIR,
    VOCAB_FILE,
    atomic_dir,
    available_presets,
    check_manifest,
    file_manifest,
    read_json_file,
    resolve,
)

FORMAT = "zoo-preset"


WEIGHT_DTYPES = ("float32", "float16")


def save_preset(model, tokenizer, directory, metadata=None, weights_dtype="float32"):
    """Save any zoo model (backbone, SentenceEncoder, ...) and its tokenizer as a preset folder, atomically:
    the folder appears complete or not at all, and a previous version stays intact until then.
    ``weights_dtype="float16"`` stores the float32 weights as float16 (half the size; they load back into the
    model's float32 variables)."""
    import keras

    from . import __version__

    if weights_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weights_dtype must be one of {WEIGHT_DTYPES}, got {weights_dtype!r}")
    directory = os.path.abspath(os.fspath(directory))
    with atomic_dir(directory) as tmp:
        model.save_weights(os.path.join(tmp, PRESET_WEIGHTS))
        if weights_dtype != "float32":
            store_weights_as(os.path.join(tmp, PRESET_WEIGHTS), weights_dtype)
        if tokenizer is not None:
            tokenizer.save_to_preset(tmp)
        files = file_manifest(tmp)
        config = {
            "format": FORMAT,
            "format_version": 1,
            "model": float32_policies(keras.saving.serialize_keras_object(model)),
            "files": files,
            "weights_dtype": weights_dtype,
            "metadata": {"zoo_version": __version__, "keras_version": keras.__version__,
                         "saved": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                         **({"max_input_tokens": model.max_input_tokens} if hasattr(model, "max_input_tokens")
                            else {}),
                         **(metadata or {})},
        }
        with open(os.path.join(tmp, PRESET_CONFIG), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1, ensure_ascii=False)
    return directory


def float32_policies(config):
    """A serialized model whose mixed-precision dtype policies (``mixed_bfloat16``, ``mixed_float16``: training's
    ``--mixed-precision``) are float32 ones: its variables are float32 already, and a preset computes in float32 (the
    fused ONNX writer and the parity checks take float32 models; ``encode(engine="bf16")`` makes the bf16 copy)."""
    if isinstance(config, dict):
        if config.get("class_name") == "DTypePolicy" and str((config.get("config") or {}).get("name", "")).startswith(
                "mixed_"):
            return {**config, "config": {**config["config"], "name": "float32"}}
        return {k: "float32" if k == "dtype" and isinstance(v, str) and v.startswith("mixed_") else float32_policies(v)
                for k, v in config.items()}
    if isinstance(config, list):
        return [float32_policies(v) for v in config]
    return config


def store_weights_as(path, dtype):
    """Rewrite every float32 array of a Keras ``.weights.h5`` file as ``dtype`` (a new file replaces it: HDF5
    does not give back the space of deleted arrays); refuses values that ``dtype`` cannot hold."""
    import h5py
    import numpy as np

    def copy(source, target):
        target.attrs.update(dict(source.attrs))
        for name, item in source.items():
            if isinstance(item, h5py.Group):
                copy(item, target.create_group(name))
                continue
            value = item[()]
            if item.dtype == np.float32:
                with np.errstate(over="ignore"):
                    cast = value.astype(dtype)
                if not np.all(np.isfinite(cast[np.isfinite(value)])):
                    raise ValueError(f"{path}: {item.name} has values beyond {dtype}'s range; keep float32")
                value = cast
            target.create_dataset(name, data=value)
            target[name].attrs.update(dict(item.attrs))

    with h5py.File(path, "r") as source, h5py.File(path + ".cast", "w") as target:
        copy(source, target)
    os.replace(path + ".cast", path)


def read_preset_config(directory):
    """The parsed ``zoo_config.json`` of a preset folder (CheckpointError naming the file when it is not one)."""
    path = os.path.join(directory, PRESET_CONFIG)
    config = read_json_file(path, "a zoo preset's config")
    if config.get("format") != FORMAT or not isinstance(config.get("model"), dict):
        raise CheckpointError(f"{path}: not a zoo preset (field 'format' must be '{FORMAT}', with 'model')")
    return config


def verify_files(directory, config):
    """Check the files of a preset against its manifest; presets written before the manifest existed have none."""
    if config.get("files") is not None:
        check_manifest(directory, config["files"], PRESET_CONFIG)


def preset_class_name(path):
    """The class name a preset folder (or ``.keras`` file) holds, e.g. "SentenceEncoder"; None for checkpoints of
    other frameworks."""
    path = os.fspath(path)
    if path.endswith(".keras"):
        import zipfile

        try:
            with zipfile.ZipFile(path) as z:
                return json.loads(z.read("config.json")).get("class_name")
        except (OSError, zipfile.BadZipFile, KeyError, ValueError) as e:
            raise CheckpointError(f"{path}: not a readable .keras file ({e})") from None
    folder = resolve(path)
    if not os.path.isdir(folder) or not os.path.exists(os.path.join(folder, PRESET_CONFIG)):
        return None
    return read_preset_config(folder)["model"].get("class_name")


def saved_setting(path, key):
    """A setting stored with the task model a preset folder or ``.keras`` file holds (e.g. "pooling"); None for
    checkpoints of other frameworks, backbone presets, or a setting the model does not store."""
    path = os.fspath(path)
    if path.endswith(".keras"):
        import zipfile

        try:
            with zipfile.ZipFile(path) as z:
                return json.loads(z.read("config.json")).get("config", {}).get(key)
        except (OSError, zipfile.BadZipFile, KeyError, ValueError) as e:
            raise CheckpointError(f"{path}: not a readable .keras file ({e})") from None
    folder = resolve(path)
    if not os.path.isdir(folder) or not os.path.exists(os.path.join(folder, PRESET_CONFIG)):
        return None
    return read_preset_config(folder)["model"].get("config", {}).get(key)


class classproperty:  # noqa: N801 -- spelt as keras-hub's, which Keras users know
    """A read-only property of a class (``zoo.SentenceEncoder.presets``, as keras-hub's ``Class.presets``)."""

    def __init__(self, getter):
        self.getter = getter
        self.__doc__ = getter.__doc__

    def __get__(self, instance, owner):
        return self.getter(owner)


def preset_catalogue(keep=None):
    """{name: description} of the presets shipped with zoo, as keras-hub's ``Class.presets``: ``class_name`` (what
    the preset holds), ``description``, ``params`` (numbers stored in its weights), ``path`` and its ``metadata``.
    ``keep(class_name)``: which to list (None: every preset)."""
    import h5py

    catalogue = {}
    for name in available_presets():
        folder = os.path.join(PRESETS_DIR, name)
        config = read_preset_config(folder)
        class_name = config["model"].get("class_name")
        if keep is not None and not keep(class_name):
            continue
        with h5py.File(os.path.join(folder, PRESET_WEIGHTS), "r") as weights:
            sizes = []
            weights.visititems(lambda _, item: sizes.append(item.size) if isinstance(item, h5py.Dataset) else None)
        metadata = config.get("metadata", {})
        catalogue[name] = {"class_name": class_name, "description": metadata.get("description", ""),
                           "params": int(sum(sizes)), "path": folder, "metadata": metadata}
    return catalogue


def recorded_max_input_tokens(path):
    """The ``max_input_tokens`` a preset's metadata records (None when it records none, or ``path`` is no preset)."""
    try:
        value = read_preset_config(resolve(path)).get("metadata", {}).get("max_input_tokens")
    except (OSError, ValueError):
        return None
    return int(value) if value else None


def remember_source(model, directory, config):
    """Record on ``model`` the preset it was loaded from (folder, weights sha256, a fingerprint of the weights),
    so that its fused ONNX graphs can be the preset's own (``zoo.inference.graphs.loaded_preset``)."""
    from .fingerprints import weights_fingerprint

    weights = ((config.get("files") or {}).get(PRESET_WEIGHTS) or {}).get("sha256")
    if weights and hasattr(model, "head_spec"):
        object.__setattr__(model, "_zoo_source", (os.path.abspath(directory), weights, weights_fingerprint(model),
                                                  None))  # not a tracked attribute of the Keras model


def load_saved(path, verify=True):
    """The model saved at ``path`` (a preset folder or name, a run folder, or a ``.keras`` file), with its
    tokenizer attached (``model.tokenizer``) when it has one."""
    import keras

    path = os.fspath(path)
    if path.endswith(".keras"):
        if not os.path.exists(path):
            raise MissingFileError(f"{path}: no such .keras file")
        import zipfile

        try:  # a .keras file is a zip: every member's CRC-32 is checked before anything is built from it
            with zipfile.ZipFile(path) as z:
                damaged = z.testzip()
        except (OSError, zipfile.BadZipFile, EOFError, ValueError) as e:
            raise CheckpointError(f"{path}: not a readable .keras file ({type(e).__name__}: {e})") from None
        if damaged is not None:
            raise CheckpointError(f"{path}: member {damaged} fails its CRC-32 check (the file is corrupted)")
        try:
            return keras.saving.load_model(path)
        except Exception as e:  # noqa: BLE001 -- any failure of an intact-looking file is a bad model file
            raise CheckpointError(f"{path}: cannot load the .keras file ({type(e).__name__}: {e})") from None
    directory = resolve(path)
    config = read_preset_config(directory)
    if verify:
        verify_files(directory, config)
    weights = os.path.join(directory, PRESET_WEIGHTS)
    if not os.path.exists(weights):
        raise CheckpointError(f"{weights}: preset weights file missing")
    try:
        model = keras.saving.deserialize_keras_object(config["model"])
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"{directory}/{PRESET_CONFIG}: field 'model' does not describe a zoo model "
                              f"({type(e).__name__}: {e})") from None
    try:
        model.load_weights(weights)
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"{weights}: cannot load the weights ({type(e).__name__}: {e})") from None
    if hasattr(type(model), "max_input_tokens"):
        model.max_input_tokens = config.get("metadata", {}).get("max_input_tokens")
    if os.path.exists(os.path.join(directory, VOCAB_FILE)) and hasattr(model, "tokenizer"):
        from .tokenizer.wordpiece import Tokenizer

        model.tokenizer = Tokenizer.from_preset(directory)
    remember_source(model, directory, config)
    log.debug("loaded %s from %s", type(model).__name__, directory)
    return model
