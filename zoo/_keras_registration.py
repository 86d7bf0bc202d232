"""zoo's Keras classes (models, layers, losses, schedules) registered with Keras as soon as Keras is imported, so
``keras.saving.load_model("model.keras")`` finds them after a bare ``import zoo`` while ``import zoo`` itself
loads neither Keras nor TensorFlow. Imported by ``zoo/__init__``: registers at once when Keras is already
imported, else once ``import keras`` completes (a one-shot import hook)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import sys

REGISTERING_MODULES = ("zoo.models", "zoo.train.schedules")  # importing these registers every zoo Keras class


def register():
    """Import the modules whose classes carry ``@keras.saving.register_keras_serializable``."""
    for name in REGISTERING_MODULES:
        importlib.import_module(name)


class _RegisterAfterKeras(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for ``keras`` it wraps the real loader so that ``register()`` runs after Keras."""

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
        try:
            register()
        except Exception as e:  # noqa: BLE001 -- Keras itself imported fine: say why zoo's classes are missing
            logging.getLogger("zoo").warning("zoo's Keras classes could not be registered (%s: %s)",
                                             type(e).__name__, e)

    def __getattr__(self, name):  # resources, is_package, get_code ... of the real loader
        return getattr(self.loader, name)


if "keras" in sys.modules:
    register()
elif not any(isinstance(f, _RegisterAfterKeras) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterKeras())
