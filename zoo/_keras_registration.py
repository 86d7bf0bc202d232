"""zoo's Keras classes (models, layers, losses, schedules) registered with Keras as soon as Keras is imported, so
``keras.saving.load_model("model.keras")`` finds them after a bare ``import zoo`` while ``import zoo`` itself
loads neither Keras nor TensorFlow. Imported by ``zoo/__init__``: registers at once when Keras is already
imported, else once ``import keras`` completes (a one-shot import hook). When a zoo module is what imports Keras,
registering waits until that zoo module is done (its loader is wrapped), so it never meets a circular import."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys

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
            spec.loader = _ThenRegister(spec.loader)
        return spec


class _RegisterAfterKeras(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for ``keras`` it wraps the real loader so that registering follows Keras' import."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras":
            return None
        sys.meta_path.remove(self)  # one shot; the other finders locate the real module
        spec = importlib.util.find_spec("keras")
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader)
        return spec


class _ThenRegister(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        if "keras" in sys.modules:
            register_when_ready(done=module.__name__)

    def __getattr__(self, name):  # resources, is_package, get_code ... of the real loader
        return getattr(self.loader, name)


if "keras" in sys.modules:
    register_when_ready()
if not _done:
    for finder in (_AfterZooModules, _RegisterAfterKeras):
        if finder is not _RegisterAfterKeras or "keras" not in sys.modules:
            if not any(isinstance(f, finder) for f in sys.meta_path):
                sys.meta_path.insert(0, finder())
