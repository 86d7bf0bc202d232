"""Sentence-pair datasets: the senteval_cn layout and the original LCQMC tsv, plain or gzip.

One line is ``text_a<TAB>text_b<TAB>label``. A header line (``text_a  text_b  label`` or ``sentence1 ...``)
is skipped. **Quoting**: some senteval_cn files (ATEC, BQ, PAWSX) were written with CSV-style quoting: a field
containing ``"`` is wrapped in ``"..."`` with inner quotes doubled. zoo undoes that quoting (like Python's
``csv`` module), so ``"免费领取""饿了么""红包"`` reads as ``免费领取"饿了么"红包``, the original text. A field
is unquoted only when it starts and ends with ``"`` and every inner ``"`` is doubled; anything else is kept as is.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass, field

import numpy as np

from .errors import DataError, MissingFileError
from .logs import log
from .paths import DATA_DIR

TASKS = ("LCQMC", "ATEC", "BQ", "PAWSX", "STS-B")
SPLITS = ("train", "valid", "test")
HEADER_FIRST_FIELDS = {"text_a", "sentence1", "s1", "text1", "query1"}
SENTENCE_SEPARATORS = "\n。！？!?；;，, "


@dataclass
class PairDataset:
    """Text pairs with numeric labels, plus what reading them found."""

    texts_a: list
    texts_b: list
    labels: np.ndarray
    path: str = ""
    bad_lines: int = 0
    duplicates: int = 0
    bad_line_numbers: list = field(default_factory=list)
    total: int | None = None  # pairs in the file, when this holds only the first ones (``head``)

    def __len__(self):
        return len(self.labels)

    def head(self, n):
        """The first ``n`` pairs (``--limit-train``, ``--limit-eval``); ``summary`` says how many of how many."""
        if n is None or n >= len(self):
            return self
        return PairDataset(self.texts_a[:n], self.texts_b[:n], self.labels[:n], self.path, total=self.total or len(self))

    @property
    def texts(self):
        """Every distinct text, in order of first appearance."""
        return list(dict.fromkeys(self.texts_a + self.texts_b))

    def summary(self):
        if self.total is not None:
            return f"{os.path.basename(self.path)}: the first {len(self):,} of {self.total:,} pairs"
        return (f"{os.path.basename(self.path)}: {len(self):,} pairs, {self.duplicates} duplicate rows, "
                f"{self.bad_lines} bad lines skipped")


def unquote_csv_field(text):
    """Undo CSV quoting of one field (see the module docstring)."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        inner = text[1:-1]
        if inner.replace('""', "").count('"') == 0:
            return inner.replace('""', '"')
    return text


def open_binary(path):
    """A file opened for binary reading, gunzipped when its name ends in .gz."""
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


def iter_pairs(path, skip_bad_lines=False, bad=None):
    """Yield ``(text_a, text_b, label)`` of a pair file one line at a time (``read_pairs`` without the memory).

    A bad line (not 3 TAB-separated fields, label not a number, invalid UTF-8) raises DataError naming the file
    and line, unless ``skip_bad_lines=True``: then its number is appended to ``bad`` (a list) and it is skipped."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise MissingFileError(f"{path}: data file not found")
    with open_binary(path) as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                problem = f"invalid UTF-8 ({e.reason} at byte {e.start})"
            else:
                line = line.rstrip("\r\n")
                if number == 1:
                    line = line.lstrip("\ufeff")
                if not line.strip():
                    continue
                fields = line.split("\t")
                if number == 1 and fields[0].strip().lower() in HEADER_FIRST_FIELDS:
                    continue
                if len(fields) != 3:
                    problem = f"expected 3 TAB-separated fields, found {len(fields)}"
                else:
                    try:
                        label = float(fields[2])
                        problem = None if np.isfinite(label) else f"label {fields[2]!r} is not finite"
                    except ValueError:
                        problem = f"label {fields[2]!r} is not a number"
            if problem is not None:
                if not skip_bad_lines:
                    raise DataError(f"{path}, line {number}: {problem}")
                if bad is not None:
                    bad.append(number)
                continue
            yield unquote_csv_field(fields[0]), unquote_csv_field(fields[1]), label


def read_pairs(path, skip_bad_lines=False):
    """Read a pair file (``.data``/``.tsv``/``.txt``, optionally ``.gz``) into a PairDataset.

    A bad line (not 3 TAB-separated fields, label not a number, invalid UTF-8) raises DataError naming the
    file and line, unless ``skip_bad_lines=True``: then it is skipped and counted (``bad_lines``).
    Exact duplicate rows are kept and counted (``duplicates``).
    """
    path = os.fspath(path)
    texts_a, texts_b, labels, bad = [], [], [], []
    seen, duplicates = set(), 0
    for row in iter_pairs(path, skip_bad_lines, bad):
        if row in seen:
            duplicates += 1
        seen.add(row)
        texts_a.append(row[0])
        texts_b.append(row[1])
        labels.append(row[2])
    if not labels:
        raise DataError(f"{path}: no sentence pairs in the file" + (f" ({len(bad)} bad lines skipped)" if bad else ""))
    return PairDataset(texts_a, texts_b, np.asarray(labels, dtype="float32"), path,
                       bad_lines=len(bad), duplicates=duplicates, bad_line_numbers=bad)


def task_file(task, split, data_dir):
    """Path of ``{TASK}.{split}.data`` under ``data_dir`` (senteval_cn layout, flat, or zoo's data/)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {TASKS}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {SPLITS}")
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
        except FileNotFoundError:
            continue
    raise MissingFileError(f"no {task} data in {candidates}; pass data_dir")


def load_task(task, split, data_dir=None, skip_bad_lines=False):
    return read_pairs(task_file(task, split, data_dir or DATA_DIR), skip_bad_lines=skip_bad_lines)


def load_splits(task, data_dir=None, limit_train=None, splits=SPLITS, limit_eval=None):
    """{split: PairDataset} of a task, train cut to its first ``limit_train`` pairs and valid / test to their
    first ``limit_eval``, logging a summary of each ("the first 200 of 8,802 pairs"); ``data_dir`` as in
    ``resolve_data_dir``."""
    data_dir = resolve_data_dir(task, data_dir)
    data = {split: load_task(task, split, data_dir) for split in splits}
    for split in data:
        data[split] = data[split].head(limit_train if split == "train" else limit_eval)
    for split, d in data.items():
        log.info("%s %s: %s", task, split, d.summary())
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
    texts = [t for task, folder in tasks.items() for t in load_task(task, "train", folder).texts]
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
