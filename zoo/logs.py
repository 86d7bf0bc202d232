"""zoo's one output channel: the ``zoo`` logger (messages) and tqdm bars (long work, with rates).

The library only logs; an application decides what is shown. The ``zoo`` command and the task scripts call
``setup_cli()``: INFO messages on stderr, TensorFlow's C++ start-up lines (CUDA stubs, oneDNN notices, printed
before its logging is configured) kept out of the terminal, and Ctrl-C during training ended with one line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from ._import_hooks import OnFirstImport

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


def pyplot():
    """matplotlib's pyplot on the Agg backend, or None (with a warning naming ``pip install 'zoo[plots]'``) when
    matplotlib is not installed: the pictures of a run are extras, its numbers are not."""
    try:
        import matplotlib
    except ImportError:
        log.warning("no plots: matplotlib is not installed (pip install 'zoo[plots]')")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def warn_deprecated(old, new, removed_in="0.4"):
    """A ZooDeprecationWarning (a DeprecationWarning): ``old`` still works, ``new`` replaces it, and zoo
    ``removed_in`` removes it."""
    import warnings

    from .errors import ZooDeprecationWarning

    warnings.warn(f"{old} is deprecated and will be removed in zoo {removed_in}: use {new}", ZooDeprecationWarning,
                  stacklevel=3)


class StderrHandler(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is at each message (not the stream of the moment it was made)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _interrupted_hook(previous):
    """An excepthook for scripts: a ``TrainingInterrupted`` (Ctrl-C, state saved) ends the process with one line and
    status 130; anything else goes to ``previous``."""
    from .errors import TrainingInterrupted

    if getattr(previous, "zoo_hook", False):
        return previous

    def hook(kind, value, traceback):
        if not isinstance(value, TrainingInterrupted):
            return previous(kind, value, traceback)
        import shlex

        command = shlex.join(["python", os.path.basename(sys.argv[0]), *sys.argv[1:]])
        print(f"interrupted at epoch {value.epoch}, step {value.step}; resume with: {command}", file=sys.stderr,
              flush=True)
        os._exit(130)  # no interpreter teardown: the backend's threads would only add noise

    hook.zoo_hook = True
    return hook


def setup_cli(level=logging.INFO):
    """For programs (the ``zoo`` command, task scripts, benchmarks), called before anything imports the backend:
    zoo's messages at ``level`` on stderr as ``[zoo] ...``, and the backend's start-up noise kept out of the
    terminal. TensorFlow's C++ INFO and WARNING lines ("XLA service ... initialized", oneDNN notices, "Allocation
    of N exceeds 10% of free system memory", "Ignoring Assert operator") are turned off with
    ``TF_CPP_MIN_LOG_LEVEL=2`` unless the environment sets it, and what TensorFlow writes to file descriptor 2
    while it loads and probes devices (CUDA stubs, "failed call to cuInit" on a machine without a GPU) is
    discarded. Errors later on still show, and every failure still raises. The library itself changes none of
    this."""
    if not any(isinstance(h, StderrHandler) for h in log.handlers):
        handler = StderrHandler()
        handler.setFormatter(logging.Formatter("[zoo] %(message)s"))
        log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False  # a library that gives the root logger a handler must not print zoo's lines twice
    sys.excepthook = _interrupted_hook(sys.excepthook)
    if "tensorflow" not in sys.modules and not os.environ.get("TF_CPP_MIN_LOG_LEVEL"):
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if "keras" in sys.modules or "tensorflow" in sys.modules:
        return
    if not any(isinstance(f, OnFirstImport) and f.around is _quietly for f in sys.meta_path):
        # a command that never loads the backend never pays for it
        sys.meta_path.insert(0, OnFirstImport(("keras", "tensorflow"), _quietly))


def _quietly(exec_module, module):
    """The first import of Keras or TensorFlow, and TensorFlow's device probe, with file descriptor 2 silenced."""
    with stderr_silenced():
        exec_module(module)
        if module.__name__ == "tensorflow" or module.backend.backend() == "tensorflow":
            import tensorflow as tf

            tf.config.list_physical_devices()


# ---------------------------------------------------------------------------------- the command line, for results
_INVOKED = []  # the argv of the zoo command ``zoo.cli.main`` runs (``invoked_as``): the command of its results


@contextlib.contextmanager
def invoked_as(argv):
    """Within: results name ``argv`` as their command (``zoo.cli.main(["train", ...])`` run from Python)."""
    _INVOKED.append(list(argv))
    try:
        yield
    finally:
        _INVOKED.pop()


def rerun_command(argv=None):
    """The command line as the user can type it again: ``zoo train ...`` for the ``zoo`` command, for ``python -m
    zoo`` and for ``zoo.cli.main`` called from Python, ``python tasks/x.py ...`` for a script (its path as given);
    arguments with spaces quoted."""
    import shlex

    if argv is None and _INVOKED:
        return shlex.join(["zoo", *_INVOKED[-1]])
    argv = list(sys.argv if argv is None else argv)
    program = argv[0]
    if os.path.basename(program) in ("zoo", "__main__.py") and \
            (os.path.basename(program) == "zoo" or os.path.basename(os.path.dirname(program)) == "zoo"):
        head = ["zoo"]
    elif program.endswith(".py"):
        head = ["python", os.path.relpath(program) if os.path.isabs(program) and
                os.path.abspath(program).startswith(os.getcwd() + os.sep) else program]
    else:
        head = [os.path.basename(program)]
    return " ".join(head + [shlex.quote(a) for a in argv[1:]])
