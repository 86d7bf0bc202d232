"""Export zoo models as TensorFlow SavedModels that take raw strings, for TF Serving and ``zoo serve``.

The tokenizer runs inside the graph (``GraphTokenizer``) and gives the ids of ``zoo.Tokenizer``: its
normaliser is a per-character map read off the Rust ``BertNormalizer`` at export time (so control, accent,
CJK and punctuation classes are those of ``tokenizers``, not of another Unicode table), special tokens
are matched first on the raw text, and WordPiece is tf-text's ``FastWordpieceTokenizer``.

A SavedModel written by ``export_saved_model`` has these signatures:

* ``text``: the model's text inputs (``text``, or ``text_a`` + ``text_b`` for a pair model), string [batch]
  -> the model's output (``embedding`` [batch, H], L2-normalised, for a ``SentenceEncoder``);
* ``ids``: ``token_ids``, ``segment_ids``, ``padding_mask`` int32 [batch, length] -> the same output;
* ``tokenize``: the text inputs -> ``token_ids``, ``segment_ids``, ``padding_mask`` (what ``text`` feeds
  the model);
* ``serving_default``: ``text``.

With ``signature="ids"`` only ``ids`` (also as ``serving_default``) is written: no tokenizer in the graph,
so no tf-text ops, for servers that lack them (the client then tokenizes with ``zoo.Tokenizer``).

What is served is the model's ``head_spec()`` (``zoo.heads.HeadSpec``): a task model with one is exportable.
"""

from __future__ import annotations

import functools
import os
import re

import numpy as np
import tensorflow as tf

from .errors import ConfigError, require
from .models import from_preset
from .paths import EXPORT_MANIFEST, atomic_dir, file_manifest, write_json_atomic
from .inference import bfloat16_copy
from .tokenizer import SPECIAL_TOKENS



def tf_text():
    """tensorflow_text, the SavedModel's in-graph tokenizer (the serve extra; an ONNX export does not need it)."""
    return require("tensorflow_text", "serve", "exporting a SavedModel (its in-graph tokenizer)")

ID_INPUTS = ("token_ids", "segment_ids", "padding_mask")
SIGNATURES = ("text", "ids", "tokenize")
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


# ----------------------------------------------------------------------------------- what is served
def serving_spec(model):
    """The ``HeadSpec`` of a model to export (TypeError for a model kind that serves nothing)."""
    head_spec = getattr(model, "head_spec", None)
    if head_spec is None:
        raise TypeError(f"no export recipe for a {type(model).__name__}: exportable are zoo task models with a head_spec() "
                        f"(SentenceEncoder, CrossEncoder, SimBERT)")
    return head_spec()


def described(model, spec):
    """How an export's manifest describes its model (read by ``zoo serve``): the class and its HeadSpec."""
    return {"class": type(model).__name__, **spec.to_record()}


# ----------------------------------------------------------------------------------- export
def export_saved_model(model, path, signature="text", maxlen=None, overwrite=False, verbose=False):
    """Write ``model`` as a SavedModel at ``path`` (written to a temporary folder, then renamed).

    ``signature``: "text" (serving_default takes strings; ``text``, ``ids`` and ``tokenize`` are written)
    or "ids" (only ``ids``, as serving_default too; core TF ops only). ``maxlen`` defaults to
    ``model.maxlen``. For TF Serving, ``path`` is ``<base>/<name>/<version>`` (see ``version_path``).
    """
    import keras

    if signature not in ("text", "ids"):
        raise ValueError(f"signature must be 'text' or 'ids', got {signature!r}")
    spec = serving_spec(model)
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists (pass overwrite=True, or export a new version)")

    served = model.served_model()

    def predict(ids):
        if spec.zero_segments:  # a cross-encoder trained like bojone's interact.py
            ids = {**ids, "segment_ids": tf.zeros_like(ids["segment_ids"])}
        return {spec.output: spec.serve(served(ids, training=False))}

    def from_ids(token_ids, segment_ids, padding_mask):
        return predict({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask})

    # The model's variables are tracked through the endpoints (archive.track(model) would store every
    # weight twice, and unused ones such as the pooler too).
    archive = keras.export.ExportArchive()
    archive.add_endpoint("ids", from_ids, [tf.TensorSpec([None, None], tf.int32, name=n) for n in ID_INPUTS])
    if signature == "text":
        if getattr(model, "tokenizer", None) is None:
            raise ValueError(f"this {type(model).__name__} has no tokenizer; load it from a preset or pass one")
        maxlen = int(maxlen or model.maxlen)
        max_positions = getattr(getattr(model, "backbone", None), "max_sequence_length", maxlen)
        if maxlen > max_positions:
            raise ValueError(f"maxlen={maxlen} is above the model's {max_positions} position embeddings")
        tokenizer = GraphTokenizer(model.tokenizer, maxlen)
        archive.track(tokenizer)
        text_specs = [tf.TensorSpec([None], tf.string, name=n) for n in spec.texts]
        from_text = archive.add_endpoint("text", lambda *texts: predict(tokenizer(*texts)), text_specs)
        archive.add_endpoint("tokenize", lambda *texts: tokenizer(*texts), text_specs)
        archive.add_endpoint("serving_default", from_text)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_dir(path) as tmp:
        os.rmdir(tmp)  # write_out makes the folder itself
        archive.write_out(tmp, verbose=verbose)
        record = {"format": "zoo-savedmodel", "model": described(model, spec), "precision": keras_precision(model)}
        if signature == "text":  # the server counts and windows over-long inputs with these (zoo.serving.lengths)
            model.tokenizer.save_to_preset(tmp)
            record["maxlen"] = maxlen
        write_json_atomic(os.path.join(tmp, EXPORT_MANIFEST), {**record, "files": file_manifest(tmp)})
    return path


def version_path(base, name="default", version=None):
    """``<base>/<name>/<version>``, the layout TF Serving loads; version defaults to the next free number."""
    folder = os.path.join(os.fspath(base), name)
    if version is None:
        existing = [int(d) for d in os.listdir(folder) if d.isdigit()] if os.path.isdir(folder) else []
        version = max(existing, default=0) + 1
    if int(version) < 1:
        raise ValueError(f"version must be a positive integer, got {version}")
    return os.path.join(folder, str(int(version)))


def load_exportable(path, pooling=None, maxlen=None):
    """A model to export from anything zoo loads (``zoo.models.from_preset``: a saved task model as it is, a
    checkpoint or backbone preset as a SentenceEncoder with ``pooling``); ``maxlen`` replaces the model's, which
    is otherwise its ``max_input_tokens`` (the longest input it was trained for)."""
    model = from_preset(path, pooling=pooling, maxlen=maxlen)
    serving_spec(model)
    if maxlen is None and getattr(model, "max_input_tokens", None):  # exports take what the model was trained for
        model.maxlen = model.max_input_tokens
    return model


ONNX_FILE = "model.onnx"


def export_onnx(model, path, quantize="none"):
    """``model`` as one ONNX file: the fused ONNX Runtime graph (``zoo.fused_onnx``) of the ``ids`` signature,
    ``token_ids``, ``segment_ids``, ``padding_mask`` int32 [batch, length] -> the served output (``embedding``,
    L2-normalised, or ``score``). ``quantize``: "none" (float32, lossless), "int8" (ONNX Runtime's static
    quantization with calibrated scales, ``zoo.onnx_graphs.quantize``: batch-independent) or "auto" (int8 when
    precision "fastest" picks it for this model on this machine, ``zoo.inference.choose``). Returns the precision written: "onnx-fp32"
    or "int8"."""
    import tempfile

    from .inference import choose
    from .onnx_graphs import quantize as quantize_graph, require_onnx

    if quantize not in ("none", "int8", "auto"):
        raise ConfigError(f"ONNX export quantizes to int8 only (ONNX Runtime has no fast bf16 CPU kernels), "
                          f"got {quantize!r}")
    require_onnx()
    import onnx

    from .fused_onnx import fused_graph

    serving_spec(model)
    if quantize == "auto":
        quantize = "int8" if choose(model.served_model(), "fastest") == "int8" else "none"
    graph = fused_graph(model, served=True)
    path = os.fspath(path)
    if quantize == "none":
        onnx.save(graph, path)
        return "onnx-fp32"
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(graph, os.path.join(tmp, ONNX_FILE))
        quantize_graph(os.path.join(tmp, ONNX_FILE), path, model.tokenizer, model.maxlen, serving_spec(model).pairs)
    return "int8"


def export_onnx_folder(model, path, quantize="none", maxlen=None):
    """An ONNX export folder at ``path`` (written to a temporary folder, then renamed), which ``zoo serve``
    serves behind the same APIs as a SavedModel: ``model.onnx`` (``export_onnx``), the tokenizer
    (``vocab.txt``, ``tokenizer_config.json``) and ``zoo_manifest.json`` (text inputs, output, maxlen, precision,
    the sha256 of every file)."""
    spec = serving_spec(model)
    maxlen = int(maxlen or model.maxlen)
    max_positions = model.backbone.max_sequence_length
    if maxlen > max_positions:
        raise ValueError(f"maxlen={maxlen} is above the model's {max_positions} position embeddings")
    with atomic_dir(path) as tmp:
        precision = export_onnx(model, os.path.join(tmp, ONNX_FILE), quantize=quantize)
        model.tokenizer.save_to_preset(tmp)
        write_json_atomic(os.path.join(tmp, EXPORT_MANIFEST), {
            "format": "zoo-onnx", "model": described(model, spec), "text_inputs": list(spec.texts),
            "vocabulary_size": model.backbone.vocabulary_size,
            "num_segments": model.backbone.num_segments, "max_positions": model.backbone.max_sequence_length,
            "output": spec.output, "maxlen": maxlen, "precision": precision,
            "zero_segments": spec.zero_segments, "files": file_manifest(tmp)})
    return path


def keras_precision(model):
    """The precision a Keras model computes in, as ``zoo serve`` reports it: "int8" (a quantized copy), "bf16"
    or "fp32"."""
    policies = {layer.dtype_policy.name for layer in model._flatten_layers() if hasattr(layer, "dtype_policy")}
    if any(name.startswith("int8") for name in policies):
        return "int8"
    return "bf16" if any("bfloat16" in name for name in policies) else "fp32"


def quantized_copy(model, quantize):
    """A copy of ``model`` for a SavedModel at ``quantize``: bf16 weights and arithmetic, or Keras's int8
    (``Model.quantize("int8")``: int8 Dense/EinsumDense kernels with per-channel scales)."""
    if quantize == "bf16":
        return bfloat16_copy(model)
    copy = type(model).from_config(model.get_config())
    copy.tokenizer = model.tokenizer
    copy.set_weights(model.get_weights())
    copy.quantize("int8")
    return copy
