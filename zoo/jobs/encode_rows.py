"""The encode job's work folder, written by chunks: each embedded chunk goes straight to its rows of
``WORK/vectors.npy`` (a file write at its offset, not a mapping) and is then recorded in ``WORK/done-NAME.txt``,
both fsynced, so a killed run resumes at the first chunk not recorded. The local workers (``zoo.jobs.encode``) and
the Ray driver (``zoo.jobs.ray_encode``) write through the same ``ChunkRows``."""

from __future__ import annotations

import glob
import os

import numpy as np


def done_chunks(work):
    """The chunk numbers recorded as done in any ``done-*.txt`` of ``work``."""
    done = set()
    for path in glob.glob(os.path.join(work, "done-*.txt")):
        with open(path, encoding="utf-8") as f:
            done.update(int(line) for line in f if line.strip().isdigit())
    return done


class ChunkRows:
    """``with ChunkRows(work, meta, name) as rows: rows.write(chunk, start, data)`` writes ``data`` (bytes of
    stored-dtype rows) at row ``start`` of ``work/vectors.npy`` and records ``chunk`` in ``work/done-{name}.txt``;
    returns the number of rows written."""

    def __init__(self, work, meta, name):
        path = os.path.join(work, "vectors.npy")
        with open(path, "rb") as f:
            np.lib.format.read_magic(f)
            np.lib.format.read_array_header_1_0(f)
            self.header = f.tell()
        self.row_bytes = meta["shape"][1] * np.dtype(meta["stored_dtype"]).itemsize
        self.fd = os.open(path, os.O_WRONLY)
        self.log = open(os.path.join(work, f"done-{name}.txt"), "a", encoding="utf-8")

    def write(self, chunk, start, data):
        os.pwrite(self.fd, data, self.header + int(start) * self.row_bytes)
        os.fsync(self.fd)
        self.log.write(f"{int(chunk)}\n")
        self.log.flush()
        os.fsync(self.log.fileno())
        return len(data) // self.row_bytes

    def close(self):
        self.log.close()
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
