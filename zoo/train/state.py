"""The training state: everything that shapes the rest of a run, saved so that a killed run resumes into the run
it replaces.

That is every variable of the trainer (weights, non-trainable ones, and the dropout layers' seed-generator
states, which ``get_weights`` leaves out), the optimizer's variables (its step counter included, so schedules
continue), and the progress (epoch, step within it, history, best). The batches need nothing more: they are a
fixed function of (seed, epoch, step). Written atomically; the arrays' sha256 is checked when read.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from ..errors import CheckpointError
from ..paths import atomic_dir, resolve, sha256_of

ARRAYS = "state.npz"
PROGRESS = "state.json"


def _variables(trainer):
    return list(trainer.variables), list(trainer.optimizer.variables)


def save_state(directory, trainer, progress):
    """Write the trainer's variables, its optimizer's and ``progress`` (a JSON-able dict) to ``directory``."""
    model_vars, optimizer_vars = _variables(trainer)
    try:
        _write_state(directory, model_vars, optimizer_vars, progress)
    except OSError as e:  # e.g. ENOSPC: the temporary folder is removed, the previous state stays in place
        raise CheckpointError(f"{directory}: could not write the training state ({e.strerror or e}); the previous "
                              f"checkpoint is kept") from e


def _write_state(directory, model_vars, optimizer_vars, progress):
    from keras import ops

    with atomic_dir(directory) as tmp:
        arrays = {f"v{i}": ops.convert_to_numpy(v) for i, v in enumerate(model_vars)}
        arrays.update({f"o{i}": ops.convert_to_numpy(v) for i, v in enumerate(optimizer_vars)})
        np.savez(os.path.join(tmp, ARRAYS), **arrays)
        meta = {"progress": progress, "variables": [v.path for v in model_vars],
                "optimizer_variables": [list(v.shape) for v in optimizer_vars],  # names carry a per-process counter
                "sha256": sha256_of(os.path.join(tmp, ARRAYS))}
        with open(os.path.join(tmp, PROGRESS), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)


def _layout(path):
    """A variable path without the per-process counters Keras appends to generated names (``seed_generator_35``
    in one process is ``seed_generator_56`` in a process that built other models first)."""
    return re.sub(r"_\d+(?=/|$)", "", path)


def load_state(directory, trainer):
    """Restore what ``save_state`` wrote into ``trainer``; returns the progress dict, or None when there is no
    state. A state of another model, or a damaged one, raises CheckpointError naming the file."""
    try:
        directory = resolve(directory)
    except FileNotFoundError:
        return None
    meta_path, arrays_path = os.path.join(directory, PROGRESS), os.path.join(directory, ARRAYS)
    try:
        with open(meta_path, "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
        progress, paths, opt_paths = meta["progress"], meta["variables"], meta["optimizer_variables"]
    except FileNotFoundError:
        raise CheckpointError(f"{meta_path}: file missing (training state incomplete)") from None
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{meta_path}: not a zoo training state ({type(e).__name__}: {e})") from None
    if not os.path.exists(arrays_path):
        raise CheckpointError(f"{arrays_path}: file missing (training state incomplete)")
    if meta.get("sha256") and sha256_of(arrays_path) != meta["sha256"]:
        raise CheckpointError(f"{arrays_path}: sha256 differs from {PROGRESS} (the file is damaged)")
    model_vars, _ = _variables(trainer)
    if [_layout(v.path) for v in model_vars] != [_layout(p) for p in paths]:
        diff = next((f"{a} vs {b}" for a, b in zip(paths, (v.path for v in model_vars)) if _layout(a) != _layout(b)),
                    f"{len(paths)} vs {len(model_vars)} variables")
        raise CheckpointError(f"{meta_path}: the training state belongs to another model ({diff}); use a new "
                              f"output folder, or delete {directory}")
    trainer.optimizer.build(trainer.trainable_variables)
    optimizer_vars = list(trainer.optimizer.variables)
    if [list(v.shape) for v in optimizer_vars] != opt_paths:
        raise CheckpointError(f"{meta_path}: the optimizer state does not match this trainer's optimizer")
    try:
        with np.load(arrays_path) as data:
            for i, v in enumerate(model_vars):
                v.assign(data[f"v{i}"])
            for i, v in enumerate(optimizer_vars):
                v.assign(data[f"o{i}"])
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"{arrays_path}: cannot read the training state ({type(e).__name__}: {e})") from None
    return progress
