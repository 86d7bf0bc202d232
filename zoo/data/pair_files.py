"""Pair files in any common format, with any column names: the one reader behind every job and ``zoo.data.read_pairs``.

**Formats**, by extension (each may end in ``.gz``, Parquet excepted): ``.data`` / ``.tsv`` / ``.txt``: TAB-separated,
a header line optional (detected: a first line naming known columns); ``.csv``: comma-separated with a header line,
quoted fields holding commas, quotes and newlines (Python's ``csv``); ``.jsonl``: one JSON object per line;
``.json``: the same JSON lines (CLUE's train.json / dev.json), or one JSON array of objects; ``.parquet``: a table (``pip install 'zoo[parquet]'``). A path that is a folder reads its files in name order
(shards).

**Columns** are roles: ``text_a``, ``text_b``, ``label`` for pairs, ``anchor``, ``positive``, ``negative`` for triplets.
Without ``columns``, common names are recognised (``COLUMN_NAMES``: sentence1/sentence2/label, text_a/text_b,
q1/q2, query/positive/negative, score, ...); ``columns={"text_a": "question", ...}`` (``--columns
text_a=question,...``) names them, by header name or, for a TAB file without a header, by 1-based position.
A headerless TAB file is ``text_a<TAB>text_b<TAB>label`` (the senteval_cn and LCQMC layout).

**Triplets** (anchor, positive, negative) read as two pairs each, (anchor, positive, 1) and (anchor, negative, 0),
adjacent: the in-batch ranking loss ranks each positive above the batch's other texts, its own hard negative
included. **Labels** are numbers: 0/1 ("binary") or graded (STS-B's 0-5); ``labels="auto"`` detects which and the
log says so; ``"binary"`` refuses any other value, naming the line.

**Quoting** in TAB files: some senteval_cn files (ATEC, BQ, PAWSX) were written with CSV-style quoting: a field
containing ``"`` is wrapped in ``"..."`` with inner quotes doubled. zoo undoes that quoting (like Python's ``csv``
module), so ``"免费领取""饿了么""红包"`` reads as ``免费领取"饿了么"红包``, the original text. A field is unquoted
only when it starts and ends with ``"`` and every inner ``"`` is doubled; anything else is kept as is.

**Bad rows** (a missing or empty text, an unparsable label, a line that is not JSON) raise DataError naming the file,
line and column, unless ``skip_bad_lines``: then they are skipped and counted. A missing column, or a file with no
pairs at all, raises DataError whatever ``skip_bad_lines`` says.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..choices import PAIR_FILE_FORMATS
from ..errors import DataError, MissingFileError, require

FORMATS = PAIR_FILE_FORMATS
PAIR_ROLES = ("text_a", "text_b", "label")
TRIPLET_ROLES = ("anchor", "positive", "negative")
COLUMN_NAMES = {  # role -> the column names recognised without ``columns`` (lower case)
    "text_a": ("text_a", "sentence1", "sentence_a", "s1", "text1", "q1", "query1", "question1", "sent1"),
    "text_b": ("text_b", "sentence2", "sentence_b", "s2", "text2", "q2", "query2", "question2", "sent2"),
    "label": ("label", "score", "similarity", "labels", "relevance"),
    "anchor": ("anchor", "query", "question"),
    "positive": ("positive", "pos", "positive_text"),
    "negative": ("negative", "neg", "negative_text", "hard_negative"),
}
LABEL_KINDS = ("auto", "binary", "graded")


@dataclass
class PairDataset:
    """Text pairs with numeric labels, plus what reading them found (``read_pairs`` and ``load_task`` make them).

    ```python
    data = zoo.data.read_pairs("train.csv")          # any format, any column names
    data.texts_a[0], data.texts_b[0], data.labels[0]
    print(data.summary())   # train.csv (csv): 8,802 pairs, labels 0/1, 0 duplicate rows, 0 bad lines skipped
    ```

    :param texts_a: the first texts.
    :param texts_b: the second texts.
    :param labels: float32 [n]: 0/1, or graded (e.g. STS-B's 0-5).
    :param path: the file or folder read.
    :param bad_lines: rows skipped (``skip_bad_lines``).
    :param duplicates: exact duplicate rows (kept).
    :param bad_line_numbers: where the skipped rows were.
    :param total: pairs in the file, when this holds only the first ones (``head``).
    :param format: tsv, csv, jsonl, json or parquet.
    :param triplets: rows read as (anchor, positive, negative): 2 pairs each.
    :param label_kind: "binary" (0/1) or "graded".
    """

    texts_a: list
    texts_b: list
    labels: np.ndarray
    path: str = ""
    bad_lines: int = 0
    duplicates: int = 0
    bad_line_numbers: list = field(default_factory=list)
    total: int | None = None  # pairs in the file, when this holds only the first ones (``head``)
    format: str = ""  # tsv, csv, jsonl, parquet
    triplets: int = 0  # rows read as (anchor, positive, negative): 2 pairs each
    label_kind: str = ""  # binary (0/1) or graded

    def __len__(self):
        return len(self.labels)

    def head(self, n):
        """The first ``n`` pairs; ``summary`` says how many of how many.

        :param n: how many (None: all).
        """
        if n is None or n >= len(self):
            return self
        return PairDataset(self.texts_a[:n], self.texts_b[:n], self.labels[:n], self.path, self.bad_lines,
                           bad_line_numbers=self.bad_line_numbers, total=self.total or len(self), format=self.format,
                           triplets=self.triplets, label_kind=self.label_kind)

    @property
    def texts(self):
        """Every distinct text, in order of first appearance."""
        return list(dict.fromkeys(self.texts_a + self.texts_b))

    @property
    def graded(self):
        return self.label_kind == "graded"

    def summary(self):
        name = os.path.basename(os.path.normpath(self.path))
        kind = {"binary": "labels 0/1", "graded": f"graded labels {self.labels.min():g}-{self.labels.max():g}"}.get(
            self.label_kind, "")
        if self.total is not None:
            return f"{name}: the first {len(self):,} of {self.total:,} pairs, {kind}"
        rows = f" from {self.triplets:,} triplets" if self.triplets else ""
        return (f"{name} ({self.format}): {len(self):,} pairs{rows}, {kind}, {self.duplicates} duplicate rows, "
                f"{self.bad_lines} bad lines skipped")


def unquote_csv_field(text):
    """Undo CSV quoting of one field of a TAB file (see the module docstring)."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        inner = text[1:-1]
        if inner.replace('""', "").count('"') == 0:
            return inner.replace('""', '"')
    return text


def open_binary(path):
    """A file opened for binary reading, gunzipped when its name ends in .gz."""
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


def file_format(path):
    """tsv, csv, jsonl, json or parquet, by the extension of ``path`` (a trailing .gz aside); DataError for another."""
    name = os.fspath(path).lower()
    name = name[:-3] if name.endswith(".gz") else name
    ext = os.path.splitext(name)[1]
    if ext not in FORMATS:
        raise DataError(f"{path}: unknown pair-file format {ext or '(no extension)'!r}; known: "
                        f"{', '.join(FORMATS)} (each may end in .gz)")
    if FORMATS[ext] == "parquet" and os.fspath(path).lower().endswith(".gz"):
        raise DataError(f"{path}: Parquet compresses itself; give the .parquet file")
    return FORMATS[ext]


def shard_files(path):
    """The files of ``path``: itself, or a folder's files (not hidden) in name order; MissingFileError if none."""
    path = os.fspath(path)
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if os.path.isfile(os.path.join(path, f)) and not f.startswith("."))
        if not files:
            raise MissingFileError(f"{path}: an empty folder, no pair files in it")
        return files
    if not os.path.exists(path):
        raise MissingFileError(f"{path}: data file not found")
    return [path]


def parse_columns(spec):
    """``("text_a=question", "label=is_same")`` (``--columns``) or a dict -> {role: column}; DataError naming a bad
    entry."""
    if not spec:
        return {}
    if isinstance(spec, dict):
        items = list(spec.items())
    else:
        items = []
        for entry in [spec] if isinstance(spec, str) else spec:
            for part in entry.split(","):
                if part.strip():
                    role, sep, column = part.partition("=")
                    if not sep or not column.strip():
                        raise DataError(f"columns: {part!r} is not ROLE=COLUMN (e.g. text_a=question)",
                                        param="columns")
                    items.append((role.strip(), column.strip()))
    columns = {}
    for role, column in items:
        if role not in PAIR_ROLES + TRIPLET_ROLES:
            raise DataError(f"columns: unknown role {role!r}; roles: {', '.join(PAIR_ROLES + TRIPLET_ROLES)}",
                            param="columns")
        columns[role] = column
    if set(columns) & set(PAIR_ROLES) and set(columns) & set(TRIPLET_ROLES):
        raise DataError("columns: name pair roles (text_a, text_b, label) or triplet roles (anchor, positive, "
                        f"negative), not both: {columns}", param="columns")
    return columns


# ---------------------------------------------------------------------------------- records of each format
def _records(path, fmt):
    """(where, record) of a file: ``where`` is "line N" ("row N" in Parquet), ``record`` a dict of the header's columns
    (a list of fields for a TAB line when the file has no header); the header itself is ``("header", names)``."""
    if fmt == "parquet":
        parquet = require("pyarrow.parquet", "parquet", "reading Parquet pair files")
        table = parquet.ParquetFile(path)
        yield "header", list(table.schema_arrow.names)
        number = 0
        for batch in table.iter_batches(batch_size=8192):
            for row in batch.to_pylist():
                number += 1
                yield f"row {number}", row
        return
    if fmt == "json" and _json_array(path):
        yield from _array_records(path)
        return
    with open_binary(path) as raw:
        yield from _text_records(path, raw, "jsonl" if fmt == "json" else fmt)


def _json_array(path):
    """Whether a .json file holds one JSON array (its first character past a BOM and blanks is ``[``); else it is
    read as JSON lines."""
    with open_binary(path) as raw:
        head = raw.read(4096)
    return head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n").startswith("[")


def _array_records(path):
    """("item N", record) of a .json file holding one array of objects (1-based; an item that is not an object is
    a problem, a file that is not JSON a DataError naming where)."""
    try:
        with open_binary(path) as raw:
            items = json.loads(raw.read().decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}, line {e.lineno}: not JSON ({e.msg} at column {e.colno})") from None
    for number, item in enumerate(items, start=1):
        yield f"item {number}", item if isinstance(item, dict) else f"a JSON {type(item).__name__}, not an object"


def _decoded(path, raw):
    """(line number, text without its line end) of a binary file; an invalid UTF-8 line's text is None."""
    for number, line in enumerate(raw, start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            yield number, None, f"invalid UTF-8 ({e.reason} at byte {e.start})"
            continue
        yield number, text.lstrip("\ufeff") if number == 1 else text, None


def _text_records(path, raw, fmt):
    if fmt == "csv":
        def lines():
            for number, text, problem in _decoded(path, raw):
                if problem:
                    raise DataError(f"{path}, line {number}: {problem}")
                yield text
        reader = csv.reader(lines())
        header, start = None, 1
        for row in reader:
            where, start = f"line {start}", reader.line_num + 1
            if not row or not any(f.strip() for f in row):
                continue
            if header is None:
                header = [h.strip() for h in row]
                yield "header", header
            elif len(row) > len(header):
                yield where, f"{len(row)} fields, the header has {len(header)}"
            else:
                yield where, dict(zip(header, row + [None] * (len(header) - len(row))))
        return
    for number, line, problem in _decoded(path, raw):
        if problem:
            yield f"line {number}", problem
            continue
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        if fmt == "jsonl":
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                yield f"line {number}", f"not JSON ({e.msg} at column {e.colno})"
                continue
            yield f"line {number}", item if isinstance(item, dict) else f"a JSON {type(item).__name__}, not an object"
        else:
            fields = line.split("\t")
            if number == 1 and is_header(fields):
                yield "header", [f.strip() for f in fields]
                continue
            yield f"line {number}", [unquote_csv_field(f) for f in fields]


def is_header(fields, columns=None):
    """Whether a TAB file's first line names its columns: one of its fields is a recognised column name."""
    known = {n for names in COLUMN_NAMES.values() for n in names} | {str(c).lower() for c in (columns or {}).values()}
    return any(f.strip().lower() in known for f in fields)


def map_columns(path, header, columns):
    """{role: key into a record} for a file whose header is ``header`` (None: a headerless TAB file, keys are
    positions); DataError naming the file, the missing role and the columns there are."""
    if header is None:
        if not columns:
            return {"text_a": 0, "text_b": 1, "label": 2}
        keys = {}
        for role, column in columns.items():
            if not str(column).isdigit() or int(column) < 1:
                raise DataError(f"{path}: no header line, so columns names positions (text_a=1,...), got "
                                f"{role}={column}", param="columns")
            keys[role] = int(column) - 1
        roles = TRIPLET_ROLES[:2] if "anchor" in keys else PAIR_ROLES
        missing = [r for r in roles if r not in keys]
        if missing:
            raise DataError(f"{path}: columns names no column for {', '.join(missing)}", param="columns")
        return keys
    lower = {str(h).lower(): h for h in header}
    keys = {}
    for role, column in columns.items():
        if column not in header and str(column).lower() not in lower:
            raise DataError(f"{path}: no column {column!r} (for {role}); the columns are {', '.join(map(str, header))}")
        keys[role] = column if column in header else lower[str(column).lower()]
    found = {}  # roles not named in ``columns``: recognised column names
    for role, names in COLUMN_NAMES.items():
        column = next((lower[n] for n in names if n in lower and lower[n] not in keys.values()), None)
        if column is not None and role not in keys:
            found[role] = column
    if keys:
        triplet = bool(set(keys) & set(TRIPLET_ROLES))
    else:
        triplet = "anchor" in found and "positive" in found and "text_a" not in found
    keys.update({r: k for r, k in found.items() if r in (TRIPLET_ROLES if triplet else PAIR_ROLES)})
    roles = TRIPLET_ROLES[:2] if "anchor" in keys or "positive" in keys else PAIR_ROLES
    missing = [r for r in roles if r not in keys]
    if missing:
        raise DataError(f"{path}: no column for {', '.join(missing)} (the header has {', '.join(map(str, header))}); "
                        f"name them in columns {','.join(f'{r}=COLUMN' for r in missing)}", param="columns")
    return keys


def column_name(key, role):
    """How an error names a column: ``column 'question' (text_a)``, or ``field 2 (text_b)`` of a headerless file."""
    return f"field {key + 1} ({role})" if isinstance(key, int) else f"column {key!r} ({role})"


def _text(record, key, role):
    value = record.get(key) if isinstance(record, dict) else (record[key] if key < len(record) else None)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        problem = "no value" if value is None else f"a {type(value).__name__}, not a text"
        return None, f"{column_name(key, role)}: {problem}"
    if not value.strip():
        return None, f"{column_name(key, role)}: empty text"
    return value, None


def paraphrase_mask(labels):
    """[N] bool: the pairs that are paraphrases (label 1 of 0/1 labels, 4 and up of STS-B's 0-5): the anchors of
    in-batch ranking and the pairs hard negatives are mined for."""
    labels = np.asarray(labels, dtype="float32")
    top = 5.0 if labels.size and labels.max() > 1 else 1.0
    return labels >= 0.8 * top


def parse_label(value):
    """A label as a float, or None when it is not a finite number."""
    if isinstance(value, bool):
        return float(value)
    try:
        label = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        return None
    return label if np.isfinite(label) else None


def _pairs_of(record, keys):
    """[(a, b, label)] of one record (two pairs for a triplet), or a problem (str)."""
    if isinstance(record, list) and "label" in keys and len(record) != 3 and set(keys) == set(PAIR_ROLES) \
            and keys["label"] == 2:
        return f"expected 3 TAB-separated fields, found {len(record)}"
    if "anchor" in keys:
        anchor, problem = _text(record, keys["anchor"], "anchor")
        positive, problem = (None, problem) if problem else _text(record, keys["positive"], "positive")
        if problem:
            return problem
        rows = [(anchor, positive, 1.0)]
        if "negative" in keys:
            negative, problem = _text(record, keys["negative"], "negative")
            if problem:
                return problem
            rows.append((anchor, negative, 0.0))
        return rows
    a, problem = _text(record, keys["text_a"], "text_a")
    b, problem = (None, problem) if problem else _text(record, keys["text_b"], "text_b")
    if problem:
        return problem
    key = keys["label"]
    raw = record.get(key) if isinstance(record, dict) else (record[key] if key < len(record) else None)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return f"{column_name(key, 'label')}: no value"
    label = parse_label(raw)
    if label is None:
        finite = parse_label(str(raw).replace("nan", "0").replace("inf", "0")) is not None
        return f"{column_name(key, 'label')}: label {raw!r} is {'not finite' if finite else 'not a number'}"
    return [(a, b, label)]


def iter_pairs(path, skip_bad_lines=False, bad=None, columns=None, labels="auto", info=None):
    """Yield ``(text_a, text_b, label)`` of a pair file (or a folder of them) one row at a time (``read_pairs``
    without the memory; a triplet row yields its two pairs).

    A bad row raises DataError naming the file, line and column, unless ``skip_bad_lines=True``: then its line
    number (``"FILE:N"`` in a folder of shards) is appended to ``bad`` (a list) and it is skipped.
    ``labels="binary"`` makes any label other than 0 or 1 a bad row. ``info`` (a dict) receives the format and the
    number of triplet rows."""
    columns = parse_columns(columns)
    files = shard_files(path)
    info = {} if info is None else info
    info.update(format=file_format(files[0]), triplets=0)
    for file in files:
        fmt, keys, header = file_format(file), None, None
        for where, record in _records(file, fmt):
            if where == "header":
                keys, header = map_columns(file, record, columns), record
                continue
            if keys is None:  # JSON lines: the first object's keys; a TAB file without a header line: positions
                keys = map_columns(file, list(record) if isinstance(record, dict) else None, columns)
            if isinstance(record, list) and header is not None:  # a TAB file with a header line
                record = dict(zip(header, record)) if len(record) == len(header) else \
                    f"{len(record)} TAB-separated fields, the header has {len(header)}"
            pairs, param = (record if isinstance(record, str) else _pairs_of(record, keys)), None
            if isinstance(pairs, list) and labels == "binary" and any(p[2] not in (0.0, 1.0) for p in pairs):
                label = next(p[2] for p in pairs if p[2] not in (0.0, 1.0))
                pairs, param = f"{column_name(keys['label'], 'label')}: {label:g} is not 0 or 1 (labels binary)", "labels"
            if isinstance(pairs, str):
                if not skip_bad_lines:
                    raise DataError(f"{file}, {where}: {pairs}", param=param)
                if bad is not None:
                    number = int(where.split()[-1])
                    bad.append(number if len(files) == 1 else f"{os.path.basename(file)}:{number}")
                continue
            info["triplets"] += "anchor" in keys
            yield from pairs


def read_pairs(path, skip_bad_lines=False, columns=None, labels="auto"):
    """Read a pair file (any format of the module docstring, or a folder of shards) into a PairDataset.

    A bad row raises DataError naming the file, line and column, unless ``skip_bad_lines=True``. Exact duplicate
    rows are kept and counted (``duplicates``).

    :param path: a file (``.tsv``, ``.data``, ``.txt``, ``.csv``, ``.jsonl``, ``.json``, ``.parquet``, each but
        Parquet optionally ``.gz``) or a folder of such shards.
    :param skip_bad_lines: skip and count bad rows (``bad_lines``; ``bad_line_numbers`` says where).
    :param columns: {role: column} (roles ``text_a``, ``text_b``, ``label``, ``anchor``, ``positive``,
        ``negative``; a column by header name or 1-based position), or ``--columns`` entries ("text_a=question").
        None: common names are recognised (``COLUMN_NAMES``).
    :param labels: "auto" (the kind is detected), "binary" (0/1 only) or "graded"; ``label_kind`` holds it.
    :returns: a ``PairDataset``.
    """
    if labels not in LABEL_KINDS:
        raise DataError(f"labels must be one of {LABEL_KINDS}, got {labels!r}", param="labels")
    path = os.fspath(path)
    texts_a, texts_b, values, bad, info = [], [], [], [], {}
    seen, duplicates = set(), 0
    for row in iter_pairs(path, skip_bad_lines, bad, columns, labels, info):
        if row in seen:
            duplicates += 1
        seen.add(row)
        texts_a.append(row[0])
        texts_b.append(row[1])
        values.append(row[2])
    if not values:
        raise DataError(f"{path}: no sentence pairs in the file" + (f" ({len(bad)} bad lines skipped)" if bad else
                                                                     " (an empty file, or a header alone)"))
    y = np.asarray(values, dtype="float32")
    kind = "binary" if set(np.unique(y)) <= {0.0, 1.0} else "graded"
    if labels == "graded":
        kind = "graded"
    return PairDataset(texts_a, texts_b, y, path, bad_lines=len(bad), duplicates=duplicates,
                       bad_line_numbers=bad, format=info["format"], triplets=info["triplets"], label_kind=kind)
