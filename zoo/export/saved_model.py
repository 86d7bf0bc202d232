"""Export zoo models as TensorFlow SavedModels that take raw strings, for TF Serving and ``zoo serve``.

The tokenizer runs inside the graph (``GraphTokenizer``) and gives the ids of ``zoo.Tokenizer``: its
normaliser is a per-character map read off the Rust ``BertNormalizer`` at export time (so control, accent,
CJK and punctuation classes are those of ``tokenizers``, not of another Unicode table), special tokens
are matched first on the raw text, and WordPiece is tf-text's ``FastWordpieceTokenizer``.

A SavedModel written by ``export_saved_model`` has these signatures:

* ``text``: the model's text inputs (``text``, or ``text_a`` + ``text_b`` for a pair model), string [batch]
  -> the model's output (``embedding`` [batch, H], L2-normalised, for a ``SentenceEncoder``); an embedding
  model's default prompt (``default_prompt_name``) goes before each text, as ``encode`` puts it;
* ``ids``: ``token_ids``, ``segment_ids``, ``padding_mask`` int32 [batch, length] -> the same output;
* ``tokenize``: the text inputs -> ``token_ids``, ``segment_ids``, ``padding_mask`` (what ``text`` feeds
  the model, its prompt included);
* ``serving_default``: ``text``.

With ``signature="ids"`` only ``ids`` (also as ``serving_default``) is written: no tokenizer in the graph,
so no tf-text ops, for servers that lack them (the client then tokenizes with ``zoo.Tokenizer``).

What is served is the model's ``head_spec()`` (``zoo.heads.HeadSpec``): a task model with one is exportable.
"""

from __future__ import annotations

import os

import tensorflow as tf

from ..inference.precisions import bfloat16_copy
from ..paths import EXPORT_MANIFEST, atomic_dir, file_manifest, write_json_atomic
from ..models.preprocessor import TextPreprocessor
from ..tokenizer.graph import tf_text
from .exportable import default_prompt, described, serving_spec

ID_INPUTS = ("token_ids", "segment_ids", "padding_mask")
SIGNATURES = ("text", "ids", "tokenize")


# ----------------------------------------------------------------------------------- export
def export_saved_model(model, path, signature="text", maxlen=None, overwrite=False, verbose=False):
    """Write ``model`` as a SavedModel at ``path`` (written to a temporary folder, then renamed), for TF Serving.

    ```python
    zoo.export.export_saved_model(encoder, zoo.export.version_path("exported"))   # exported/default/1
    ```

    :param model: a SentenceEncoder, CrossEncoder or SimBERT.
    :param path: the folder; for TF Serving ``<base>/<name>/<version>`` (``version_path``).
    :param signature: "text" (serving_default takes strings; ``text``, ``ids`` and ``tokenize`` are written) or
        "ids" (only ``ids``, as serving_default too; core TF ops only).
    :param maxlen: tokens per input (None: ``model.maxlen``).
    :param overwrite: replace an existing folder (else FileExistsError).
    :param verbose: TensorFlow's own messages while saving.
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
        # the task's own preprocessor layer (Keras and tf.data run the same one); its segment ids as tokenized
        # (``predict`` zeroes them for a zero_segments cross-encoder, so ``tokenize`` shows the real ones)
        preprocessor = TextPreprocessor(model.tokenizer, maxlen, texts=len(spec.texts))
        tf_text()  # the in-graph WordPiece: a SavedModel cannot hold the Python fallback
        archive.track(preprocessor.graph_tokenizer())
        text_specs = [tf.TensorSpec([None], tf.string, name=n) for n in spec.texts]
        prompt = default_prompt(model) if spec.output == "embedding" else ""

        def tokenize(*texts):  # encode()'s default prompt first, so that the export gives encode()'s vectors
            return preprocessor.call(*((tf.strings.join([prompt, t]) for t in texts) if prompt else texts))

        from_text = archive.add_endpoint("text", lambda *texts: predict(tokenize(*texts)), text_specs)
        archive.add_endpoint("tokenize", tokenize, text_specs)
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
