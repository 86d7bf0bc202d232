"""Sentence-pair data sets: the five benchmarks, your own task folders, and the texts jobs draw from them.

A **task** is a built-in benchmark (``TASKS``, in the senteval_cn layout ``TASK/senteval_cn/TASK.SPLIT.data``) or any
folder ``DATA_DIR/NAME/`` holding ``NAME.SPLIT.EXT`` or ``SPLIT.EXT`` files (SPLIT: train, valid or dev, test; EXT
any format ``zoo.data.pair_files`` reads, plain or .gz): ``load_splits(NAME, data_dir=DATA_DIR)`` (``--tasks NAME --data-dir DATA_DIR``) then works as for a
benchmark. Reading the files themselves (formats, columns, labels, bad rows) is ``zoo.data.pair_files``.
"""

from __future__ import annotations

import os

import numpy as np

from ..choices import TASKS
from ..errors import ConfigError, DataError, MissingFileError
from ..logs import log
from ..paths import DATA_DIR
from .pair_files import FORMATS, open_binary, read_pairs

SPLITS = ("train", "valid", "test")
SPLIT_NAMES = {"train": ("train",), "valid": ("valid", "dev"), "test": ("test",)}
SENTENCE_SEPARATORS = "\n。！？!?；;，, "


def task_file(task, split, data_dir):
    """Path of a task's split under ``data_dir``: ``{TASK}.{split}.data`` of a benchmark (senteval_cn layout, flat,
    or zoo's data/), or a file of your own task folder ``data_dir/TASK/`` (``custom_task_file``)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {SPLITS}")
    if task not in TASKS:
        return custom_task_file(task, split, data_dir)
    names = [f"{task}.{split}.data"]
    if task == "ATEC" and split == "train":
        names.append("ATEC.train-substitute.data")  # the clean stand-in when upstream train is absent
    tried = []
    for name in names:
        for folder in (os.path.join(data_dir, task, "senteval_cn"), os.path.join(data_dir, task), data_dir):
            for candidate in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
                tried.append(candidate)
                if os.path.exists(candidate):
                    return candidate
    raise MissingFileError(f"no {task} {split} file under {data_dir} (tried {tried[:3]} ...)")


def custom_task_file(task, split, data_dir):
    """The ``split`` file of your own task: ``data_dir/TASK/`` (or its ``senteval_cn/``) holding ``TASK.SPLIT.EXT`` or
    ``SPLIT.EXT`` (``dev`` for valid too; any format of ``zoo.data.pair_files``, plain or .gz), or a folder of shards
    named so. ConfigError when there is no such task folder, MissingFileError naming what was looked for."""
    folder = os.path.join(data_dir or DATA_DIR, task)
    if not os.path.isdir(folder):
        raise ConfigError(f"unknown task {task!r}: no folder {folder}; known: {', '.join(TASKS)}, or a folder of "
                          f"yours under data_dir holding {task}.train.csv, {task}.valid.csv, ...", param="data_dir")
    for where in (os.path.join(folder, "senteval_cn"), folder):
        if not os.path.isdir(where):
            continue
        for name in sorted(os.listdir(where)):
            stem = name[:-3] if name.endswith(".gz") else name
            stem, ext = os.path.splitext(stem)
            if (ext in FORMATS or os.path.isdir(os.path.join(where, name))) and \
                    stem in [f"{task}.{s}" for s in SPLIT_NAMES[split]] + list(SPLIT_NAMES[split]):
                return os.path.join(where, name)
    raise MissingFileError(f"no {task} {split} file in {folder} (looked for {task}.{split}.EXT or {split}.EXT, EXT: "
                           f"{', '.join(FORMATS)}, or .gz of these)")


def is_task(task, data_dir=None):
    """Whether ``task`` is a benchmark or a folder of yours under ``data_dir`` (default: zoo's data/)."""
    return task in TASKS or os.path.isdir(os.path.join(data_dir or DATA_DIR, task))


def default_data_dir():
    """zoo's embedded data/ folder (LCQMC only), or ``$ZOO_DATA_DIR``."""
    return DATA_DIR


def resolve_data_dir(task, data_dir=None):
    """``data_dir`` if given, else zoo's embedded data/ (LCQMC), else ../shared/data next to the repository."""
    if data_dir:
        return data_dir
    candidates = [DATA_DIR, os.path.join(os.path.dirname(DATA_DIR), "..", "shared", "data")]
    for candidate in candidates:
        try:
            task_file(task, "valid", candidate)
            return candidate
        except (FileNotFoundError, ConfigError):
            continue
    raise MissingFileError(f"no {task} data in {candidates}; pass data_dir")


def load_task(task, split, data_dir=None, skip_bad_lines=False, files=None, columns=None, labels="auto"):
    """A split of a task as a PairDataset: ``files[split]`` when given (your file or folder of shards), else the
    task's file under ``data_dir`` (``task_file``).

    :param task: a task name (``TASKS``: LCQMC, ATEC, BQ, PAWSX, STS-B, ...).
    :param split: "train", "valid" or "test".
    :param data_dir: the folder of the task files (None: ``DATA_DIR``).
    :param skip_bad_lines: as ``read_pairs``'.
    :param files: {split: path} of your own files.
    :param columns: as ``read_pairs``'.
    :param labels: as ``read_pairs``'.
    """
    path = (files or {}).get(split) or task_file(task, split, data_dir or DATA_DIR)
    return read_pairs(path, skip_bad_lines=skip_bad_lines, columns=columns, labels=labels)


def load_splits(task, data_dir=None, limit_train=None, splits=SPLITS, limit_eval=None, **reading):
    """{split: PairDataset} of a task, train cut to its first ``limit_train`` pairs and valid / test to their
    first ``limit_eval``, logging a summary of each ("the first 200 of 8,802 pairs", the format, the label kind);
    ``data_dir`` as in ``resolve_data_dir``; ``reading``: ``files``, ``columns``, ``labels``, ``skip_bad_lines``
    of ``load_task`` (``DataOptions.reading`` gives them from the flags)."""
    files = reading.get("files") or {}
    data_dir = data_dir if all(s in files for s in splits) else resolve_data_dir(task, data_dir)
    data = {split: load_task(task, split, data_dir, **reading) for split in splits}
    for split in data:
        data[split] = data[split].head(limit_train if split == "train" else limit_eval)
    for split, d in data.items():
        log.info("%s %s: %s", task, split, d.summary())
        if d.bad_lines:
            log.warning("%s %s: %d bad lines skipped (skip_bad_lines): %s", task, split, d.bad_lines,
                        ", ".join(map(str, d.bad_line_numbers[:10])) + (" ..." if d.bad_lines > 10 else ""))
    return data


def read_synonym_groups(path):
    """SimBERT's JSON lines ``{"text": ..., "synonyms": [...]}`` -> list of groups (lists of >= 2 texts).

    A line that is not valid JSON, lacks ``text``, or has a non-list ``synonyms`` raises DataError with the line.
    Groups with fewer than two distinct texts are skipped (nothing to pair).
    """
    import json

    groups = []
    with open_binary(os.fspath(path)) as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                item = json.loads(raw.decode("utf-8"))
                texts = [item["text"], *item.get("synonyms", [])]
                if not isinstance(item.get("synonyms", []), list) or not all(isinstance(t, str) for t in texts):
                    raise TypeError("'text' must be a string and 'synonyms' a list of strings")
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                raise DataError(f"{path}, line {number}: {type(e).__name__}: {e}") from None
            texts = list(dict.fromkeys(t for t in texts if t.strip()))
            if len(texts) >= 2:
                groups.append(texts)
    return groups


def is_synonym_file(path):
    """Whether ``path`` holds SimBERT's groups (JSON lines whose first object has ``synonyms``), not pairs."""
    if not os.fspath(path).lower().removesuffix(".gz").endswith(".jsonl") or os.path.isdir(path):
        return False
    import json

    with open_binary(os.fspath(path)) as f:
        for raw in f:
            if raw.strip():
                try:
                    item = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    return False
                return isinstance(item, dict) and "synonyms" in item
    return False


def training_groups(path, **reading):
    """SimBERT's groups of similar sentences from a file of yours: groups as JSON lines (``read_synonym_groups``),
    or pairs in any format (``read_pairs``; ``reading``: its columns, labels, skip_bad_lines) whose positives are
    joined into groups (``groups_from_positive_pairs``)."""
    if is_synonym_file(path):
        return read_synonym_groups(path)
    pairs = read_pairs(path, **reading)
    if pairs.graded:
        raise DataError(f"{path}: graded labels; groups of similar sentences need 0/1 pairs (or JSON lines of "
                        '{"text": ..., "synonyms": [...]})')
    log.info("%s: %s; its positive pairs form the groups", path, pairs.summary())
    return groups_from_positive_pairs(pairs)


def groups_from_positive_pairs(*datasets):
    """Groups of similar sentences: connected components of the label-1 pairs (union-find over texts).

    The default SimBERT training data: the positive pairs of the LCQMC and BQ train splits.
    """
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for d in datasets:
        for a, b, y in zip(d.texts_a, d.texts_b, d.labels):
            if y == 1 and a != b:
                parent[find(a)] = find(b)
    groups = {}
    for text in parent:
        groups.setdefault(find(text), []).append(text)
    return [g for g in groups.values() if len(g) >= 2]


def available_tasks(tasks, data_dir=None):
    """{task: data folder} of those of ``tasks`` whose files can be found (the others are left out)."""
    found = {}
    for task in tasks:
        try:
            found[task] = resolve_data_dir(task, data_dir)
        except FileNotFoundError:
            pass
    return found


def sample_train_texts(tasks, n, seed=0):
    """``n`` texts drawn at random (without replacement, fixed by ``seed``) from the train splits of ``tasks``
    ({task: data folder}, as ``available_tasks`` gives)."""
    return sample_texts([t for task, folder in tasks.items() for t in load_task(task, "train", folder).texts], n, seed)


def sample_texts(texts, n, seed=0):
    """``n`` of ``texts`` drawn at random without replacement (fixed by ``seed``), in the order drawn."""
    rng = np.random.default_rng(seed)
    return [texts[i] for i in rng.choice(len(texts), min(n, len(texts)), replace=False)]


def positive_pair_groups(tasks, data_dir=None):
    """SimBERT's default groups: ``groups_from_positive_pairs`` over the train splits of ``tasks`` (0/1 tasks) ->
    (groups, {"TASK.train": path}); a task whose train split is missing is left out with a warning."""
    sources, files = [], {}
    for task in tasks:
        try:
            d = load_task(task, "train", resolve_data_dir(task, data_dir))
        except FileNotFoundError:
            log.warning("no %s train split found: its positives are left out of the groups", task)
            continue
        if d.labels.max() > 1:
            raise DataError(f"{d.path}: {task} has graded labels; groups of similar sentences need 0/1 pairs")
        sources.append(d)
        files[f"{task}.train"] = d.path
    return groups_from_positive_pairs(*sources), files


def truncate_at_punctuation(text, maxchars):
    """SimBERT's cut: a text over ``maxchars`` keeps its first clause that fits (split at 。！？；，...), else a hard cut."""
    if len(text) <= maxchars:
        return text
    head = text[:maxchars]
    cut = max(head.rfind(c) for c in SENTENCE_SEPARATORS)
    return head[:cut].strip() or head if cut > 0 else head


# ---------------------------------------------------------------------------------- one text per line
def iter_lines(path, column=None):
    """(line number, text) of a UTF-8 text file (plain or .gz), read lazily; with ``column`` N, the text is the
    line's N-th TAB-separated field (1-based). DataError names a bad line."""
    with open_binary(path) as f:
        for number, raw in enumerate(f, start=1):
            yield number, decode_line(raw, path, number, column)


def decode_line(raw, path, number, column=None):
    """Line ``number`` (1-based) of ``path`` as bytes -> its text without the line end, or with ``column`` N its
    N-th TAB-separated field; DataError names the file and line."""
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}, line {number}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
    if column is None:
        return text
    fields = text.split("\t")
    if len(fields) < column:
        raise DataError(f"{path}, line {number}: {len(fields)} TAB-separated field(s), no column {column}")
    return fields[column - 1]


def read_lines(path, column=None):
    """Every line (or its ``column``-th TAB-separated field) of a UTF-8 text file (plain or .gz) in memory;
    DataError names a bad line or an empty file."""
    lines = [text for _, text in iter_lines(path, column)]
    if not lines:
        raise DataError(f"{path}: no lines to encode")
    return lines


def count_lines(path):
    """Lines of a text file (the last one may lack its newline), counted in 1 MiB blocks."""
    n, last = 0, b"\n"
    with open_binary(path) as f:
        while block := f.read(1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def iter_chunks(path, chunk_size, column=None):
    """(chunk index, first line's index, texts) of consecutive ``chunk_size``-line chunks (``iter_lines``)."""
    chunk, start = [], 0
    for number, text in iter_lines(path, column):
        chunk.append(text)
        if len(chunk) == chunk_size:
            yield (number - 1) // chunk_size, start, chunk
            chunk, start = [], number
    if chunk:
        yield start // chunk_size, start, chunk
