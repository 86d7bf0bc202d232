"""Small shared helpers: progress bars, batch padding lengths, run metadata, atomic JSON."""

from __future__ import annotations

import json
import os
import sys

BUCKET = 8  # pad batches to a multiple of this many tokens: few distinct shapes for XLA


def batch_length(rows, maxlen=None):
    """Padded length for a batch of (ids, segments) rows: the longest row rounded up to a multiple of 8."""
    longest = max(len(r[0]) for r in rows)
    length = -(-longest // BUCKET) * BUCKET
    return min(length, max(maxlen, longest)) if maxlen else length


def progress(iterable, desc, enabled=True, total=None, **kwargs):
    """A tqdm bar (with rates) when enabled, else the iterable itself."""
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    kwargs.setdefault("mininterval", 0.5 if sys.stderr.isatty() else 30.0)  # logs get a line every 30 s
    return tqdm(iterable, desc=desc, total=total, file=sys.stderr, dynamic_ncols=True, **kwargs)


def batch_starts(n, batch_size, desc, enabled=None, unit="it"):
    """Start offsets of the batches over ``n`` items; the bar (shown by default past 20 batches) counts items,
    so its total and rate are exact when the last batch is short."""
    starts = range(0, n, batch_size)
    bar = progress(None, desc, len(starts) > 20 if enabled is None else enabled, total=n, unit=unit)
    for start in starts:
        yield start
        if bar is not None:
            bar.update(min(batch_size, n - start))
    if bar is not None:
        bar.close()


def versions():
    """Versions of the packages that decide a result."""
    import importlib.metadata as md

    import keras

    out = {"python": sys.version.split()[0], "keras_backend": keras.backend.backend()}
    for name in ("zoo", "keras", "keras-hub", "tensorflow", "jax", "numpy", "tokenizers", "scipy", "torch"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def write_json_atomic(path, obj):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False, default=_json_default)
        f.write("\n")
    os.replace(tmp, path)


def write_text_atomic(path, text):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def save_results(output, results, table):
    """Write ``output/results.json`` (the command line and package versions first) and ``output/results.md``
    (``table``), print the table, and return the full results dict."""
    results = {"command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), "versions": versions(),
               **results}
    write_json_atomic(os.path.join(output, "results.json"), results)
    write_text_atomic(os.path.join(output, "results.md"), table)
    print(table, file=sys.stderr)
    return results
