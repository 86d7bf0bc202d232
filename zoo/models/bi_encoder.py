"""Bi-encoders (representation-based matching): SentenceEncoder, and the heads used to train it."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from ..backbones import BertBackbone, backbone_inputs
from ..heads import HeadSpec
from ..inference.pipeline import (calibration_ranges, embed_texts, encode_arguments, engine_argument, output_as,
                                  prompted)
from ..logs import log
from ..losses import pair_cosine
from ..pooling import Pooling, pooling_modes
from ..tokenizer.wordpiece import Tokenizer, chunk_pieces  # noqa: F401  (chunk_pieces: also imported from here)
from ..vectors import SIMILARITY_FUNCTIONS, similarity
from .task import Task


@keras.saving.register_keras_serializable(package="zoo")
class SentenceEncoder(Task):
    """Text -> one vector, for cosine similarity and retrieval (sentence-transformers' ``SentenceTransformer``).

    ```python
    enc = zoo.SentenceEncoder.from_preset("zoo-embed-zh-L4")
    enc.encode(["今天天气不错", "今天天气很好"])        # [2, 256], L2-normalised
    enc.similarity(["你好"], ["您好", "再见"])         # [1, 2] cosine matrix
    ```

    As a Keras model it maps the tokenizer's dict (``token_ids``, ``segment_ids``, ``padding_mask``), or strings
    through its ``preprocessor``, to un-normalised [B, H] vectors, so it can be a layer of a larger model and be
    fine-tuned. A sentence-transformers folder (``modules.json``) loads with its pooling, Dense layers,
    normalisation, max_seq_length and similarity function (``from_preset``).

    :param backbone: the transformer (a ``BertBackbone`` or another family's backbone).
    :param tokenizer: the ``Tokenizer`` that ``encode`` and the preprocessor use (None: ids only).
    :param pooling: how token vectors become one, a name of ``zoo.choices.POOLINGS`` ("cls", "mean",
        "first-last-avg", "pooler", "max", ...) or several joined by "+" (concatenated).
    :param maxlen: tokens per text; longer texts are cut (``max_seq_length`` is the same setting).
    :param query_prefix: the "query" prompt, the name it had before ``prompts`` (``encode_queries`` puts it first).
    :param dense: Dense layers after the pooling, one dict each (``units``; ``activation``: a Keras name, default
        linear; ``use_bias``: default True), as sentence-transformers' Dense modules.
    :param normalize: whether ``encode`` L2-normalises by default (False for a sentence-transformers folder without
        a Normalize module).
    :param similarity_fn_name: what ``similarity`` and ``similarity_pairwise`` compute, as in sentence-transformers:
        "cosine", "dot", "euclidean" or "manhattan" (minus the distance); saved with the model.
    :param prompts: named texts put before the input, e.g. {"query": "query: "} for asymmetric retrieval
        (``encode(texts, prompt_name="query")``); saved with the model.
    :param default_prompt_name: the prompt ``encode`` uses when none is named (None: no prompt).
    :param kwargs: Keras ``Model`` arguments (``name``, ``trainable``).
    """

    def __init__(self, backbone, tokenizer=None, pooling="cls", maxlen=64, query_prefix="", dense=None,
                 normalize=True, similarity_fn_name="cosine", prompts=None, default_prompt_name=None, **kwargs):
        modes = pooling_modes(pooling)
        if "first-last-avg" in modes and not backbone.output_hidden_states:
            raise ValueError("pooling='first-last-avg' needs a backbone built with output_hidden_states=True "
                             "(SentenceEncoder.from_preset does this)")
        dense = [self._dense_spec(d) for d in dense or ()]
        inputs = backbone_inputs()
        outputs = backbone(inputs, first_token_only=pooling in ("cls", "pooler"))  # see BertBackbone
        embedding = Pooling(pooling, name="pooling")(outputs, inputs["padding_mask"])
        for i, spec in enumerate(dense):  # named, so that their weights save and load with the model's
            embedding = keras.layers.Dense(spec["units"], activation=spec["activation"], use_bias=spec["use_bias"],
                                           name=f"sentence_dense_{i}")(embedding)
        super().__init__(inputs=inputs, outputs=embedding, **kwargs)
        if "pooler" not in modes:  # the pooler does not reach the output: freeze it (no gradient warnings)
            backbone.get_layer("pooler_dense").trainable = False
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.maxlen = maxlen
        self.prompts = dict(prompts or {})
        if query_prefix:
            self.query_prefix = query_prefix
        self.default_prompt_name = default_prompt_name
        self._ranges = {}  # (engine, normalize, truncate_dim, weights) -> int8/uint8 ranges (calibration_ranges)
        self.dense = dense
        self.normalize = bool(normalize)
        self.similarity_fn_name = similarity_fn_name

    @property
    def similarity_fn_name(self):
        """cosine, dot, euclidean or manhattan: the score of ``similarity`` (sentence-transformers' name)."""
        return self._similarity_fn_name

    @similarity_fn_name.setter
    def similarity_fn_name(self, name):
        if name not in SIMILARITY_FUNCTIONS:
            raise ValueError(f"similarity_fn_name must be one of {SIMILARITY_FUNCTIONS}, got {name!r}")
        self._similarity_fn_name = name

    @property
    def query_prefix(self):
        """The "query" prompt ("" when there is none): what ``encode_queries`` puts before each query."""
        return self.prompts.get("query", "")

    @query_prefix.setter
    def query_prefix(self, text):
        if text:
            self.prompts["query"] = text
        else:
            self.prompts.pop("query", None)

    @property
    def default_prompt_name(self):
        """The prompt ``encode`` uses when none is named (None: no prompt), as in sentence-transformers."""
        return self._default_prompt_name

    @default_prompt_name.setter
    def default_prompt_name(self, name):
        if name is not None and name not in self.prompts:
            raise ValueError(f"default_prompt_name {name!r} is not one of the prompts: {sorted(self.prompts)}")
        self._default_prompt_name = name

    @property
    def max_seq_length(self):
        """sentence-transformers' name for ``maxlen``: tokens per text, longer texts are cut (settable)."""
        return self.maxlen

    @max_seq_length.setter
    def max_seq_length(self, value):
        self.maxlen = int(value)

    def get_sentence_embedding_dimension(self):
        """sentence-transformers' name for ``dim``: the width of the vectors ``encode`` gives."""
        return self.dim

    @staticmethod
    def _dense_spec(spec):
        """A Dense layer's dict with its defaults filled in; ValueError for an unknown key or activation."""
        unknown = set(spec) - {"units", "activation", "use_bias"}
        if unknown or "units" not in spec:
            raise ValueError(f"a dense layer is a dict of units (required), activation, use_bias; got {spec!r}")
        activation = spec.get("activation") or "linear"
        keras.activations.get(activation)  # ValueError for an unknown name
        return {"units": int(spec["units"]), "activation": activation, "use_bias": bool(spec.get("use_bias", True))}

    @classmethod
    def _from_backbone_preset(cls, path, pooling=None, maxlen=None, **backbone_kwargs):
        from ..checkpoints.sentence_transformers import is_sentence_transformers_folder

        if is_sentence_transformers_folder(path):
            return cls._from_sentence_transformers(path, pooling, maxlen, **backbone_kwargs)
        pooling, maxlen = pooling or "cls", maxlen or 64
        backbone = BertBackbone.from_preset(path, output_hidden_states="first-last-avg" in pooling_modes(pooling),
                                            **backbone_kwargs)
        encoder = cls(backbone, Tokenizer.from_preset(path), pooling=pooling, maxlen=maxlen)
        encoder.check_vocabulary(path)
        return encoder

    @classmethod
    def _from_sentence_transformers(cls, path, pooling=None, maxlen=None, **backbone_kwargs):
        """A sentence-transformers folder (``modules.json``): the Transformer module's backbone and tokenizer, with
        the folder's pooling (unless ``pooling`` is given), Dense layers, normalisation and max_seq_length (unless
        ``maxlen`` is given)."""
        from ..checkpoints.sentence_transformers import read_folder

        folder = read_folder(path)
        if pooling is not None and pooling != folder.pooling:
            log.warning("%s: pooling %r given, the sentence-transformers folder pools with %r: using %r (the one "
                        "given)", path, pooling, folder.pooling, pooling)
        pooling = pooling or folder.pooling
        backbone = BertBackbone.from_preset(folder.transformer,
                                            output_hidden_states="first-last-avg" in pooling_modes(pooling),
                                            **backbone_kwargs)
        folder.check_width(backbone.hidden_dim, pooling)
        tokenizer = Tokenizer.from_preset(folder.transformer)
        if folder.do_lower_case and not tokenizer.do_lower_case:  # sentence-transformers lowercases the input
            vocab_file = tokenizer.vocab_file
            tokenizer = Tokenizer(tokenizer.vocab, do_lower_case=True)
            tokenizer.vocab_file = vocab_file
        max_positions = backbone.max_sequence_length
        if folder.maxlen and folder.maxlen > max_positions:
            log.warning("%s: max_seq_length %d is above the model's %d position embeddings: cut to %d", path,
                        folder.maxlen, max_positions, max_positions)
            folder.maxlen = max_positions
        encoder = cls(backbone, tokenizer, pooling=pooling, maxlen=maxlen or folder.maxlen or max_positions,
                      prompts=folder.prompts, default_prompt_name=folder.default_prompt_name, dense=folder.dense,
                      normalize=folder.normalize, similarity_fn_name=folder.similarity_fn_name)
        for i, weights in enumerate(folder.dense_weights):
            encoder.get_layer(f"sentence_dense_{i}").set_weights(weights)
        encoder.check_vocabulary(folder.transformer)
        encoder.max_input_tokens = folder.maxlen
        log.info("%s: sentence-transformers folder read: %s", path, folder.summary())
        return encoder

    def get_config(self):
        return self._config(pooling=self.pooling, maxlen=self.maxlen, prompts=self.prompts,
                            default_prompt_name=self.default_prompt_name, dense=self.dense, normalize=self.normalize,
                            similarity_fn_name=self.similarity_fn_name)

    @property
    def dim(self):
        """Width of the sentence vectors: the backbone's (times the number of concatenated poolings), or the last
        Dense layer's."""
        if self.dense:
            return self.dense[-1]["units"]
        return self.backbone.hidden_dim * len(pooling_modes(self.pooling))

    def head_spec(self):
        return HeadSpec.embedding(self.pooling, self.normalize)

    # ------------------------------------------------------------------ inference
    def encode(self, texts, batch_size=64, normalize_embeddings=None, show_progress_bar=None, maxlen=None,
               truncate_dim=None, long_text="truncate", stride=None, precision="float32", engine="auto",
               prompt_name=None, prompt=None, ranges=None):
        """Embed texts -> an array [n, d] in input order (a single str gives [d]); sentence-transformers' arguments
        with its meanings (docs/inference.md has the two side by side).

        Texts run longest first in batches padded to a multiple of 8 tokens, so few shapes are compiled; "" encodes
        as ``[CLS] [SEP]``.

        :param texts: a list of texts, or one text.
        :param batch_size: texts per forward pass.
        :param normalize_embeddings: L2-normalise the vectors (None: the model's ``normalize``, True but for a
            sentence-transformers folder without a Normalize module).
        :param show_progress_bar: a progress bar with its rate (None: past 20 batches, unless
            ``zoo.logs.show_bars(False)``).
        :param maxlen: tokens per text (None: ``self.maxlen``); longer texts follow ``long_text``.
        :param truncate_dim: keep the first d dimensions (Matryoshka-style), then normalise.
        :param long_text: "truncate" cuts a text at ``maxlen`` tokens; "chunk" embeds it as overlapping windows of
            ``maxlen`` tokens whose L2-normalised vectors are averaged, each weighted by its token count
            (``zoo.vectors.mean_of_windows``; a served model's ``--long-text chunk`` is the same code).
        :param stride: with ``long_text="chunk"``, a new window every ``stride`` tokens (None: half a window).
        :param precision: the output, as sentence-transformers': "float32"; "uint8" or "int8" (256 buckets per
            dimension over ``ranges``); "ubinary" (signs packed 8 per byte) or "binary" (the same minus 128, int8);
            see ``zoo.vectors.quantize_embeddings``. Until zoo 0.4 a runtime's name given here still picks the
            runtime, with a warning; "int8" without ``ranges`` is refused (it was the runtime's).
        :param engine: the runtime that computes the float vectors: "auto" (lossless: the fused fp32 ONNX graph where
            its parity with Keras was shown, else Keras fp32), "fastest" (the fastest path measured close to fp32 on
            this machine; may be int8), "fp32" (Keras), "bf16" (CPUs with AVX512-BF16/AMX, else fp32 with a
            warning), "onnx-fp32" or "int8" (a fused ONNX Runtime graph, float or statically quantized),
            "openvino-int8" (the int8 graph run by OpenVINO); see ``zoo.inference``.
        :param prompt_name: one of ``self.prompts``, put before each text (None: ``default_prompt_name``).
        :param prompt: a text put before each text (instead of a named prompt).
        :param ranges: [2, d] minima and maxima for "int8"/"uint8" (None: the model's own, from zoo's calibration
            texts, ``quantization_ranges``; never from the batch).
        :returns: a numpy array [n, d] (or [d] for one str), float32 or the ``precision``'s dtype.
        """
        self._require_tokenizer()
        engine, precision = encode_arguments(engine, precision, ranges)
        normalize = self.head_spec().normalize if normalize_embeddings is None else normalize_embeddings
        texts = prompted(texts, self.prompts, prompt_name, prompt, self.default_prompt_name)
        vectors = embed_texts(texts, self.tokenizer, lambda rows: self.predict_rows(
            rows, batch_size, maxlen or self.maxlen, show_progress_bar, unit="sent", precision=engine),
            self.dim, maxlen or self.maxlen, truncate_dim, long_text, stride, normalize)
        if precision in ("int8", "uint8") and ranges is None:
            ranges = self.quantization_ranges(engine, normalize, truncate_dim, maxlen)
        return output_as(vectors, precision, ranges)

    def quantization_ranges(self, engine="auto", normalize_embeddings=None, truncate_dim=None, maxlen=None):
        """[2, d]: the per-dimension minima and maxima that ``encode(precision="int8" or "uint8")`` buckets, from
        this model's vectors of zoo's calibration texts at these settings (computed once per settings and weights):
        they depend on the model alone, so a text's quantized vector never depends on the texts beside it.

        :param engine: as ``encode``'s.
        :param normalize_embeddings: as ``encode``'s.
        :param truncate_dim: as ``encode``'s.
        :param maxlen: as ``encode``'s.
        """
        from ..fingerprints import weights_fingerprint

        key = (engine, normalize_embeddings, truncate_dim, maxlen, weights_fingerprint(self))
        if key not in self._ranges:
            self._ranges[key] = calibration_ranges(lambda texts: self.encode(
                texts, normalize_embeddings=normalize_embeddings, truncate_dim=truncate_dim, maxlen=maxlen,
                engine=engine, show_progress_bar=False))
        return self._ranges[key]

    def vector_source(self, engine="auto", precision=None):
        """How ``encode(..., engine=engine)`` makes vectors (recorded by ``zoo encode`` and indexes; served at
        /v1/models).

        :param engine: as ``encode``'s.
        :param precision: the engine's name before zoo 0.3.
        :returns: {"runtime", "precision" (the engine that runs), "graph_sha256" (of its ONNX graph; None on Keras)}.
        """
        from ..inference.graphs import ONNX_PRECISIONS, graph_path
        from ..inference.precisions import runner
        from ..inference.sessions import engine_of
        from ..paths import sha256_of

        ran = runner(self, engine_argument(engine, precision)).precision
        graph = sha256_of(graph_path(self, ran)) if ran in ONNX_PRECISIONS else None
        return {"runtime": engine_of(ran) if graph else "keras", "precision": ran, "graph_sha256": graph}

    def encode_queries(self, texts, **kwargs):
        """``encode`` for search queries: with the model's "query" prompt (none: plain ``encode``).

        :param texts: the queries.
        :param kwargs: ``encode``'s arguments.
        """
        if "query" in self.prompts and "prompt" not in kwargs:
            kwargs.setdefault("prompt_name", "query")
        return self.encode(texts, **kwargs)

    def similarity(self, a, b, batch_size=64):
        """Scores [len(a), len(b)] between two lists of texts (or of embeddings) by ``similarity_fn_name``
        (default cosine).

        :param a: texts, one text, or embeddings [n, d].
        :param b: texts, one text, or embeddings [m, d].
        :param batch_size: texts per forward pass.
        :returns: a numpy array [n, m].
        """
        return similarity(self._as_embeddings(a, batch_size), self._as_embeddings(b, batch_size),
                          self.similarity_fn_name)

    def similarity_pairwise(self, a, b, batch_size=64, engine="auto", precision=None):
        """The score (``similarity_fn_name``) of each pair (a[i], b[i]); each distinct text is encoded once.

        :param a: the first texts.
        :param b: the second texts, as many.
        :param batch_size: texts per forward pass.
        :param engine: the runtime, as ``encode``'s.
        :param precision: the engine's name before zoo 0.3.
        :returns: a numpy array [n].
        """
        if len(a) != len(b):
            raise ValueError(f"similarity_pairwise: {len(a)} texts vs {len(b)} texts")
        unique = list(dict.fromkeys(list(a) + list(b)))
        index = {t: i for i, t in enumerate(unique)}
        emb = self.encode(unique, batch_size=batch_size, engine=engine_argument(engine, precision))
        return similarity(emb[[index[t] for t in a]], emb[[index[t] for t in b]], self.similarity_fn_name,
                          pairwise=True)

    def _as_embeddings(self, x, batch_size):
        if isinstance(x, np.ndarray) and x.dtype != object:
            return np.atleast_2d(x)
        return np.atleast_2d(self.encode([x] if isinstance(x, str) else list(x), batch_size=batch_size))


# ---------------------------------------------------------------------------------- training heads
@keras.saving.register_keras_serializable(package="zoo")
class PairCosine(keras.layers.Layer):
    """[2B, d] embeddings of interleaved pairs (a1, b1, a2, b2, ...) -> [B] cosines."""

    def call(self, embeddings):
        return pair_cosine(embeddings)

    def compute_output_shape(self, input_shape):
        return (None if input_shape[0] is None else input_shape[0] // 2,)


@keras.saving.register_keras_serializable(package="zoo")
class NestedPairCosine(keras.layers.Layer):
    """[2B, d] interleaved pair embeddings -> [B, k] cosines on their first ``dims[j]`` dimensions (Matryoshka)."""

    def __init__(self, dims, **kwargs):
        super().__init__(**kwargs)
        self.dims = [int(d) for d in dims]

    def call(self, embeddings):
        return ops.stack([pair_cosine(embeddings[:, :d]) for d in self.dims], axis=-1)

    def compute_output_shape(self, input_shape):
        return (None if input_shape[0] is None else input_shape[0] // 2, len(self.dims))

    def get_config(self):
        return {**super().get_config(), "dims": self.dims}


@keras.saving.register_keras_serializable(package="zoo")
class SBERTClassifier(keras.layers.Layer):
    """Sentence-BERT softmax head: Dense(num_classes) on [u; v; |u - v|] of interleaved pairs."""

    def __init__(self, num_classes=2, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.dense = keras.layers.Dense(num_classes, name="dense")

    def build(self, input_shape):
        self.dense.build((None, 3 * input_shape[-1]))

    def call(self, embeddings):
        pairs = ops.reshape(embeddings, (-1, 2, ops.shape(embeddings)[-1]))
        u, v = pairs[:, 0], pairs[:, 1]
        return self.dense(ops.concatenate([u, v, ops.abs(u - v)], axis=-1))

    def compute_output_shape(self, input_shape):
        return (None if input_shape[0] is None else input_shape[0] // 2, self.num_classes)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


def build_trainer(encoder, objective="cosent", matryoshka_dims=(), in_batch=False):
    """The model that trains ``encoder`` for a pair objective: ``build_pair_trainer``'s cosines (or SBERT head), or,
    with ``in_batch`` (CoSENT plus in-batch ranking), the [2B, d] embeddings of the interleaved pairs."""
    if in_batch:
        inputs = backbone_inputs()
        return keras.Model(inputs, encoder(inputs), name="cosent_in_batch_trainer")
    return build_pair_trainer(encoder, objective, matryoshka_dims=matryoshka_dims)


def build_pair_trainer(encoder, objective="cosent", num_classes=2, matryoshka_dims=None):
    """A Keras model over interleaved pair rows [2B, T] for training ``encoder``.

    cosent / cosine_mse: outputs [B] cosines; with ``matryoshka_dims`` (e.g. (64, 128)) [B, k] cosines on the
    first 64, 128, ... and all dimensions, for ``zoo.losses.MatryoshkaLoss``. sbert: outputs [B, num_classes]
    logits of the softmax head.
    """
    inputs = backbone_inputs()
    embeddings = encoder(inputs)
    if matryoshka_dims and objective not in ("cosent", "cosine_mse"):
        raise ValueError(f"matryoshka_dims needs a cosine objective (cosent, cosine_mse), not {objective!r}")
    if matryoshka_dims:
        dims = sorted(set(matryoshka_dims) | {encoder.dim})
        if dims[0] < 1 or dims[-1] > encoder.dim:
            raise ValueError(f"matryoshka_dims must lie in [1, {encoder.dim}], got {sorted(matryoshka_dims)}")
        outputs = NestedPairCosine(dims, name="nested_pair_cosine")(embeddings)
    elif objective in ("cosent", "cosine_mse"):
        outputs = PairCosine(name="pair_cosine")(embeddings)
    elif objective == "sbert":
        outputs = SBERTClassifier(num_classes, name="sbert_classifier")(embeddings)
    else:
        raise ValueError(f"unknown objective {objective!r}; use cosent, sbert or cosine_mse")
    return keras.Model(inputs, outputs, name=f"{objective}_trainer")
