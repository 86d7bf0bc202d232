"""zoo's Keras classes (models, layers, losses, schedules) registered with Keras as soon as Keras is imported, so
``keras.saving.load_model("model.keras")`` finds them after a bare ``import zoo`` while ``import zoo`` itself
loads neither Keras nor TensorFlow. Imported by ``zoo/__init__``: registers at once when Keras is already
imported, else once ``import keras`` completes (a one-shot import hook). When a zoo module is what imports Keras,
registering waits until that zoo module is done (its loader is wrapped), so it never meets a circular import."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import logging
import sys

from ._import_hooks import OnFirstImport, WrappedLoader

REGISTERING_MODULES = ("zoo.models", "zoo.train.schedules")  # importing these registers every zoo Keras class
_done = False


def register():
    """Import the modules whose classes carry ``@keras.saving.register_keras_serializable`` (once)."""
    global _done
    if not _done:
        for name in REGISTERING_MODULES:
            importlib.import_module(name)
        _done = True


def zoo_module_importing(done=None):
    """Whether a module of zoo (not the package itself, nor ``done``, which has just run) is half-imported now."""
    return any(name.startswith("zoo.") and name not in (__name__, done) and
               getattr(getattr(module, "__spec__", None), "_initializing", False)
               for name, module in list(sys.modules.items()))


def register_when_ready(done=None):
    """``register()`` now, unless a zoo module (other than ``done``) is half-imported: then ``_AfterZooModules``
    calls this again as each zoo module is done, and the outermost one registers."""
    if not _done and not zoo_module_importing(done):
        _register_or_warn()


def _register_or_warn():
    try:
        register()
    except Exception as e:  # noqa: BLE001 -- Keras itself imported fine: say why zoo's classes are missing
        logging.getLogger("zoo").warning("zoo's Keras classes could not be registered (%s: %s)", type(e).__name__, e)


def _then_register(exec_module, module):
    """A module's ``exec_module``, then ``register_when_ready`` once Keras is imported (``WrappedLoader``)."""
    exec_module(module)
    if "keras" in sys.modules:
        register_when_ready(done=module.__name__)


class _AfterZooModules(importlib.abc.MetaPathFinder):
    """Until registering is done: wraps the loader of each zoo module imported, so that once the module is done,
    and Keras is imported, ``register_when_ready`` runs."""

    def find_spec(self, fullname, path=None, target=None):
        if _done:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            return None
        if not fullname.startswith("zoo."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = WrappedLoader(spec.loader, _then_register)
        return spec


if "keras" in sys.modules:
    register_when_ready()
if not _done:
    if not any(isinstance(f, _AfterZooModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterZooModules())
    if "keras" not in sys.modules and not any(isinstance(f, OnFirstImport) and f.around is _then_register
                                              for f in sys.meta_path):
        # for ``keras`` itself: registering follows Keras' import
        sys.meta_path.insert(0, OnFirstImport(("keras",), _then_register))
