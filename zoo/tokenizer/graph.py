"""``zoo.Tokenizer`` as TensorFlow ops (``GraphTokenizer``): strings -> the padded int32 dict the backbone takes, inside
a graph (the SavedModel export's tokenizer). It gives the ids of ``zoo.Tokenizer``: its normaliser is a
per-character map read off the Rust ``BertNormalizer`` (so control, accent, CJK and punctuation classes are those of
``tokenizers``, not of another Unicode table), special tokens are matched first on the raw text, and WordPiece is
tf-text's ``FastWordpieceTokenizer``. Imports TensorFlow."""

from __future__ import annotations

import functools
import re

import numpy as np
import tensorflow as tf

from ..errors import require
from .wordpiece import SPECIAL_TOKENS


def tf_text():
    """tensorflow_text, the SavedModel's in-graph tokenizer (the serve extra; an ONNX export does not need it)."""
    return require("tensorflow_text", "serve", "exporting a SavedModel (its in-graph tokenizer)")


MAX_CODE_POINT = 0x110000


# ----------------------------------------------------------------------------------- the normaliser
@functools.lru_cache(maxsize=2)
def char_tables(lowercase=True):
    """What the Rust BERT normaliser + pre-tokeniser do to each code point, as (removed, replacements).

    ``removed``: sorted [first, last] code-point ranges that vanish (controls, unassigned, and with
    ``lowercase`` also combining accents). ``replacements``: {char: string} for the other characters that
    change, with whitespace written as " " and punctuation and CJK characters padded with spaces, so that
    after the map a split on " " gives the pre-tokeniser's words. Takes about 3 s; cached.
    """
    from tokenizers import normalizers, pre_tokenizers

    norm = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                      lowercase=lowercase)
    chars = [chr(c) for c in range(MAX_CODE_POINT)]
    # surrogates (never in valid UTF-8) count as removed, which keeps the ranges few
    normalized = ["" if 0xD800 <= ord(c) <= 0xDFFF else norm.normalize_str(c) for c in chars]
    # Pre-tokeniser classes of every character the normaliser can output: in "a".join(alphabet), a
    # punctuation character is a word of its own, and whitespace is covered by no word.
    alphabet = sorted(set("".join(normalized)) | {" "})
    words = pre_tokenizers.BertPreTokenizer().pre_tokenize_str("a".join(alphabet))
    covered = np.zeros(2 * len(alphabet), bool)
    punctuation = set()
    for word, (start, end) in words:
        covered[start:end] = True
        if end - start == 1 and word != "a":
            punctuation.add(word)
    whitespace = {c for i, c in enumerate(alphabet) if not covered[2 * i]}

    def split_form(s):
        return "".join(" " if c in whitespace else f" {c} " if c in punctuation else c for c in s)

    removed, replacements = [], {}
    for c, n in zip(chars, normalized):
        if n == "":
            cp = ord(c)
            if removed and removed[-1][1] == cp - 1:
                removed[-1][1] = cp
            else:
                removed.append([cp, cp])
            continue
        s = split_form(n)
        if s != c:
            replacements[c] = s
    return removed, replacements


def _char_class(ranges):
    return "[" + "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges) + "]"


class GraphTokenizer(tf.Module):
    """``zoo.Tokenizer`` as TensorFlow ops: strings -> the padded int32 dict the backbone takes.

    ``pieces(text)``: ragged [batch, None] word-piece ids (no [CLS]/[SEP]); ``__call__(text, text_b=None)``:
    ``token_ids``, ``segment_ids``, ``padding_mask`` with ``maxlen`` truncation as ``zoo.Tokenizer``
    (single texts keep their first ``maxlen - 2`` pieces; pairs lose one piece at a time from the longer
    part). Rows are padded to the longest row.
    """

    def __init__(self, tokenizer, maxlen):
        super().__init__()
        if maxlen < 3:
            raise ValueError(f"maxlen={maxlen} leaves no room for [CLS] a [SEP] b [SEP] (need >= 3)")
        self.maxlen = int(maxlen)
        self.cls_id, self.sep_id, self.pad_id = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
        self.max_chars = tokenizer.max_input_chars_per_word
        removed, replacements = char_tables(tokenizer.do_lower_case)
        self._removed = _char_class(removed)
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(list(replacements), list(replacements.values())), "")
        specials = [t for t in SPECIAL_TOKENS if t in tokenizer.token_to_id_map]
        self._specials = "|".join(re.escape(t) for t in specials)
        self.wordpiece = tf_text().FastWordpieceTokenizer(
            tokenizer.vocab, token_out_type=tf.int32, unknown_token="[UNK]", no_pretokenization=True,
            max_bytes_per_word=4 * self.max_chars + 4)

    def normalize(self, text):
        """Normalised text, whitespace-separated words (1-D string tensor in and out)."""
        chars = tf.strings.unicode_split(tf.strings.regex_replace(text, self._removed, ""), "UTF-8")
        mapped = self.table.lookup(chars.flat_values)
        mapped = tf.where(tf.equal(mapped, ""), chars.flat_values, mapped)
        return tf.strings.reduce_join(chars.with_flat_values(mapped), axis=-1)

    def pieces(self, text):
        """1-D strings -> ragged [batch, None] int32 word-piece ids (as ``zoo.Tokenizer.piece_ids``)."""
        text = tf.convert_to_tensor(text, tf.string)
        # special tokens ([CLS], [MASK], ...) written in the text are matched first, on the raw text;
        # regex_split stops at NUL, so NUL (removed by the normaliser anyway) becomes \x01 (removed too)
        text = tf.strings.regex_replace(text, "\\x00", "\x01")
        segments = tf_text().regex_split(text, self._specials, self._specials)
        flat = segments.flat_values
        special = tf.strings.regex_full_match(flat, self._specials)
        words = tf.strings.split(self.normalize(tf.where(special, "", flat)))  # [segment, word]
        long = tf.strings.length(words, unit="UTF8_CHAR") > self.max_chars
        words = tf.ragged.map_flat_values(tf.where, long, "[UNK]", words)
        ids = self.wordpiece.tokenize(words).merge_dims(1, 2)  # [segment, piece]
        special_ids = self.wordpiece.tokenize(tf.boolean_mask(flat, special)).flat_values
        special_ids = tf.RaggedTensor.from_row_lengths(special_ids, tf.cast(special, tf.int64))
        ids = tf.concat([ids, special_ids], axis=1)
        return segments.with_flat_values(ids).merge_dims(1, 2)

    def __call__(self, text, text_b=None):
        text = tf.convert_to_tensor(text, tf.string)
        batch = tf.shape(text, out_type=tf.int32)[0]
        cls, sep = tf.fill([batch, 1], self.cls_id), tf.fill([batch, 1], self.sep_id)
        if text_b is None:
            parts = [cls, self.pieces(text)[:, : self.maxlen - 2], sep]
            segments = [tf.zeros_like(p) for p in parts]
        else:
            both = self.pieces(tf.concat([text, text_b], axis=0))  # one pass over both texts
            a, b = both[:batch], both[batch:]
            n_a, n_b = tf.cast(a.row_lengths(), tf.int32), tf.cast(b.row_lengths(), tf.int32)
            la, lb = self._pair_lengths(n_a + 2, n_b + 1)
            parts = [cls, _keep_first(a, la - 2), sep, _keep_first(b, lb - 1), sep]
            segments = [tf.zeros_like(p) for p in parts[:3]] + [tf.ones_like(p) for p in parts[3:]]
        token_ids = tf.concat(parts, axis=1)
        return {"token_ids": token_ids.to_tensor(self.pad_id),
                "segment_ids": tf.concat(segments, axis=1).to_tensor(0),
                "padding_mask": tf.ones_like(token_ids).to_tensor(0)}

    def _pair_lengths(self, a, b):
        """bert4keras truncation on lengths with specials ([CLS] a [SEP]: a, b [SEP]: b): while too long, the
        longer part (the first on ties) that is above its floor (2, 1) loses one piece."""
        def body(a, b):
            over = a + b > self.maxlen
            pop_a = over & (((a >= b) & (a > 2)) | (b <= 1))
            return a - tf.cast(pop_a, tf.int32), b - tf.cast(over & ~pop_a, tf.int32)

        return tf.while_loop(lambda a, b: tf.reduce_any(a + b > self.maxlen), body, (a, b))


def _keep_first(ragged, n):
    """The first n[i] items of each row of a ragged [batch, None] tensor."""
    return tf.ragged.boolean_mask(ragged, tf.ragged.range(tf.cast(ragged.row_lengths(), tf.int32)) < n[:, None])
