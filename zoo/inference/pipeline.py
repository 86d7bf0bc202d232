"""The encoding pipeline that the Keras ``SentenceEncoder`` and the light runtime's ``OnnxEncoder`` share: texts ->
pieces -> rows (cut at maxlen, or windows of long texts) -> batches longest first -> outputs in input order ->
Matryoshka cut -> L2 normalisation. Light: numpy only."""

from __future__ import annotations

import functools
import threading

import numpy as np

from ..logs import batch_starts
from ..tokenizer.wordpiece import chunk_pieces
from ..vectors import mean_of_windows, normalize_rows


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
