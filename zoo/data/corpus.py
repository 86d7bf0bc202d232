"""Raw text for pretraining: corpus files in the formats of ``shared/data/corpus`` and the train-split texts of
the sentence-pair tasks, as de-duplicated documents; and the question -> passage evaluation sets built from
documents of that corpus which no training reads (news titles -> articles, cloze sentences -> passages)."""

from __future__ import annotations

import csv
import dataclasses
import functools
import gzip
import hashlib
import os
import re

import numpy as np

from ..errors import MissingFileError

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
            line = _inews_document(parts[2], parts[3]) if len(parts) == 4 else parts[-1]
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
            raise MissingFileError(f"{p}: corpus file or folder not found")
    return files


def read_corpus(paths, held_out=False):
    """Documents from files or folders (recursively), de-duplicated with whitespace ignored; without the documents
    held out for the question -> passage sets (``held_out=True`` keeps them)."""
    return unique_documents(d for f in corpus_files(paths) for d in (iter_documents(f) if held_out
                                                                      else training_documents(f)))


def document_sources(corpus, tasks=(), data_dir=None):
    """The pretraining text as sources to read lazily: ``(name, documents)`` per corpus file (without its held-out
    documents) and per task train split (``documents()`` yields that source's documents, a task's as ``a\\nb``); for
    ``zoo.data.pretraining.StreamingPretrainingBatches``."""
    from .tasks import resolve_data_dir, task_file

    sources = [(f, functools.partial(training_documents, f)) for f in corpus_files(corpus)]
    for task in tasks:
        path = task_file(task, "train", resolve_data_dir(task, data_dir))
        sources.append((path, functools.partial(_pair_documents, path)))
    return sources


def _pair_documents(path):
    from .pair_files import iter_pairs

    return (f"{a}\n{b}" for a, b, _ in iter_pairs(path))


def first_documents(sources, n):
    """The first ``n`` distinct documents of ``document_sources``, taking one from each source in turn (so that a
    small sample spans every source); reads no further than that."""
    iterators = [iter(read()) for _, read in sources]
    seen, out = set(), []
    while iterators and len(out) < n:
        for it in list(iterators):
            doc = next(it, None)
            if doc is None:
                iterators.remove(it)
                continue
            key = re.sub(r"\s+", "", doc)
            if key and key not in seen:
                seen.add(key)
                out.append(doc)
                if len(out) == n:
                    break
    return out


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
    from .tasks import load_task, resolve_data_dir

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


# ---------------------------------------------------------------------------------- held-out question -> passage sets
# Share of the documents of these corpus files (matched by folder or file name) that no training reads: the question
# -> passage sets are built from them. Which documents: a fixed function of the document's text (``text_bucket``).
HELD_OUT = {"chineseglue_inews": 0.4, "199801.txt": 0.1, "CLUECorpusSmall_sampled.txt": 0.1, "chineseglue_iflytek": 0.1}
TITLE_SOURCES = ("chineseglue_inews",)
CLOZE_SOURCES = ("199801.txt", "CLUECorpusSmall_sampled.txt", "chineseglue_iflytek")


def _inews_document(title, content):
    """An inews article as one document: ``title。content`` (the content's literal ``\n`` as line breaks)."""
    return "。".join(p for p in (title, content.replace("\\n", "\n")) if p)


def _source_names(path):
    parts = os.path.normpath(os.fspath(path)).split(os.sep)
    return {parts[-1].removesuffix(".gz")} | set(parts[-2:-1])


def held_out_share(path):
    """The share of a corpus file's documents held out of training (0 for files not in ``HELD_OUT``)."""
    return max((share for name, share in HELD_OUT.items() if name in _source_names(path)), default=0.0)


def text_bucket(text):
    """A number in [0, 1) fixed by ``text`` with whitespace ignored (sha256): which documents are held out."""
    return int(hashlib.sha256(re.sub(r"\s+", "", text).encode("utf-8")).hexdigest()[:12], 16) / 16 ** 12


def training_documents(path):
    """``iter_documents`` without the documents held out for the question -> passage sets."""
    share = held_out_share(path)
    return (d for d in iter_documents(path) if not (share and text_bucket(d) < share))


@dataclasses.dataclass
class QuestionSet:
    """Queries, each with one relevant passage (``gold``: its index in ``passages``), searched against all the
    ``passages``; ``splits[i]`` is "dev" (a few queries to calibrate on) or "test"."""

    name: str
    passages: list
    queries: list
    gold: list
    splits: list

    def split(self, name):
        """(queries, gold passage indices) of the "dev" or "test" queries."""
        keep = [i for i, s in enumerate(self.splits) if s == name]
        return [self.queries[i] for i in keep], [self.gold[i] for i in keep]


def _lead(sentences, max_chars):
    """The first sentences, joined, up to ``max_chars`` characters (the first one cut if longer)."""
    out = ""
    for s in sentences:
        if out and len(out) + len(s) > max_chars:
            break
        out += s
    return out[:max_chars]


def sentences_of(text):
    """The sentences of a text (cut after 。！？!?；; and line breaks), stripped, empty ones dropped."""
    return [s.strip() for s in SENTENCE_END.split(text) if s.strip()]


def cloze_passage(sentences, pick, max_chars, keep=False):
    """The passage around sentence ``pick``: the sentences before and after it, taken alternately (nearest first)
    while they fit in ``max_chars`` characters, in document order; without sentence ``pick`` itself unless
    ``keep``. When no neighbour fits, the nearest one cut to ``max_chars``."""
    chosen, used = {pick} if keep else set(), len(sentences[pick]) if keep else 0
    for step in range(1, len(sentences)):
        for i in (pick - step, pick + step):
            if 0 <= i < len(sentences) and used + len(sentences[i]) <= max_chars:
                chosen.add(i)
                used += len(sentences[i])
    if chosen - {pick} or len(sentences) < 2:
        return "".join(sentences[i] for i in sorted(chosen))
    nearest = pick - 1 if pick > 0 else pick + 1
    return "".join(sentences[i] for i in sorted(chosen | {nearest}))[:max_chars]


def _held_out_files(corpus_dir, sources):
    return [f for f in corpus_files(corpus_dir) if _source_names(f) & set(sources) and held_out_share(f)]


def _finish(name, items, dev_queries):
    """A QuestionSet of (query, passage, key) items in key order, the first ``dev_queries`` of them "dev"."""
    items = sorted(items, key=lambda item: item[2])
    return QuestionSet(name, [p for _, p, _ in items], [q for q, _, _ in items], list(range(len(items))),
                       ["dev" if i < dev_queries else "test" for i in range(len(items))])


def title_set(corpus_dir, passage_chars=200, dev_queries=100):
    """News titles -> the lead of their article (its first sentences, up to ``passage_chars`` characters), from the
    held-out inews articles. A trailing "_site" part of a title is cut; articles whose lead contains their title
    (letters and digits) are left out, as are repeated titles or leads and leads under 30 characters."""
    items, seen = [], set()
    for path in _held_out_files(corpus_dir, TITLE_SOURCES):
        share = held_out_share(path)
        for line in _lines(path):
            parts = line.rstrip("\n").split("_!_", 3)
            if len(parts) != 4 or text_bucket(_inews_document(parts[2], parts[3])) >= share:
                continue
            title = parts[2].strip()
            if "_" in title and len(title.split("_")[0]) >= 6:
                title = title.split("_")[0]
            lead = _lead(sentences_of(parts[3].replace("\\n", "\n")), passage_chars)
            key_t, key_l = (re.sub(r"[\W_]+", "", t.lower()) for t in (title, lead))
            if len(key_t) < 4 or len(lead) < 30 or key_t in key_l or key_t in seen or key_l in seen:
                continue
            seen |= {key_t, key_l}
            items.append((title, lead, text_bucket(title)))
    return _finish("titles", items, dev_queries)


def cloze_set(corpus_dir, passage_chars=200, dev_queries=100, min_chars=8, max_chars=64):
    """Cloze sentences -> the passage they were taken from: in each held-out document of People's Daily, the
    CLUECorpusSmall sample and the iflytek app descriptions with at least 3 sentences, one sentence of
    ``min_chars``-``max_chars`` characters (picked by the document's hash) is the query, and the sentences around
    it (without it, up to ``passage_chars`` characters, alternately before and after) the passage."""
    import numpy as np

    items, seen = [], set()
    for path in _held_out_files(corpus_dir, CLOZE_SOURCES):
        share = held_out_share(path)
        for doc in iter_documents(path):
            key = text_bucket(doc)
            sentences = sentences_of(doc)
            if key >= share or len(sentences) < 3 or key in seen:
                continue
            fits = [i for i, s in enumerate(sentences) if min_chars <= len(s) <= max_chars]
            if not fits:
                continue
            seen.add(key)
            pick = fits[np.random.default_rng(int(key * 16 ** 12)).integers(len(fits))]
            text = cloze_passage(sentences, pick, passage_chars)
            if len(text) >= 30:
                items.append((sentences[pick], text, key))
    return _finish("cloze", items, dev_queries)


def question_sets(corpus_dir, passage_chars=200, dev_queries=100):
    """The question -> passage evaluation sets of a corpus folder (``shared/data/corpus``): {"titles": QuestionSet,
    "cloze": QuestionSet}, built only from held-out documents (``HELD_OUT``), in a fixed order."""
    return {"titles": title_set(corpus_dir, passage_chars, dev_queries),
            "cloze": cloze_set(corpus_dir, passage_chars, dev_queries)}


# ---------------------------------------------------------------------------------- pretraining text
def default_corpus():
    """The raw text the reference checkpoints were pretrained on: ``../shared/data/corpus`` beside the repository."""
    from ..paths import DATA_DIR

    return os.path.normpath(os.path.join(DATA_DIR, "..", "..", "shared", "data", "corpus"))


def pretraining_documents(corpus, tasks=(), data_dir=None, first=None, sample=None, seed=0, show_progress=True):
    """The pretraining text in memory: the ``corpus`` files or folders plus the train-split texts of ``tasks``,
    de-duplicated, without the documents held out for evaluation. ``first`` N: only the first N documents (the
    sources read in turn, lazily: quick trials); ``sample`` N: a random sample of N of them all (fixed by ``seed``,
    spanning every source). Reading shows a progress bar."""
    from ..logs import log, progress

    if first:
        docs = first_documents(document_sources(corpus, tasks, data_dir), first)
        log.info("the first %d documents of the corpus and task texts (first=%d)", len(docs), first)
        return docs
    files = corpus_files(corpus)
    log.info("reading %d corpus files and the train texts of %s (first=N reads only N documents)",
             len(files), ",".join(tasks) or "no task")
    texts = progress((d for f in files for d in training_documents(f)), "reading the corpus", show_progress, unit="doc")
    docs = unique_documents(list(texts) + task_documents(tasks, data_dir))
    if sample is not None:
        docs = [docs[i] for i in np.random.default_rng(seed).permutation(len(docs))[:sample]]
    return docs
