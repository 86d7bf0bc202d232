"""Where zoo keeps things and how it writes them (a leaf: imports only ``zoo.errors``).

File names of every format zoo reads or writes, the embedded ``data/`` folder and its presets, ``resolve``
(a path, a run folder's best model, or a preset name) and atomic writes: a file or folder is written under a
temporary name and renamed into place, so a killed process never leaves a half-written target.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil

from .errors import MissingFileError

# zoo presets (``save_preset``): the Keras config of the model, its weights, and the tokenizer
PRESET_CONFIG = "zoo_config.json"
PRESET_WEIGHTS = "model.weights.h5"
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"
HF_TOKENIZER = "tokenizer.json"  # transformers' fast tokenizer (its WordPiece vocabulary, where vocab.txt is absent)
# checkpoints of other frameworks
GOOGLE_CONFIG = "bert_config.json"
HF_CONFIG = "config.json"
# a training run folder (``zoo.train.fit``): the best model and the resumable state
# exported SavedModels (``zoo export``) and search indexes: the sha256 and size of every file, checked on load
EXPORT_MANIFEST = "zoo_manifest.json"

RUN_MODEL = "model"
RUN_CHECKPOINT = "checkpoint"
RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"

DATA_DIR = os.environ.get("ZOO_DATA_DIR") or os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "data")
# the shipped presets: data/presets in a checkout (or ZOO_DATA_DIR/presets), zoo/_presets in an installed wheel
PRESETS_DIR = next((d for d in (os.path.join(DATA_DIR, "presets"),
                                os.path.join(os.path.dirname(os.path.abspath(__file__)), "_presets"))
                    if os.path.isdir(d)), os.path.join(DATA_DIR, "presets"))
DEFAULT_PRESET = "chinese_L-4_H-256_A-4"  # the untuned start of every training job
DEFAULT_ENCODER = "zoo-embed-zh-L4"  # the ready sentence-embedding model: `zoo encode`'s and SemanticIndex's default


def cache_dir(*parts):
    """zoo's cache folder (files zoo can rebuild, e.g. converted inference graphs): ``$ZOO_CACHE``, else
    ``$XDG_CACHE_HOME/zoo``, else ``~/.cache/zoo``; ``parts`` are joined below it."""
    root = os.environ.get("ZOO_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "zoo")
    return os.path.join(root, *parts)


def available_presets():
    """Names of the shipped presets (``PRESETS_DIR``), which every ``from_preset`` takes by name."""
    if not os.path.isdir(PRESETS_DIR):
        return []
    return sorted(d for d in os.listdir(PRESETS_DIR) if os.path.exists(os.path.join(PRESETS_DIR, d, PRESET_CONFIG)))


def resolve(path):
    """A path as given if it exists (or is a checkpoint prefix), a run folder's best model (``RUN/model``), or
    the folder of a preset of that name."""
    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, PRESET_CONFIG)) \
            and os.path.exists(os.path.join(path, RUN_MODEL, PRESET_CONFIG)):
        return os.path.join(path, RUN_MODEL)
    if os.path.exists(path) or os.path.exists(path + ".index"):
        return path
    if os.path.exists(path + ".old"):  # a replace_dir interrupted between its two renames
        return path + ".old"
    candidate = os.path.join(PRESETS_DIR, path)
    if os.path.exists(os.path.join(candidate, PRESET_CONFIG)):
        return candidate
    raise MissingFileError(f"{path}: no such file or folder, and no zoo preset of that name "
                            f"(presets in {PRESETS_DIR}: {available_presets()})")


# ---------------------------------------------------------------------------------- atomic writes
def temporary_name(path):
    return f"{os.fspath(path)}.tmp-{os.getpid()}"


def replace_dir(tmp, target):
    """Move a finished folder ``tmp`` to ``target``, replacing any old one; never leaves a half-written target
    (``resolve`` finds ``target.old`` if a kill falls between the two renames)."""
    old = target + ".old"
    if os.path.exists(old):
        if os.path.exists(target):
            shutil.rmtree(old)
        else:  # a kill fell between the renames last time: ``old`` is the only good copy, put it back first
            os.rename(old, target)
    if os.path.exists(target):
        os.rename(target, old)
    os.rename(tmp, target)
    if os.path.exists(old):
        shutil.rmtree(old)


@contextlib.contextmanager
def atomic_dir(target):
    """``with atomic_dir(target) as tmp:`` write into ``tmp``; on success it replaces ``target`` in one rename,
    on an error it is removed and ``target`` is untouched."""
    target = os.path.abspath(os.fspath(target))
    tmp = temporary_name(target)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, target)


@contextlib.contextmanager
def atomic_file(path, mode="w"):
    """``with atomic_file(path) as f:`` write; the file appears at ``path`` only when the block succeeds."""
    tmp = temporary_name(path)
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def write_json_atomic(path, obj):
    with atomic_file(path) as f:
        json.dump(obj, f, indent=1, ensure_ascii=False, default=_json_default)
        f.write("\n")


def write_text_atomic(path, text):
    with atomic_file(path) as f:
        f.write(text)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def sha256_of(path):
    """sha256 of a file's bytes, or of a folder's files (not hidden) read one after another in name order."""
    h = hashlib.sha256()
    files = [path]
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if os.path.isfile(os.path.join(path, f)) and not f.startswith("."))
    for file in files:
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def file_manifest(directory, exclude=()):
    """{relative path: {"sha256", "bytes"}} of every file below ``directory`` (sorted; ``exclude``: names to skip)."""
    files = {}
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, directory).replace(os.sep, "/")
            if rel not in exclude:
                files[rel] = {"sha256": sha256_of(path), "bytes": os.path.getsize(path)}
    return files


def check_manifest(directory, files, listed_in):
    """Check each file of a manifest (size, then sha256); ``CheckpointError`` naming the first that differs."""
    from .errors import CheckpointError

    if not isinstance(files, dict):
        raise CheckpointError(f"{os.path.join(directory, listed_in)}: field 'files' must be an object")
    for rel, expected in files.items():
        path = os.path.join(directory, rel)
        if not os.path.isfile(path):
            raise CheckpointError(f"{path}: file missing (listed in {listed_in})")
        size = os.path.getsize(path)
        if not isinstance(expected, dict) or size != expected.get("bytes"):
            raise CheckpointError(f"{path}: {size} bytes, {listed_in} says {expected.get('bytes')} (truncated or "
                                  f"replaced)")
        if sha256_of(path) != expected.get("sha256"):
            raise CheckpointError(f"{path}: sha256 differs from {listed_in} (the file is corrupted or was "
                                  f"changed after saving)")


def read_json_file(path, what, error=None):
    """A JSON object from ``path``; a zoo error naming the file when it is missing, not UTF-8 JSON or not an
    object (``error``: the class, default ``CheckpointError``)."""
    from .errors import CheckpointError

    error = error or CheckpointError
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: file missing ({what})") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise error(f"{path}: not valid JSON ({what}: {e})") from None
    if not isinstance(obj, dict):
        raise error(f"{path}: not a JSON object ({what})")
    return obj
