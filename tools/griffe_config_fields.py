"""A Griffe extension for the API reference (mkdocs.yml loads it): a config dataclass field declared with
``zoo.config.option(default, help, ...)`` is documented by its help text, its flag and its choices, and shows its
real default, in the field's entry and in the class's signature.

The values come from the imported classes (``dataclasses.fields``), not from the source, so help texts built with
f-strings or helpers (``output_option``) read as ``zoo CMD --help`` prints them. Only modules that declare such
fields are imported: ``zoo.config``, ``zoo.jobs.*`` and ``zoo.serving``, which load no backend.
"""

from __future__ import annotations

import dataclasses
import importlib

import griffe

OPTION_MAKERS = ("option", "output_option")  # zoo.config's field makers


class ConfigFields(griffe.Extension):
    """Fill in the docstring and default of every ``option(...)`` field while the source is visited (before
    Griffe's dataclass extension builds ``__init__`` from the fields)."""

    def on_attribute_instance(self, *, attr, **kwargs):
        value, owner = attr.value, attr.parent
        if not (owner is not None and owner.is_class and isinstance(value, griffe.ExprCall)
                and str(value.function).split(".")[-1] in OPTION_MAKERS):
            return
        from zoo.config import flag_name

        cls = getattr(importlib.import_module(owner.module.path), owner.name, None)
        field = next((f for f in dataclasses.fields(cls) if f.name == attr.name), None) if cls else None
        if field is None:
            return
        attr.value = repr(field.default)
        meta = field.metadata
        if meta.get("help"):
            text = f"{meta['help'].replace('<', '&lt;')}\n\nFlag: `{flag_name(field)}`"
            if meta.get("choices"):
                text += "; one of " + ", ".join(f"`{c}`" for c in meta["choices"])
            attr.docstring = griffe.Docstring(text + ".", parent=attr)
