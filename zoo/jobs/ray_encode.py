"""``zoo encode --engine ray``: the encode job's chunks embedded on a Ray cluster (a local one by default,
``--address`` to join an existing one), with Ray Data: a dataset of the chunks not yet done, ``map_batches`` on an
actor pool of ``--processes`` actors, each loading one copy of the model and reading its chunks' lines itself.

The driver finds each chunk's byte offset in one pass over the file, then writes each embedded chunk to its rows of
the work folder as it arrives and records it as done, exactly as the local workers of ``zoo.jobs.encode`` do: the
same .npy and JSON come out, and a killed run resumes (with either engine). Chunks are read by offset rather than
with ``ray.data.read_text``, which splits lines on every Unicode line break (U+2028, form feed, ...) where zoo splits
on newlines only, and reads a whole file as one block. Every node must see the input file and the model at the same
paths (a shared file system); the driver alone writes the output.
"""

from __future__ import annotations

import re

import numpy as np

from ..data.pair_files import open_binary
from ..data.tasks import decode_line
from ..errors import ZooError, require
from ..logs import log
from ..vectors import quantize_embeddings
from .encode_rows import ChunkRows


def chunk_offsets(path, chunk_size):
    """Byte offset of the first line of each ``chunk_size``-line chunk (of the decompressed text for .gz)."""
    offsets, position = [], 0
    with open_binary(path) as f:
        for number, raw in enumerate(f):
            if number % chunk_size == 0:
                offsets.append(position)
            position += len(raw)
    return offsets


def read_chunk(path, offset, start, count, column=None):
    """``count`` lines from byte ``offset`` (line ``start``, 0-based), decoded as ``zoo.data.iter_lines`` does."""
    with open_binary(path) as f:
        f.seek(offset)
        return [decode_line(f.readline(), path, start + k + 1, column) for k in range(count)]


class ChunkEncoder:
    """A Ray actor: one model copy (``load(config)``); a batch of chunk descriptions -> their rows (stored dtype)
    as bytes, embedded with ``embed(model, texts, config)`` (the encode job's own functions)."""

    def __init__(self, config, ranges, threads, load, embed):
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        self.config, self.ranges, self.embed, self.model = config, ranges, embed, load(config)

    def __call__(self, batch):
        out = []
        for chunk, offset, start, count in zip(batch["chunk"], batch["offset"], batch["start"], batch["count"]):
            texts = read_chunk(self.config.input, int(offset), int(start), int(count), self.config.column)
            rows = quantize_embeddings(self.embed(self.model, texts, self.config), self.config.dtype, self.ranges)
            out.append(np.ascontiguousarray(rows).tobytes())
        return {"chunk": batch["chunk"], "start": batch["start"], "rows": np.array(out, dtype=object)}


def connect(address=None):
    """ray.init: a new local cluster, or the cluster at ``address`` ("auto": the one this node belongs to); an
    already connected process keeps its connection."""
    ray = require("ray", "ray", "zoo encode --engine ray")

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    return ray


def encode_chunks(config, work, meta, done, load, embed, on_chunk=None):
    """Embed every chunk of ``config.input`` not in ``done`` on Ray (``load`` and ``embed``: the encode job's
    functions, run in the actors), writing rows into ``work/vectors.npy`` and appending chunk numbers to
    ``work/done-ray.txt``."""
    import ray

    connect(config.address)
    lines, size = meta["lines"], config.chunk_size
    offsets = chunk_offsets(config.input, size)
    todo = [{"chunk": c, "offset": o, "start": c * size, "count": min(size, lines - c * size)}
            for c, o in enumerate(offsets) if c not in done]
    if not todo:
        return
    cpus = int(ray.cluster_resources().get("CPU", 1))
    per_actor = max(1, cpus // config.processes)
    ranges = np.asarray(meta["ranges"], dtype="float32") if "ranges" in meta else None
    log.info("ray: %d chunks on %d actors (%d CPU each, cluster of %d CPUs)", len(todo), config.processes, per_actor,
             cpus)
    dataset = ray.data.from_items(todo).map_batches(
        ChunkEncoder, fn_constructor_args=(config, ranges, per_actor, load, embed), batch_size=1, batch_format="numpy",
        concurrency=config.processes, num_cpus=per_actor)
    try:
        with ChunkRows(work, meta, "ray") as rows:
            for batch in dataset.iter_batches(batch_size=1, batch_format="numpy"):
                for chunk, start, data in zip(batch["chunk"], batch["start"], batch["rows"]):
                    written = rows.write(chunk, start, data)
                    if on_chunk is not None:
                        on_chunk(written)
    except Exception as e:  # noqa: BLE001 -- a DataError or ConfigError raised in an actor: say it plainly
        cause = _zoo_error(e)
        if cause is not None:
            raise cause from None
        if isinstance(e, ray.exceptions.RayError):
            raise ZooError(f"ray: encoding failed ({str(e).strip().splitlines()[-1]}); finished chunks are kept in "
                           f"{work}: rerun the same command to resume") from None
        raise


def _zoo_error(error):
    """The ZooError an actor raised, from the error Ray raises in the driver (a wrapper whose text holds the actor's
    traceback: "zoo.errors.DataError: file, line N: ...")."""
    from .. import errors

    if isinstance(error, errors.ZooError):
        return error
    found = re.findall(r"^zoo\.errors\.(\w+): (.+)$", str(error), flags=re.MULTILINE)
    if found and isinstance(getattr(errors, found[-1][0], None), type):
        return getattr(errors, found[-1][0])(found[-1][1])
    return None
