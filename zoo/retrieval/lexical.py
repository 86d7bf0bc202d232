"""Lexical search: BM25 terms of Chinese texts (character bigrams or jieba words) and a BM25 index over them (the
bm25s library), shared by every ``SemanticIndex`` backend that has no BM25 of its own."""

from __future__ import annotations

import unicodedata

import numpy as np

from ..errors import require

LEXICAL_TERMS = ("bigram", "jieba")


def lexical_terms(text, terms="bigram"):
    """BM25 terms of a (Chinese) text, lower-cased, punctuation and spaces dropped: "bigram": overlapping
    character bigrams (a one-character text: that character); "jieba": jieba's words."""
    if terms == "jieba":
        import jieba

        return [w for w in jieba.lcut(text.lower()) if normalized(w)]
    chars = normalized(text)
    return ["".join(p) for p in zip(chars, chars[1:])] or list(chars)


def normalized(text):
    """``text`` without punctuation, symbols and spaces, lower-cased: two texts equal here say the same words."""
    return "".join(ch for ch in text.lower() if unicodedata.category(ch)[0] in "LN")


def check_terms(lexical):
    if lexical not in LEXICAL_TERMS:
        raise ValueError(f"lexical must be one of {LEXICAL_TERMS}, got {lexical!r}")


class BM25:
    """BM25 over ``texts`` (their ``lexical_terms``); rows are positions in ``texts``."""

    def __init__(self, texts, lexical="bigram"):
        bm25s = require("bm25s", "search", "BM25 (lexical and hybrid search)")
        self.lexical, self.size = lexical, len(texts)
        self.model = bm25s.BM25()
        self.model.index([lexical_terms(t, lexical) for t in texts], show_progress=False)

    def top(self, queries, k, hidden=(), allowed=None):
        """Per query text, [(row, score)] best first: the ``k`` best rows that share a term with it, leaving out
        the rows in ``hidden`` and, when ``allowed`` is given, every row not in it."""
        hidden = set(hidden)
        fetch = self.size if allowed is not None else min(k + len(hidden), self.size)
        rows, values = self.model.retrieve([lexical_terms(t, self.lexical) for t in queries], k=fetch,
                                           show_progress=False)
        out = []
        for row, value in zip(rows, values):
            keep = (value > 0) & ~np.isin(row, list(hidden))
            if allowed is not None:
                keep &= np.isin(row, list(allowed))
            out.append([(int(r), float(v)) for r, v in zip(row[keep][:k], value[keep][:k])])
        return out
