"""The encoding pipeline that the Keras ``SentenceEncoder`` and the light runtime's ``OnnxEncoder`` share: texts ->
pieces -> rows (cut at maxlen, or windows of long texts) -> batches longest first -> outputs in input order ->
Matryoshka cut -> L2 normalisation. Light: numpy only."""

from __future__ import annotations

import functools
import os
import threading

import numpy as np

from ..choices import ENGINES, REMOVED_IN
from ..logs import batch_starts, log
from ..tokenizer.wordpiece import chunk_pieces
from ..vectors import OUTPUT_PRECISIONS, embedding_ranges, mean_of_windows, normalize_rows, quantize_embeddings

CALIBRATION_TEXTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration_texts.txt")
_warned = set()


# ------------------------------------------------------------------------- encode()'s arguments
def encode_arguments(engine, precision, ranges=None):
    """(engine, output precision) of an ``encode`` call. ``precision`` has sentence-transformers' meaning (the
    output: float32, int8, uint8, binary, ubinary); ``engine`` is zoo's runtime (``ENGINES``). For one release a
    value only the runtime knows ("fp32", "openvino-int8", ...) is still taken as the engine, with a warning; "int8",
    valid in both, is refused unless ``ranges`` make it the output's."""
    if precision in OUTPUT_PRECISIONS and (precision != "int8" or ranges is not None):
        return engine, precision
    if precision == "int8":
        raise ValueError("precision='int8' has two meanings during this release: precision= now quantizes the "
                         "output, as sentence-transformers' encode does, and zoo's int8 runtime is engine='int8'. "
                         "Write engine='int8' for float vectors from the int8 graph, or precision='int8' with "
                         "ranges=... (or precision='uint8', on the model's calibrated ranges) for int8 vectors")
    return engine_argument(engine, precision), "float32"


def engine_argument(engine, precision=None):
    """The engine of a call that names it ``engine`` or, as before this release, ``precision`` (warned once)."""
    if precision is None:
        return engine
    if precision not in ENGINES:
        raise ValueError(f"precision must be one of {OUTPUT_PRECISIONS} (the output, as in sentence-transformers); "
                         f"the runtime is engine=, one of {ENGINES}; got {precision!r}")
    if engine not in (None, "auto"):
        raise ValueError(f"engine={engine!r} and precision={precision!r}: name the runtime once, as engine=")
    if precision not in _warned:
        _warned.add(precision)
        log.warning("precision=%r picks the runtime: write engine=%r (precision= now means the output's, as in "
                    "sentence-transformers; the old spelling goes in zoo %s)", precision, precision, REMOVED_IN)
    return precision


def prompted(texts, prompts, prompt_name=None, prompt=None, default_prompt_name=None):
    """``texts`` after their prompt, as sentence-transformers' encode: ``prompt`` (a string), else the model's
    prompt ``prompt_name`` (else its ``default_prompt_name``); a single str stays a str."""
    if prompt is not None and prompt_name is not None:
        log.warning("encode: prompt and prompt_name both given: using prompt, as sentence-transformers does")
    if prompt is None:
        name = default_prompt_name if prompt_name is None else prompt_name
        if name is not None and name not in prompts:
            raise ValueError(f"prompt_name {name!r} is not one of the model's prompts: {sorted(prompts) or 'none'}")
        prompt = prompts[name] if name is not None else ""
    if not prompt:
        return texts
    return prompt + texts if isinstance(texts, str) else [prompt + t for t in texts]


def calibration_ranges(encode):
    """The int8/uint8 ranges of a model: ``embedding_ranges`` of ``encode`` (float32 vectors, the call's settings)
    on the texts shipped with zoo (``CALIBRATION_TEXTS``, also the int8 graphs' calibration set): they depend on the
    model alone, never on the texts being encoded."""
    with open(CALIBRATION_TEXTS, encoding="utf-8") as f:
        return embedding_ranges(encode([line.rstrip("\n") for line in f if line.strip()]))


def output_as(vectors, precision, ranges):
    """Float32 vectors (one [d] or [n, d]) as the ``precision`` of ``encode`` (``zoo.vectors.quantize_embeddings``)."""
    if precision == "float32":
        return vectors
    return quantize_embeddings(vectors[None] if vectors.ndim == 1 else vectors, precision, ranges)[
        0 if vectors.ndim == 1 else slice(None)]


# ------------------------------------------------------------------------- the pipeline shared with Keras
def predict_sorted(rows, predict, pad, batch_size=64, show_progress_bar=None, unit="row"):
    """Outputs of ``predict(pad(batch))`` for (token ids, segment ids) rows, in input order -> float32 [n, ...].
    Rows run longest first, so a batch holds rows of similar length and little padding is computed. Where
    there are several batches and ``predict`` has ``submit(batch, done)`` and ``wait()``
    (``zoo.inference.sessions.GraphRunner``), they are queued to the engine, which may run several at once; one batch
    runs at once with every core on it."""
    order = np.argsort([-len(r[0]) for r in rows], kind="stable")
    out, lock = [], threading.Lock()

    def store(index, values):
        values = np.asarray(values, dtype="float32")
        with lock:
            if not out:
                out.append(np.zeros((len(rows),) + values.shape[1:], dtype="float32"))
        out[0][index] = values

    queued = getattr(predict, "submit", None) if len(rows) > batch_size else None
    submit = queued or (lambda batch, done: done(predict(batch)))
    for start in batch_starts(len(rows), batch_size, "predict", show_progress_bar, unit=unit):
        index = order[start:start + batch_size]
        submit(pad([rows[i] for i in index]), functools.partial(store, index))
    if queued:
        predict.wait()
    return out[0] if out else None


def embed_texts(texts, tokenizer, predict_rows, dim, maxlen, truncate_dim=None, long_text="truncate", stride=None,
                normalize=True):
    """``encode``'s pipeline: texts -> pieces -> rows of at most ``maxlen`` tokens (cut, or windows averaged with
    ``long_text="chunk"``) -> ``predict_rows(rows)`` -> the first ``truncate_dim`` dimensions -> L2-normalised
    when ``normalize``. A single str gives one vector [dim]."""
    if long_text not in ("truncate", "chunk"):
        raise ValueError(f"long_text must be 'truncate' or 'chunk', got {long_text!r}")
    if truncate_dim is not None and not 1 <= truncate_dim <= dim:
        raise ValueError(f"truncate_dim must be in [1, {dim}], got {truncate_dim}")
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    out = np.zeros((0, dim), dtype="float32")
    if texts:
        pieces = tokenizer.piece_ids(texts)
        owner, weights = np.arange(len(texts)), None
        if long_text == "chunk":
            pieces, owner, weights = chunk_pieces(pieces, maxlen - 2, stride)
        out = predict_rows([tokenizer.assemble(p, None, maxlen) for p in pieces])
        if long_text == "chunk":
            out = mean_of_windows(out, owner, weights, len(texts))
    if truncate_dim is not None:
        out = out[:, :truncate_dim]
    if normalize:
        out = normalize_rows(out)
    return out[0] if single else out
