"""Raw text for pretraining: corpus files in the formats of ``shared/data/corpus`` and the train-split texts of
the sentence-pair tasks, as de-duplicated documents."""

from __future__ import annotations

import csv
import functools
import gzip
import os
import re

import numpy as np

SENTENCE_END = re.compile(r"(?<=[。！？!?；;\n])")


def _lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        yield from f


def iter_documents(path):
    """Documents of one corpus file, one at a time, by its format (see the shared data README): plain one-per-line,
    ``label\\ttext``, CSV with a ``review`` column, ``_!_``-separated chineseGLUE files, and People's Daily
    ``word/POS`` text."""
    path = os.fspath(path)
    name = os.path.basename(path).replace(".gz", "")
    if name.endswith(".csv"):
        for row in csv.DictReader(_lines(path)):
            if row.get("review"):
                yield row["review"].lstrip("\ufeff")
        return
    for line in _lines(path):
        line = line.rstrip("\n")
        if "_!_" in line:  # inews: label_!_id_!_title_!_content ; iflytek: label_!_text
            parts = line.split("_!_", 3)
            line = "。".join(p for p in parts[2:] if p) if len(parts) == 4 else parts[-1]
        elif name == "199801.txt":  # word/POS tokens separated by two spaces; [..]nt compounds
            words = [w.rsplit("/", 1)[0].lstrip("[") for w in line.split()]
            line = "".join(w for w in words[1:] if w) if words and re.match(r"^\d{8}-", words[0]) else "".join(words)
        elif re.match(r"^\d+\t", line):  # label<TAB>text
            line = line.split("\t", 1)[1]
        if line.strip():
            yield line.strip()


def read_documents(path):
    """Every document of one corpus file (``iter_documents`` as a list)."""
    return list(iter_documents(path))


def corpus_files(paths):
    """The corpus files of files or folders (folders recursively, in name order); FileNotFoundError naming a
    missing one."""
    files = []
    for p in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            files += sorted(os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs
                            if f.endswith((".txt", ".csv", ".txt.gz", ".csv.gz")))
        elif os.path.exists(p):
            files.append(p)
        else:
            raise FileNotFoundError(f"{p}: corpus file or folder not found")
    return files


def read_corpus(paths):
    """Documents from files or folders (recursively), de-duplicated with whitespace ignored."""
    return unique_documents(d for f in corpus_files(paths) for d in read_documents(f))


def document_sources(corpus, tasks=(), data_dir=None):
    """The pretraining text as sources to read lazily: ``(name, documents)`` per corpus file and per task train
    split (``documents()`` yields that source's documents, a task's as ``a\\nb``); for
    ``zoo.masking.StreamingPretrainingBatches``."""
    from .data import resolve_data_dir, task_file

    sources = [(f, functools.partial(iter_documents, f)) for f in corpus_files(corpus)]
    for task in tasks:
        path = task_file(task, "train", resolve_data_dir(task, data_dir))
        sources.append((path, functools.partial(_pair_documents, path)))
    return sources


def _pair_documents(path):
    from .data import iter_pairs

    return (f"{a}\n{b}" for a, b, _ in iter_pairs(path))


def unique_documents(docs):
    """Documents in order, without repeats (whitespace ignored) or empty ones."""
    seen, out = set(), []
    for d in docs:
        key = re.sub(r"\s+", "", d)
        if key and key not in seen:
            seen.add(key)
            out.append(d)
    return out


def task_documents(tasks, data_dir=None):
    """The **train** split texts of sentence-pair tasks as two-sentence documents ``a\\nb`` (no labels), as the
    reference checkpoints were pretrained; valid and test texts are never read."""
    from .data import load_task, resolve_data_dir

    docs = []
    for task in tasks:
        train = load_task(task, "train", resolve_data_dir(task, data_dir))
        docs += [f"{a}\n{b}" for a, b in zip(train.texts_a, train.texts_b)]
    return docs


def anisotropy_sentences(docs, n=1000, min_chars=5, seed=0):
    """A fixed sample of ``n`` sentences (at least ``min_chars`` characters) of the documents, for
    ``token_self_similarity`` before and after pretraining."""
    sentences = [t.strip() for d in docs for t in SENTENCE_END.split(d) if len(t.strip()) >= min_chars]
    index = np.random.default_rng(seed).permutation(len(sentences))[:n]
    return [sentences[i] for i in sorted(index)]
