"""zoo's one output channel: the ``zoo`` logger (messages) and tqdm bars (long work, with rates).

The library only logs; an application decides what is shown. The ``zoo`` command and the task scripts call
``setup_cli()``: INFO messages on stderr, and TensorFlow's C++ start-up lines (CUDA stubs, oneDNN notices,
printed before its logging is configured) kept out of the terminal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

log = logging.getLogger("zoo")

_bars_shown = True  # the application's choice for bars their caller left to the default (--no-progress: none)


def show_bars(enabled):
    """Show (or not) every bar whose caller did not decide itself: the command line's ``--no-progress``."""
    global _bars_shown
    _bars_shown = bool(enabled)


def progress(iterable, desc, enabled=True, total=None, **kwargs):
    """A tqdm bar (with rates) on stderr when enabled, else the iterable itself (None when there is none)."""
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    kwargs.setdefault("mininterval", 0.5 if sys.stderr.isatty() else 30.0)  # logs get a line every 30 s
    return tqdm(iterable, desc=desc, total=total, file=sys.stderr, dynamic_ncols=True, **kwargs)


def batch_starts(n, batch_size, desc, enabled=None, unit="it"):
    """Start offsets of the batches over ``n`` items; the bar (shown by default past 20 batches, unless
    ``show_bars(False)``) counts items, so its total and rate are exact when the last batch is short."""
    starts = range(0, n, batch_size)
    bar = progress(None, desc, _bars_shown and len(starts) > 20 if enabled is None else enabled, total=n, unit=unit)
    for start in starts:
        yield start
        if bar is not None:
            bar.update(min(batch_size, n - start))
    if bar is not None:
        bar.close()


@contextlib.contextmanager
def stderr_silenced():
    """Send file descriptor 2 to /dev/null inside the block (C++ libraries write there directly)."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def root_logging_kept():
    """Undo, on leaving the block, the handlers and level a library sets on the root logger inside it (ONNX
    Runtime's ``quantize_dynamic`` calls ``logging.warning``, which gives the root logger a handler when it has
    none: every zoo message then printed twice)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)


def quiet_backend_import():
    """Import Keras and its backend with fd 2 silenced, unless TensorFlow is already imported: its C++ start-up
    lines (CUDA stubs, oneDNN notices) are written before any log level applies. Used once, by ``import zoo``."""
    import sys

    if "tensorflow" in sys.modules or "keras" in sys.modules:
        import keras  # noqa: F401
        return
    with stderr_silenced():
        import keras  # noqa: F401


def setup_cli(level=logging.INFO):
    """For programs (the ``zoo`` command, task scripts): zoo's messages at ``level`` on stderr as ``[zoo] ...``,
    and TensorFlow's one-time device and XLA start-up lines (cuInit errors on CPU machines, "XLA service
    initialized") consumed here, silently, instead of in the middle of the first step."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[zoo] %(message)s"))
        log.addHandler(handler)
    log.setLevel(level)
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with stderr_silenced():
            tf.config.list_physical_devices()
            tf.function(lambda x: x + 1.0, jit_compile=True)(tf.constant(1.0))
