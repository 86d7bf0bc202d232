"""WordPiece tokenizer for Chinese BERT vocabularies (bert-base-chinese behaviour, bert4keras API).

Text -> word pieces runs in the Rust `tokenizers` library with the BERT normaliser (clean-up of control
characters, one token per CJK character, lower-casing and accent stripping that keep full-width punctuation),
so ids equal transformers' ``BertTokenizer(do_lower_case=True)``. Pairing, truncation (bert4keras rule) and
padding are done here.
"""

from __future__ import annotations

import gc
import json
import os
import re
import unicodedata

import numpy as np

from ..errors import CheckpointError, MissingFileError
from ..paths import (
    HF_TOKENIZER,
    PRESET_CONFIG,
    TOKENIZER_CONFIG,
    VOCAB_FILE,
    check_manifest,
    file_manifest,
    read_json_file,
    resolve,
    write_json_atomic,
    write_text_atomic,
)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
BUCKET = 8  # the padding policy: batches are padded to a multiple of this many tokens (few shapes for XLA)


def batch_length(rows, maxlen=None):
    """Padded length for a batch of (ids, segments) rows: the longest row rounded up to a multiple of ``BUCKET``,
    capped at ``maxlen`` (never below the longest row)."""
    longest = max(len(r[0]) for r in rows)
    length = -(-longest // BUCKET) * BUCKET
    return min(length, max(maxlen, longest)) if maxlen else length


def read_vocab(path):
    """Read a vocab.txt (one token a line) into a list of tokens; the line number is the id. A transformers
    ``tokenizer.json`` gives its WordPiece vocabulary in id order."""
    if os.path.basename(path) == HF_TOKENIZER:
        return wordpiece_vocab(_read_json(path), path)
    try:
        with open(path, encoding="utf-8") as f:
            tokens = [line.rstrip("\r\n") for line in f]
    except FileNotFoundError:
        raise MissingFileError(f"vocabulary file not found: {path}") from None
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: vocabulary is not valid UTF-8 ({e})") from None
    while tokens and tokens[-1] == "":
        tokens.pop()
    if not tokens:
        raise CheckpointError(f"{path}: vocabulary is empty")
    seen = {}
    for i, t in enumerate(tokens):
        if t in seen:
            raise CheckpointError(f"{path}, line {i + 1}: token {t!r} repeats line {seen[t] + 1}")
        seen[t] = i
    return tokens


def verify_tokenizer_files(folder):
    """The tokenizer files of a zoo preset folder against its sha256 manifest (``zoo_config.json``): a damaged,
    emptied or missing ``vocab.txt`` raises CheckpointError naming it, before any token is read."""
    config = read_json_file(os.path.join(folder, PRESET_CONFIG), "a zoo preset's config")
    files = config.get("files")
    if isinstance(files, dict):
        check_manifest(folder, {k: v for k, v in files.items() if k in (VOCAB_FILE, TOKENIZER_CONFIG)}, PRESET_CONFIG)


def is_cjk(ch):
    """The CJK ranges of BERT's basic tokenizer (each such character is its own token)."""
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def is_punctuation(ch):
    """BERT's punctuation: ASCII symbols plus every Unicode P* category."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def simplify_vocab(tokens, startswith=SPECIAL_TOKENS):
    """bert4keras ``load_vocab(simplified=True)``: drop pieces that the tokenizer can never produce.

    Keeps ``startswith`` first (in that order), then every token (by original id) except multi-character
    tokens that contain a CJK character or punctuation once ``##`` is stripped (``##的``, ``[unused1]``).
    Returns ``(new_tokens, keep_tokens)``; ``keep_tokens[i]`` is the original id of new id ``i``, the
    argument that slices embedding rows and the MLM bias (``zoo.BertBackbone.from_preset(..., keep_tokens=...)``).

    :param tokens: the vocabulary, in id order.
    :param startswith: the tokens kept first, in this order.
    """
    index = {t: i for i, t in enumerate(tokens)}
    new_tokens, keep_tokens = [], []
    for t in startswith:
        if t not in index:
            raise KeyError(f"simplify_vocab: {t!r} is not in the vocabulary")
        new_tokens.append(t)
        keep_tokens.append(index[t])
    kept = set(new_tokens)
    for i, t in enumerate(tokens):
        if t in kept:
            continue
        stem = t[2:] if t.startswith("##") else t
        if len(t) > 1 and any(is_cjk(c) or is_punctuation(c) for c in stem):
            continue
        new_tokens.append(t)
        keep_tokens.append(i)
        kept.add(t)
    return new_tokens, keep_tokens


class Tokenizer:
    """Chinese BERT's WordPiece tokenizer (bert4keras' ``Tokenizer``, on the ``tokenizers`` library).

    ```python
    tok = zoo.Tokenizer.from_preset("chinese_L-12_H-768_A-12")
    tok.encode("今天天气不错", "今天天气很好", maxlen=16)   # (token_ids, segment_ids)
    tok(["你好", "在吗"], maxlen=32)                       # padded numpy batch
    ```

    Called on texts it returns padded int32 arrays ``token_ids``, ``segment_ids``, ``padding_mask`` (``__call__``).
    The same ids come from TensorFlow ops as ``zoo.TextPreprocessor`` (tested equal on every code point of planes 0-1).

    :param vocab: the tokens in id order, or the path of a ``vocab.txt``.
    :param do_lower_case: lower-case and strip accents from non-Chinese text (True for every Chinese BERT).
    :param keep_tokens: the ids of the full vocabulary kept by a slimmed one (``simplify_vocab``), for
        ``BertBackbone.from_preset``; None for a full vocabulary.
    :param max_input_chars_per_word: a longer word becomes [UNK] (as BERT's tokenizer).
    """

    def __init__(self, vocab, do_lower_case=True, keep_tokens=None, max_input_chars_per_word=100):
        from tokenizers import Tokenizer as _RustTokenizer
        from tokenizers import models, normalizers, pre_tokenizers

        tokens = read_vocab(vocab) if isinstance(vocab, (str, os.PathLike)) else list(vocab)
        self.vocab = tokens
        self.token_to_id_map = {t: i for i, t in enumerate(tokens)}
        missing = [t for t in SPECIAL_TOKENS[:4] if t not in self.token_to_id_map]
        if missing:
            raise ValueError(f"vocabulary lacks the special tokens {missing}")
        self.do_lower_case = bool(do_lower_case)
        self.keep_tokens = None if keep_tokens is None else [int(i) for i in keep_tokens]
        self.max_input_chars_per_word = int(max_input_chars_per_word)
        rust = _RustTokenizer(
            models.WordPiece(self.token_to_id_map, unk_token="[UNK]",
                             max_input_chars_per_word=self.max_input_chars_per_word)
        )
        rust.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=self.do_lower_case
        )
        rust.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        rust.add_special_tokens([t for t in SPECIAL_TOKENS if t in self.token_to_id_map])
        self._rust = rust
        self.pad_id = self.token_to_id_map["[PAD]"]
        self.unk_id = self.token_to_id_map["[UNK]"]
        self.cls_id = self.token_to_id_map["[CLS]"]
        self.sep_id = self.token_to_id_map["[SEP]"]
        self.mask_id = self.token_to_id_map.get("[MASK]")
        self.special_ids = {self.token_to_id_map[t] for t in SPECIAL_TOKENS if t in self.token_to_id_map}
        self.vocab_file = None  # where from_preset read it (for error messages)

    @classmethod
    def from_preset(cls, path, simplified=False, startswith=SPECIAL_TOKENS):
        """The tokenizer of a zoo preset (folder or name), a run folder, a Google TF1 or transformers folder (its
        ``vocab.txt``, else the WordPiece vocabulary of its ``tokenizer.json``), a keras-hub preset folder
        (``assets/tokenizer/vocabulary.txt``, ``lowercase`` from its ``tokenizer.json``), or a ``vocab.txt``.
        ``do_lower_case`` comes from ``tokenizer_config.json`` when there is one (default True, as for every
        Chinese BERT).

        :param path: a preset's name, a folder or a ``vocab.txt``.
        :param simplified: slim the vocabulary as bert4keras' ``load_vocab(simplified=True)``; the result's
            ``keep_tokens`` must then be passed to ``BertBackbone.from_preset``.
        :param startswith: with ``simplified``, the tokens kept first, in this order.
        """
        path = resolve(path)
        if str(path).endswith(".keras"):
            raise ValueError(f"{path}: a .keras file carries its tokenizer inside; load the model with "
                             f"from_preset and use model.tokenizer")
        do_lower_case = True
        if os.path.isdir(path) and os.path.exists(os.path.join(path, PRESET_CONFIG)):
            verify_tokenizer_files(path)  # a zoo preset: its vocabulary and settings against the sha256 manifest
        from ..checkpoints.keras_hub import keras_hub_tokenizer

        keras_hub = keras_hub_tokenizer(path) if os.path.isdir(path) else None  # a keras-hub preset's BertTokenizer
        if keras_hub:
            vocab_path, do_lower_case = keras_hub
        elif os.path.isdir(path):
            vocab_path = os.path.join(path, VOCAB_FILE)
            if not os.path.exists(vocab_path) and os.path.exists(os.path.join(path, HF_TOKENIZER)):
                vocab_path = os.path.join(path, HF_TOKENIZER)  # a folder saved with only transformers' fast tokenizer
                do_lower_case = (_read_json(vocab_path).get("normalizer") or {}).get("lowercase", True)
            if not os.path.exists(vocab_path):
                raise MissingFileError(f"{vocab_path}: no {VOCAB_FILE} (nor a WordPiece {HF_TOKENIZER}) in this "
                                       f"folder")
            config_path = os.path.join(path, TOKENIZER_CONFIG)
            if os.path.exists(config_path):
                do_lower_case = _read_json(config_path).get("do_lower_case", do_lower_case)
        else:
            vocab_path = path
        tokens = read_vocab(vocab_path)
        keep_tokens = None
        if simplified:
            tokens, keep_tokens = simplify_vocab(tokens, startswith)
        tokenizer = cls(tokens, do_lower_case=do_lower_case, keep_tokens=keep_tokens)
        tokenizer.vocab_file = vocab_path
        return tokenizer

    # ---------------------------------------------------------------- basics
    @property
    def vocab_size(self):
        return len(self.vocab)

    def __len__(self):
        return len(self.vocab)

    def token_to_id(self, token):
        """The id of ``token`` ([UNK]'s for an unknown one).

        :param token: a word piece.
        """
        return self.token_to_id_map.get(token, self.unk_id)

    def id_to_token(self, i):
        """The word piece of id ``i``.

        :param i: an id.
        """
        return self.vocab[int(i)]

    def tokenize(self, text):
        """Word pieces of one text, without [CLS]/[SEP].

        :param text: one text.
        """
        return self._rust.encode(_check_text(text), add_special_tokens=False).tokens

    def piece_ids(self, texts):
        """Word-piece ids (no [CLS]/[SEP]) for a list of texts, encoded in parallel.

        :param texts: the texts.
        """
        texts = [_check_text(t, i) for i, t in enumerate(texts)]
        return [e.ids for e in self._rust.encode_batch(texts, add_special_tokens=False)]

    # ---------------------------------------------------------------- encoding
    def encode(self, first, second=None, maxlen=None):
        """``[CLS] first [SEP] (second [SEP])`` -> (token_ids, segment_ids) lists.

        Over ``maxlen`` tokens, one piece at a time is removed from the currently longer part (counted with
        its [CLS]/[SEP]; the first part on ties) just before its [SEP], as bert4keras does.

        :param first: the first text.
        :param second: the second text (None: one text).
        :param maxlen: the most tokens, [CLS] and [SEP] included (None: no cut).
        """
        a = self.piece_ids([first])[0]
        b = None if second is None else self.piece_ids([second])[0]
        return self.assemble(a, b, maxlen)

    def assemble(self, a, b=None, maxlen=None):
        """Piece ids ``a`` (and ``b``) -> (token_ids, segment_ids) of ``[CLS] a [SEP] (b [SEP])``, truncated by
        the bert4keras rule (see ``encode``). ``piece_ids`` gives the pieces of many texts at once.

        :param a: the first text's piece ids.
        :param b: the second text's piece ids (None: one text).
        :param maxlen: the most tokens, [CLS] and [SEP] included (None: no cut).
        """
        first = [self.cls_id, *a, self.sep_id]
        second = None if b is None else [*b, self.sep_id]
        if maxlen is not None:
            min_len = 2 if second is None else 3
            if maxlen < min_len:
                raise ValueError(f"maxlen={maxlen} leaves no room for [CLS]/[SEP] (need >= {min_len})")
            _truncate(maxlen, first, second)
        if second is None:
            return first, [0] * len(first)
        return first + second, [0] * len(first) + [1] * len(second)

    def __call__(self, texts, second=None, maxlen=512, pad_to=None):
        """Encode a batch into padded int32 arrays ``token_ids``, ``segment_ids``, ``padding_mask``.

        :param texts: the texts (or one text).
        :param second: the second texts of pairs, as many (None: single texts).
        :param maxlen: the most tokens per row (bert4keras' truncation rule).
        :param pad_to: pad every row to this length (e.g. for XLA; None: to the longest row).
        """
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if second is not None:
            if isinstance(second, str):
                second = [second]
            second = list(second)
            if len(second) != len(texts):
                raise ValueError(f"got {len(texts)} first texts but {len(second)} second texts")
        gc_enabled = gc.isenabled()
        gc.disable()  # millions of small lists: the cyclic GC would dominate (nothing here makes cycles)
        try:
            firsts = self.piece_ids(texts)
            seconds = self.piece_ids(second) if second is not None else [None] * len(texts)
            rows = [self.assemble(a, b, maxlen) for a, b in zip(firsts, seconds)]
            return self.pad(rows, pad_to=pad_to)
        finally:
            if gc_enabled:
                gc.enable()

    def pad(self, rows, pad_to=None):
        """(token_ids, segment_ids) rows -> dict of padded int32 arrays.

        :param rows: (token_ids, segment_ids) tuples.
        :param pad_to: pad every row to this length (None: to the longest row).
        """
        length = max((len(r[0]) for r in rows), default=0)
        if pad_to is not None:
            if pad_to < length:
                raise ValueError(f"pad_to={pad_to} is shorter than the longest row ({length} tokens)")
            length = pad_to
        token_ids = np.full((len(rows), length), self.pad_id, dtype="int32")
        segment_ids = np.zeros((len(rows), length), dtype="int32")
        padding_mask = np.zeros((len(rows), length), dtype="int32")
        for i, (ids, segs) in enumerate(rows):
            n = len(ids)
            token_ids[i, :n] = ids
            segment_ids[i, :n] = segs
            padding_mask[i, :n] = 1
        return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}

    # ---------------------------------------------------------------- decoding
    def decode(self, ids):
        """Ids -> readable text: specials dropped, CJK joined without spaces, ``##`` pieces glued (bert4keras).

        :param ids: token ids.
        """
        tokens = [self.vocab[int(i)] for i in ids if int(i) not in self.special_ids]
        text = ""
        for i, token in enumerate(tokens):
            if token.startswith("##"):
                text += token[2:]
            elif len(token) == 1 and is_cjk(token):
                text += token
            elif len(token) == 1 and is_punctuation(token):
                text += token + " "
            elif i > 0 and text and is_cjk(text[-1]):
                text += token
            else:
                text += " " + token
        text = re.sub(" +", " ", text)
        text = re.sub("' (re|m|s|t|ve|d|ll) ", "'\\1 ", text)
        punct = "＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､\u3000、〃〈〉《》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏﹑﹔·！？｡。+-/={(<["
        text = re.sub("(%s) " % "|".join(re.escape(p) for p in punct), "\\1", text)
        text = re.sub(r"(\d\.) (\d)", "\\1\\2", text)
        return text.strip()

    # ---------------------------------------------------------------- saving
    def save(self, directory):
        """Deprecated: ``save_to_preset``.

        :param directory: the folder to write.
        """
        from ..logs import warn_deprecated

        warn_deprecated("Tokenizer.save", "Tokenizer.save_to_preset")
        self.save_to_preset(directory)

    def save_to_preset(self, directory):
        """Write ``vocab.txt`` and ``tokenizer_config.json`` (transformers-compatible) into ``directory``, each
        atomically; ``Tokenizer.from_preset(directory)`` reads them back. Into a zoo preset folder (a model saved
        there first), the two files join its sha256 manifest, so they are checked at every load as the weights are.

        :param directory: the folder to write.
        """
        os.makedirs(directory, exist_ok=True)
        write_text_atomic(os.path.join(directory, VOCAB_FILE), "\n".join(self.vocab) + "\n")
        config = {"do_lower_case": self.do_lower_case, "tokenizer_class": "BertTokenizer",
                  "max_input_chars_per_word": self.max_input_chars_per_word}
        write_json_atomic(os.path.join(directory, TOKENIZER_CONFIG), config)
        preset_config = os.path.join(directory, PRESET_CONFIG)
        if os.path.exists(preset_config):
            preset = read_json_file(preset_config, "a zoo preset's config")
            if isinstance(preset.get("files"), dict):
                preset["files"].update(file_manifest(directory, exclude=set(os.listdir(directory)) - {
                    VOCAB_FILE, TOKENIZER_CONFIG}))
                write_json_atomic(preset_config, preset)


def _check_text(text, index=None):
    if not isinstance(text, str):
        where = "" if index is None else f" (item {index})"
        raise TypeError(f"expected a str{where}, got {type(text).__name__}: {text!r:.60}")
    return text


def _truncate(maxlen, first, second):
    """Pop from the longer part (the first on ties) at index -2, just before its [SEP], until it fits."""
    parts = [(first, 2)] + ([(second, 1)] if second is not None else [])  # (piece list, its special tokens)
    while sum(len(p) for p, _ in parts) > maxlen:
        longest = max((p for p, floor in parts if len(p) > floor), key=len)
        longest.pop(-2)


def wordpiece_vocab(config, path):
    """The tokens, in id order, of a transformers ``tokenizer.json`` (parsed as ``config``) whose model is WordPiece
    (BERT's); CheckpointError naming ``path`` for another model or ids with gaps."""
    model = config.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise CheckpointError(f"{path}: a {model.get('type')!r} tokenizer; zoo reads WordPiece (BERT) vocabularies")
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    if [model["vocab"][t] for t in tokens] != list(range(len(tokens))):
        raise CheckpointError(f"{path}: the WordPiece ids are not 0..{len(tokens) - 1}")
    return tokens


def _read_json(path):
    from ..errors import CheckpointError

    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return config


def chunk_pieces(pieces, window, stride=None):
    """Split each text's token ids into windows of ``window`` tokens, a new one every ``stride`` (default
    window // 2) until the text's end is covered -> (windows, owner text index of each, token count of each)."""
    if window < 1:
        raise ValueError(f"maxlen leaves no room for text tokens (window {window})")
    stride = stride or max(1, window // 2)
    if not 1 <= stride <= window:
        raise ValueError(f"stride must be in [1, {window}] (the window), got {stride}")
    windows, owner, weights = [], [], []
    for i, ids in enumerate(pieces):
        starts = range(0, max(len(ids) - window, 0) + stride, stride) if len(ids) > window else [0]
        for start in starts:
            part = ids[start:start + window]
            windows.append(part)
            owner.append(i)
            weights.append(max(len(part), 1))
            if start + window >= len(ids):
                break
    return windows, np.asarray(owner), np.asarray(weights, dtype="float64")
