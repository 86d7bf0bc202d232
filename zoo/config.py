"""Job settings as dataclasses, and their command-line flags (generated here with argparse, one parser for all).

A job's config is a dataclass whose fields are declared with ``option(default, help, ...)``; ``add_flags`` turns
each field into a flag (``batch_size`` -> ``--batch-size``; a bool that defaults to True -> ``--no-NAME``; a
tuple -> comma-separated values, or a repeated flag with ``append=True``). Checks that need no data live in the
dataclass's ``__post_init__`` and raise ``ConfigError``, so a bad flag fails before anything is loaded or written.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing

from .errors import ConfigError
from .logs import show_bars


def option(default=None, help="", *, flag=None, choices=None, append=False, required=False):
    """A config field with what its flag needs: help text, an optional flag name (``flag="--loss"``),
    choices, ``append=True`` for a repeated flag collecting a tuple, ``required=True``."""
    return dataclasses.field(default=default, metadata={"help": help, "flag": flag, "choices": choices,
                                                        "append": append, "required": required})


def _base_type(annotation):
    """int / float / str / bool / tuple of an annotation such as ``int | None``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return typing.get_origin(annotation) or annotation


def add_flags(parser, config_class, fixed=()):
    """Add a flag to ``parser`` for every field of ``config_class`` except those in ``fixed``."""
    hints = typing.get_type_hints(config_class)
    for f in dataclasses.fields(config_class):
        if f.name in fixed or not f.metadata.get("help"):
            continue
        meta, kind = f.metadata, _base_type(hints[f.name])
        name = meta["flag"] or "--" + f.name.replace("_", "-")
        kwargs = {"dest": f.name, "help": meta["help"].replace("%", "%%")}  # argparse formats help
        if kind is bool:
            if f.default is True:
                name = meta["flag"] or "--no-" + f.name.replace("_", "-")
                parser.add_argument(name, action="store_false", **kwargs)
            else:
                parser.add_argument(name, action="store_true", **kwargs)
            continue
        if meta["choices"]:
            kwargs["choices"] = meta["choices"]
        if kind is tuple:
            if meta["append"]:
                parser.add_argument(name, action="append", required=meta["required"], **kwargs)
            else:
                kwargs["help"] += f" (comma-separated; default: {','.join(f.default) or 'none'})"
                parser.add_argument(name, type=_comma_list, default=f.default, **kwargs)
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        if default is not None and "default:" not in kwargs["help"]:
            kwargs["help"] += " (default: %(default)s)"
        if not meta["choices"]:
            kwargs["metavar"] = f.name.upper()
        parser.add_argument(name, type=kind, default=default, required=meta["required"], **kwargs)


def _comma_list(text):
    return tuple(t.strip() for t in text.split(",") if t.strip())


def make_config(config_class, args, parser=None, fixed=None):
    """The config from parsed ``args`` (plus ``fixed`` values); a ConfigError becomes a usage error of
    ``parser`` (exit status 2) when there is one."""
    names = {f.name for f in dataclasses.fields(config_class)}
    values = {k: v for k, v in vars(args).items() if k in names}
    for key, value in values.items():
        if isinstance(value, list):
            values[key] = tuple(value)
    values.update(fixed or {})
    try:
        config = config_class(**values)
    except ConfigError as e:
        if parser is None:
            raise
        parser.error(str(e))
    if getattr(config, "progress", True) is False:  # --no-progress: the evaluations' bars too, not only training's
        show_bars(False)
    return config


def parse(config_class, argv=None, fixed=None, description=None):
    """Parse ``argv`` into a ``config_class`` (the task scripts' entry point); ``fixed`` fields get no flag."""
    fixed = dict(fixed or {})
    parser = argparse.ArgumentParser(description=description or (config_class.__doc__ or "").strip().split("\n")[0])
    add_flags(parser, config_class, fixed)
    return make_config(config_class, parser.parse_args(argv), parser, fixed)
