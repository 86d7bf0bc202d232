"""Inputs longer than the served model takes: refused, cut, or embedded whole as overlapping windows; never cut
without the client knowing.

A served model's limit is the ``maxlen`` its export was written with (tokens, [CLS] and [SEP] included; a pair's
two texts share it). ``ModelServer(long_text=...)`` (``zoo serve --long-text``): ``refuse`` (the default: an over-long input is an error naming its
length and the limit, unless the request asks to ``truncate``), ``truncate`` (cut, as ``encode`` does) or ``chunk``
(an embedding is the token-weighted mean of overlapping windows, exactly as ``encode(long_text="chunk")``; a pair
for a cross-encoder cannot be chunked and is refused unless the request asks to ``truncate``).
"""

from __future__ import annotations

import numpy as np

from ..tokenizer.wordpiece import chunk_pieces
from ..vectors import mean_of_windows, normalize_rows
from .model import RequestError

LONG_TEXT = ("refuse", "truncate", "chunk")


def python_setting(name, *values):
    """How a Python caller sets a server's option: ``long_text='truncate' or 'chunk'``."""
    return f"{name}=" + " or ".join(repr(v) for v in values)


class TooLong(RequestError):
    """Input ``index`` of ``field`` has ``tokens`` tokens, over the model's ``limit``; ``modes``: the ``long_text``
    settings that would take it, named in the message as ``setting`` spells them (``python_setting``, or the
    command line's flag for ``zoo serve``)."""

    def __init__(self, field, index, tokens, limit, modes=(), setting=python_setting):
        hint = f" (send shorter texts, or serve with {setting('long_text', *modes)})" if modes else ""
        super().__init__(f"{field}[{index}] has {tokens} tokens; the model takes at most {limit} tokens per input"
                         + hint)
        self.field, self.index, self.tokens, self.limit = field, index, tokens, limit


def token_counts(tokenizer, texts, texts_b=None):
    """Tokens of each input before any cut: [CLS] text [SEP] (a pair: [CLS] a [SEP] b [SEP])."""
    pieces = [len(p) for p in tokenizer.piece_ids(texts)]
    if texts_b is None:
        return [n + 2 for n in pieces]
    return [n + len(p) + 3 for n, p in zip(pieces, tokenizer.piece_ids(texts_b))]


def first_over(counts, limit):
    """(index, tokens) of the first input over ``limit``, or None."""
    return next(((i, n) for i, n in enumerate(counts) if n > limit), None)


def chunk_windows(tokenizer, texts, limit, stride=None):
    """Texts -> (padded ids arrays of their windows, owner text of each window, weights, tokens per window):
    ``zoo.tokenizer.chunk_pieces`` with windows of ``limit - 2`` text tokens, as ``encode`` cuts them."""
    windows, owner, weights = chunk_pieces(tokenizer.piece_ids(texts), limit - 2, stride)
    rows = [tokenizer.assemble(w, None, limit) for w in windows]
    arrays = tokenizer.pad(rows)
    return arrays, owner, weights, [len(ids) for ids, _ in rows]


def combine_windows(vectors, owner, weights, n, normalize=True):
    """Window vectors [W, d] -> [n, d]: each text's token-weighted mean of its windows, L2-normalised when
    ``normalize`` (what ``encode(long_text="chunk")`` returns)."""
    mean = mean_of_windows(vectors, owner, weights, n)
    return normalize_rows(mean) if normalize else mean


def tokens_embedded(tokenizer, limit, texts, texts_b=None, chunk=False):
    """The tokens each input is embedded from (``usage``): its own count cut at ``limit``, or with ``chunk`` (single
    texts) the sum over its windows' rows."""
    counts = token_counts(tokenizer, texts, texts_b)
    long = [i for i, n in enumerate(counts) if n > limit]
    if not (chunk and texts_b is None and long):
        return [min(n, limit) for n in counts]
    _, owner, _, tokens = chunk_windows(tokenizer, [texts[i] for i in long], limit)
    per_text = np.bincount(owner, np.asarray(tokens, dtype="float64"), minlength=len(long))
    for j, i in enumerate(long):
        counts[i] = int(per_text[j])
    return counts


def length_plan(model, sig, arrays, mode, setting=python_setting):
    """What ``mode`` does with a request's over-long texts: None when every text fits (or ``mode`` is "truncate",
    or the model records no tokenizer), the windows to embed instead ({"arrays", "owner", "weights", "tokens",
    "n"}) when ``mode`` is "chunk" and the signature embeds single texts; TooLong otherwise."""
    tokenizer, limit = getattr(model, "tokenizer", None), getattr(model, "limit", None)
    if tokenizer is None or not limit or mode == "truncate" or not sig.strings_in:
        return None
    keys, prompt = list(sig.inputs), getattr(model, "prompt", "")  # the signature's prompt counts, as in encode()
    texts = [[prompt + v.decode("utf-8") for v in arrays[k]] for k in keys]
    if all(sum(map(len, row)) + len(keys) - 1 <= limit - 2 for row in zip(*texts)):  # a char gives >= 1 piece
        return None
    counts = token_counts(tokenizer, *texts)
    over = first_over(counts, limit)
    if over is None:
        return None
    if mode == "chunk" and len(keys) == 1 and list(sig.outputs) == ["embedding"] and "ids" in model.signatures:
        windows, owner, weights, tokens = chunk_windows(tokenizer, texts[0], limit)
        return {"arrays": windows, "owner": owner, "weights": weights, "tokens": tokens, "n": len(texts[0])}
    field = f"input {keys[0]!r}" if len(keys) == 1 else f"inputs {' + '.join(repr(k) for k in keys)}"
    raise TooLong(field, over[0], over[1], limit, ("truncate", "chunk") if len(keys) == 1 else ("truncate",), setting)


def window_slices(plan, size):
    """The plan's window arrays in slices of at most ``size`` rows (a request's batch limit)."""
    n = len(plan["owner"])
    for start in range(0, n, size):
        yield {k: v[start:start + size] for k, v in plan["arrays"].items()}
