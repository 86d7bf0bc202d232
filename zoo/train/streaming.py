"""Pair batches read lazily from files of any size (``StreamingPairBatches``): memory holds one shuffle buffer, not the
split; a batch source as ``zoo.train.batches`` describes them."""

from __future__ import annotations

import math
import os

import numpy as np

from ..data.pair_files import iter_pairs
from ..errors import ConfigError
from ..logs import log
from .batches import pair_batch



class StreamingPairBatches:
    """``PairBatches`` read lazily from pair files (``.data``/``.tsv``, optionally ``.gz``; files or folders of
    them), for train splits larger than memory: memory holds one buffer of texts, whatever the files' size.

    An epoch reads the files (in an order fixed by (seed, epoch)) into a buffer of ``window`` batches; each buffer
    is shuffled, sorted by text length in characters (``length_buckets``; characters, so that a resumed run skips
    the batches before its step without tokenising them), cut into batches, and its batches shuffled. Only the batches
    that train are tokenised, in the engine's background producer, which overlaps the training step. The batches
    of an epoch are a fixed function of (seed, epoch): a killed run resumes (it reads the files again up to its
    step). ``labels``: a function applied to each batch's labels (e.g. the objective's scaling). One counting pass
    at construction gives ``n`` and checks every line (a bad one raises DataError naming file and line)."""

    def __init__(self, tokenizer, paths, batch_size, maxlen, labels=None, window=50, length_buckets=True, joint=False,
                 zero_segments=False, limit=None, columns=None, label_kind="auto", skip_bad_lines=False):
        self.tokenizer, self.batch_size, self.maxlen, self.window = tokenizer, batch_size, maxlen, window
        self.reading = {"columns": columns, "labels": label_kind, "skip_bad_lines": skip_bad_lines}
        self.length_buckets = length_buckets
        self.joint, self.zero_segments, self.label_fn, self.limit = joint, zero_segments, labels, limit
        self.paths = pair_files(paths)
        self.n, self.max_label = 0, -np.inf
        for _, _, label in self.rows(range(len(self.paths))):
            self.n += 1
            self.max_label = max(self.max_label, label)
        if self.n == 0:
            raise ConfigError(f"no training pairs in {self.paths}")
        log.info("streaming %d train pairs from %d file(s)", self.n, len(self.paths))

    def __len__(self):
        return math.ceil(self.n / self.batch_size)

    def rows(self, order):
        """(text_a, text_b, label) of the files in ``order``, up to ``limit`` pairs."""
        count = 0
        for k in order:
            for row in iter_pairs(self.paths[k], **self.reading):
                if self.limit is not None and count >= self.limit:
                    return
                count += 1
                yield row

    def buffers(self, rng):
        order = rng.permutation(len(self.paths)) if len(self.paths) > 1 else [0]
        buffer, size = [], self.window * self.batch_size
        for row in self.rows(order):
            buffer.append(row)
            if len(buffer) == size:
                yield buffer
                buffer = []
        if buffer:
            yield buffer

    def epoch(self, seed, epoch, start_step=0):
        rng = np.random.default_rng([seed, epoch])
        step = 0
        for buffer in self.buffers(rng):
            order = rng.permutation(len(buffer))
            if self.length_buckets:
                chars = np.array([len(a) + len(b) if self.joint else max(len(a), len(b)) for a, b, _ in buffer])
                order = order[np.argsort(chars[order], kind="stable")]
            batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
            for j in rng.permutation(len(batches)):
                if step >= start_step:
                    yield step, *self.make_batch([buffer[i] for i in batches[j]])
                step += 1

    def make_batch(self, rows):
        labels = np.array([r[2] for r in rows], "float32")
        return pair_batch(self.tokenizer, self.tokenizer.piece_ids([r[0] for r in rows]),
                          self.tokenizer.piece_ids([r[1] for r in rows]),
                          labels if self.label_fn is None else self.label_fn(labels), self.maxlen, self.joint,
                          self.zero_segments)


def streamed_pairs(tokenizer, task, batch_size, maxlen, label_fn, data_dir=None, files=None, columns=None,
                   labels="auto", skip_bad_lines=False, **kwargs):
    """``StreamingPairBatches`` over ``files["train"]`` (your file, folder or list of them), or else ``task``'s
    train file (in ``data_dir``, as ``zoo.data.resolve_data_dir``); ``label_fn(y, graded)`` maps each batch's labels
    (``graded``: the files hold labels above 1, as STS-B's 0-5, or ``labels="graded"``); ``columns``, ``labels``,
    ``skip_bad_lines`` as ``zoo.data.read_pairs`` (``DataOptions.reading`` gives them); ``kwargs`` go to
    ``StreamingPairBatches`` (``limit``, ``length_buckets``, ``joint``, ...)."""
    from ..data.tasks import resolve_data_dir, task_file

    paths = (files or {}).get("train") or [task_file(task, "train", resolve_data_dir(task, data_dir))]
    source = StreamingPairBatches(tokenizer, paths, batch_size, maxlen, columns=columns, label_kind=labels,
                                  skip_bad_lines=skip_bad_lines, **kwargs)
    graded = source.max_label > 1 or labels == "graded"
    source.label_fn = lambda y: label_fn(y, graded)
    return source


def pair_files(paths):
    """Files of ``paths`` (files, or folders whose files are read in name order); ConfigError naming a missing
    one."""
    files = []
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        path = os.fspath(path)
        if os.path.isdir(path):
            files += sorted(os.path.join(path, f) for f in os.listdir(path)
                            if os.path.isfile(os.path.join(path, f)) and not f.startswith("."))
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise ConfigError(f"paths: {path} not found")
    if not files:
        raise ConfigError(f"paths: no files in {paths}")
    return files
