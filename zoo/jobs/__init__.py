"""zoo's jobs, one module each: a config dataclass (its fields are the command's flags) and ``run(config)``.

``zoo train bi-encoder|cross-encoder|dvbert|simbert``, ``zoo pretrain``, ``zoo mirror-bert``, ``zoo compare``,
``zoo evaluate``; the task scripts in ``tasks/`` are the same jobs written out as readable recipes.
"""

import importlib as _importlib

JOBS = ("bi_encoder", "compare", "cross_encoder", "dvbert", "encode", "evaluate", "export", "mirror_bert", "pretrain",
        "search", "simbert")


def __getattr__(name):
    if name in JOBS:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'zoo.jobs' has no attribute {name!r}")
