"""What an export writes: the model (anything zoo loads), its served meaning (``HeadSpec``) as the manifest records
it, and TF Serving's ``BASE/NAME/VERSION`` folders."""

from __future__ import annotations

import os

from ..inference.pipeline import prompted
from ..models import from_preset


# ----------------------------------------------------------------------------------- what is served
def serving_spec(model):
    """The ``HeadSpec`` of a model to export (TypeError for a model kind that serves nothing)."""
    head_spec = getattr(model, "head_spec", None)
    if head_spec is None:
        raise TypeError(f"no export recipe for a {type(model).__name__}: exportable are zoo task models with a head_spec() "
                        f"(SentenceEncoder, CrossEncoder, SimBERT)")
    return head_spec()


def default_prompt(model):
    """The text an embedding model's ``encode`` puts before each input when no prompt is named (its
    ``default_prompt_name``'s prompt; "" when it has none): an export's text signature puts it there too, so that the
    export gives ``encode``'s vectors."""
    served = model.served_model()
    return prompted("", getattr(served, "prompts", {}), default_prompt_name=getattr(served, "default_prompt_name", None))


def described(model, spec):
    """How an export's manifest describes its model (read by ``zoo serve``): the class, its HeadSpec and, for an
    embedding, its similarity function, its prompts and the default one (which the export's text signature
    applies)."""
    record = {"class": type(model).__name__, **spec.to_record()}
    if spec.output == "embedding":
        served = model.served_model()
        record["similarity_fn_name"] = getattr(model, "similarity_fn_name", "cosine")
        record["prompts"] = dict(getattr(served, "prompts", {}))
        record["default_prompt_name"] = getattr(served, "default_prompt_name", None)
    return record


def version_path(base, name="default", version=None):
    """``<base>/<name>/<version>``, the layout TF Serving loads.

    :param base: the models' folder.
    :param name: the served name.
    :param version: a number (None: the next free one).
    """
    folder = os.path.join(os.fspath(base), name)
    if version is None:
        existing = [int(d) for d in os.listdir(folder) if d.isdigit()] if os.path.isdir(folder) else []
        version = max(existing, default=0) + 1
    if int(version) < 1:
        raise ValueError(f"version must be a positive integer, got {version}")
    return os.path.join(folder, str(int(version)))


def load_exportable(path, pooling=None, maxlen=None):
    """A model to export from anything zoo loads (``zoo.models.from_preset``: a saved task model as it is, a
    checkpoint or backbone preset as a SentenceEncoder with ``pooling``); ``maxlen`` replaces the model's
    ``maxlen``, the one length ``encode``, indexes, exports and ``zoo serve`` all use by default."""
    model = from_preset(path, pooling=pooling, maxlen=maxlen)
    serving_spec(model)
    return model
