"""Import hooks zoo uses to act when a module is first imported, without importing it itself (a leaf: standard
library only). ``WrappedLoader`` runs a module's loader through ``around(exec_module, module)``;
``OnFirstImport`` is a one-shot finder that wraps the loader of the first of ``names`` to be imported."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys


class WrappedLoader(importlib.abc.Loader):
    """A module's own loader, its ``exec_module`` run as ``around(loader.exec_module, module)``."""

    def __init__(self, loader, around):
        self.loader, self.around = loader, around

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.around(self.loader.exec_module, module)

    def __getattr__(self, name):  # resources, is_package, get_code ... of the real loader
        return getattr(self.loader, name)


class OnFirstImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: the first time one of ``names`` is imported it removes itself from ``sys.meta_path``
    and wraps that module's real loader (``WrappedLoader`` with ``around``)."""

    def __init__(self, names, around):
        self.names, self.around = tuple(names), around

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names:
            return None
        sys.meta_path.remove(self)  # one shot; the other finders locate the real module
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = WrappedLoader(spec.loader, self.around)
        return spec


class ModuleAliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Old module names that still import: ``{old: new}``; ``import old`` gives the module ``new`` itself (the same
    object, so patching one patches the other), after ``warn(old, new)`` -- once, since the alias then stays in
    ``sys.modules``."""

    def __init__(self, aliases, warn):
        self.aliases, self.warn = dict(aliases), warn

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.aliases:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        self.warn(spec.name, self.aliases[spec.name])
        return importlib.import_module(self.aliases[spec.name])

    def exec_module(self, module):
        pass  # the module is the new one, already executed
