"""zoo's light runtime: sentence vectors from a fused ONNX graph with ONNX Runtime, the Rust tokenizer and numpy
only. Nothing here imports TensorFlow, Keras or JAX (tests/test_light_runtime.py runs it in a fresh process and checks).

Where a model's fused graph (``zoo.inference.fused_onnx``) already exists, ``OnnxEncoder.from_preset(path)`` encodes with it:

- a shipped preset carries its graph in ``PRESET/onnx/`` (``GRAPH_FOLDER``, written by ``tools/ship_preset.py``);
- any other zoo preset or run folder, once the Keras path has written its graphs into zoo's cache (the first
  ``encode`` at an ONNX precision, ``zoo.inference.graphs.cached_graphs``), finds them there through a link keyed
  by the preset's weights file;
- an ONNX export (``zoo export --format onnx``) is a graph folder itself.

A graph is only used for the weights it was written from (the sha256 of the preset's weights file is recorded
beside it). ``zoo encode``, ``zoo search`` and ``zoo serve`` of an ONNX export run here; where no graph exists
they load the model with Keras, which writes the graph once for the next call.

The encoding pipeline (pieces, windows of long texts, rows longest first, padding, Matryoshka cut,
normalisation) is ``embed_texts`` and ``predict_sorted``, shared with the Keras ``SentenceEncoder``.
"""

from __future__ import annotations

import os

from ..paths import sha256_of
from ..tokenizer.wordpiece import Tokenizer
from .graphs import FP32_GRAPH, PARITY_TOLERANCE, find_graphs, int8_graph
from ..vectors import similarity
from .pipeline import (calibration_ranges, embed_texts, encode_arguments, engine_argument, output_as, predict_sorted,
                       prompted)
from .sessions import GraphRunner, engine_of, open_session, pad_length, require_onnx

RUNTIME_PRECISIONS = ("auto", "onnx-fp32", "int8", "openvino-int8")  # what the light runtime runs (auto: lossless)


# ------------------------------------------------------------------------- the encoder
class OnnxEncoder:
    """A sentence encoder run by ONNX Runtime alone: ``encode`` has ``SentenceEncoder.encode``'s signature and
    gives its vectors (fp32: within float32 rounding of the Keras model; int8: the Keras path's int8).

    ```python
    encoder = OnnxEncoder.from_preset("zoo-embed-zh-L4")          # no TensorFlow, Keras or JAX
    encoder.encode(["花呗怎么开通", "如何开通花呗"]).shape
    # (2, 256)
    ```

    Made by ``from_preset``; the constructor's arguments are what a preset's graph record holds.

    :param graph: the ONNX file.
    :param tokenizer: the ``zoo.Tokenizer``.
    :param maxlen: tokens per text.
    :param dim: the vectors' width (None: measured).
    :param normalize: whether ``encode`` L2-normalises by default.
    :param query_prefix: the "query" prompt (before ``prompts``).
    :param precision: the graph's engine: "onnx-fp32", "int8" or "openvino-int8".
    :param max_input_tokens: the longest input the weights were trained on.
    :param source: the path it was loaded from.
    :param graph_sha256: the graph's sha256 (None: computed).
    :param prompts: as ``SentenceEncoder``'s.
    :param default_prompt_name: as ``SentenceEncoder``'s.
    :param similarity_fn_name: as ``SentenceEncoder``'s.
    """

    def __init__(self, graph, tokenizer, maxlen, dim=None, normalize=True, query_prefix="", precision="onnx-fp32",
                 max_input_tokens=None, source=None, graph_sha256=None, prompts=None, default_prompt_name=None,
                 similarity_fn_name="cosine"):
        require_onnx()
        self.graph, self.tokenizer, self.maxlen, self.precision = os.fspath(graph), tokenizer, int(maxlen), precision
        self.normalize, self.source = normalize, source
        self.prompts = dict(prompts or ({"query": query_prefix} if query_prefix else {}))
        self.default_prompt_name, self.similarity_fn_name = default_prompt_name, similarity_fn_name
        self._ranges = {}
        self.max_input_tokens = max_input_tokens or self.maxlen
        self._runner = GraphRunner(open_session(self.graph, precision))
        self.graph_sha256 = graph_sha256 or sha256_of(self.graph)  # given where a manifest already checked it
        self.dim = int(dim or self._run(tokenizer.pad([tokenizer.encode("")])).shape[-1])

    @classmethod
    def from_preset(cls, path, engine="auto", precision=None):
        """The encoder of the model at ``path``. FileNotFoundError when no fused graph exists for it: load it with
        ``zoo.from_preset`` (Keras), whose first ONNX call writes one.

        :param path: a preset name or folder, a run folder, or an ONNX export.
        :param engine: "auto" or "onnx-fp32" (the fused float32 graph: lossless), "int8" (its calibrated int8
            version, lossy by choice) or "openvino-int8" (the same on OpenVINO).
        :param precision: the engine's name before zoo 0.3.
        """
        precision = engine_argument(engine, precision)
        if precision not in RUNTIME_PRECISIONS:
            raise ValueError(f"OnnxEncoder runs engine {RUNTIME_PRECISIONS}, got {precision!r} (Keras runs the "
                             f"others: zoo.from_preset)")
        found = find_graphs(path)
        if found is None:
            raise FileNotFoundError(f"{path}: no fused ONNX graph for this model yet (shipped presets carry one; "
                                    f"for another, encode once with zoo.from_preset(...).encode(..., "
                                    f"precision='onnx-fp32'), which writes it into zoo's cache)")
        folder, info, tokenizer_folder = found
        tokenizer = Tokenizer.from_preset(tokenizer_folder)
        encoder = info["encoder"]
        stored = info.get("precision", "onnx-fp32")  # an int8 export holds its int8 graph as model.onnx
        if stored == "int8":
            if precision not in ("auto", "int8"):
                raise ValueError(f"{path} is an int8 ONNX export: it runs precision 'int8' only")
            graph, precision = os.path.join(folder, FP32_GRAPH), "int8"
        elif precision in ("int8", "openvino-int8"):
            graph = int8_graph(folder, info, tokenizer, precision)
        else:
            parity = info.get("parity_max_abs_diff")
            if precision == "auto" and not info.get("served") and not (parity is not None and parity <= PARITY_TOLERANCE):
                raise FileNotFoundError(f"{path}: the fused graph's parity with Keras is not shown ({parity}): "
                                        f"precision auto runs Keras fp32")
            graph, precision = os.path.join(folder, FP32_GRAPH), "onnx-fp32"
        return cls(graph, tokenizer, encoder["maxlen"], dim=encoder.get("dim"),
                   normalize=encoder.get("normalize", True), query_prefix=encoder.get("query_prefix", ""),
                   prompts=encoder.get("prompts"), default_prompt_name=encoder.get("default_prompt_name"),
                   similarity_fn_name=encoder.get("similarity_fn_name", "cosine"),
                   precision=precision, max_input_tokens=encoder.get("max_input_tokens"), source=os.fspath(path),
                   graph_sha256=(info.get("files", {}).get(FP32_GRAPH) or {}).get("sha256")
                   if graph.endswith(FP32_GRAPH) else None)

    def _run(self, batch):
        return self._runner(batch)

    def predict_rows(self, rows, batch_size=64, show_progress_bar=None, unit="row"):
        """The graph's outputs for (token ids, segment ids) rows, in input order (``predict_sorted``)."""
        def pad(batch):
            return self.tokenizer.pad(batch, pad_to=pad_length(self.precision, batch, self.maxlen))

        return predict_sorted(rows, self._runner, pad, batch_size, show_progress_bar, unit)

    @property
    def engine(self):
        """The runtime this encoder runs (``encode``'s ``engine``): chosen in ``from_preset``."""
        return self.precision

    @property
    def query_prefix(self):
        """The "query" prompt ("" when there is none)."""
        return self.prompts.get("query", "")

    def encode(self, texts, batch_size=64, normalize_embeddings=None, show_progress_bar=None, maxlen=None,
               truncate_dim=None, long_text="truncate", stride=None, precision="float32", engine=None,
               prompt_name=None, prompt=None, ranges=None):
        """Embed texts -> [n, dim] (a single str gives [dim]): ``SentenceEncoder.encode``'s arguments and vectors.

        :param texts: as ``SentenceEncoder.encode``'s.
        :param batch_size: as ``SentenceEncoder.encode``'s.
        :param normalize_embeddings: as ``SentenceEncoder.encode``'s.
        :param show_progress_bar: as ``SentenceEncoder.encode``'s.
        :param maxlen: as ``SentenceEncoder.encode``'s.
        :param truncate_dim: as ``SentenceEncoder.encode``'s.
        :param long_text: as ``SentenceEncoder.encode``'s.
        :param stride: as ``SentenceEncoder.encode``'s.
        :param precision: as ``SentenceEncoder.encode``'s.
        :param engine: the encoder's own (chosen in ``from_preset``); another value is refused.
        :param prompt_name: as ``SentenceEncoder.encode``'s.
        :param prompt: as ``SentenceEncoder.encode``'s.
        :param ranges: as ``SentenceEncoder.encode``'s.
        """
        engine, precision = encode_arguments(engine, precision, ranges)
        if engine not in (None, "auto", self.precision):
            raise ValueError(f"this OnnxEncoder runs {self.precision}; load another for {engine!r} "
                             f"(OnnxEncoder.from_preset(path, engine=...))")
        normalize = self.normalize if normalize_embeddings is None else normalize_embeddings
        texts = prompted(texts, self.prompts, prompt_name, prompt, self.default_prompt_name)
        vectors = embed_texts(texts, self.tokenizer, lambda rows: self.predict_rows(rows, batch_size,
                                                                                    show_progress_bar, unit="sent"),
                              self.dim, maxlen or self.maxlen, truncate_dim, long_text, stride, normalize)
        if precision in ("int8", "uint8") and ranges is None:
            ranges = self.quantization_ranges(None, normalize, truncate_dim, maxlen)
        return output_as(vectors, precision, ranges)

    def quantization_ranges(self, engine=None, normalize_embeddings=None, truncate_dim=None, maxlen=None):
        """``SentenceEncoder.quantization_ranges``: the int8/uint8 buckets from zoo's calibration texts."""
        key = (normalize_embeddings, truncate_dim, maxlen)
        if key not in self._ranges:
            self._ranges[key] = calibration_ranges(lambda texts: self.encode(
                texts, normalize_embeddings=normalize_embeddings, truncate_dim=truncate_dim, maxlen=maxlen,
                engine=engine))
        return self._ranges[key]

    def encode_queries(self, texts, **kwargs):
        """``encode`` for search queries, with the model's "query" prompt (none: plain ``encode``).

        :param texts: the queries.
        :param kwargs: ``encode``'s arguments.
        """
        if "query" in self.prompts and "prompt" not in kwargs:
            kwargs.setdefault("prompt_name", "query")
        return self.encode(texts, **kwargs)

    def similarity(self, a, b, batch_size=64):
        """Scores [len(a), len(b)] between two lists of texts by the model's ``similarity_fn_name``.

        :param a: texts.
        :param b: texts.
        :param batch_size: texts per run.
        """
        return similarity(self.encode(list(a), batch_size=batch_size), self.encode(list(b), batch_size=batch_size),
                          self.similarity_fn_name)

    def vector_source(self, precision=None):
        """How this encoder's vectors are made (recorded by ``zoo encode`` and indexes; served at /v1/models)."""
        return {"runtime": engine_of(self.precision), "precision": self.precision, "graph_sha256": self.graph_sha256}


def light_encoder(path, precision="auto"):
    """``OnnxEncoder.from_preset(path, precision)`` where a fused graph exists for ``path`` and ONNX Runtime is
    installed, else None (the caller loads the model with Keras). ``$ZOO_PRECISION`` replaces auto, as on Keras.

    :param path: as ``OnnxEncoder.from_preset``'s.
    :param precision: the engine, as ``OnnxEncoder.from_preset``'s.
    """
    if precision == "auto" and os.environ.get("ZOO_PRECISION"):
        precision = os.environ["ZOO_PRECISION"]
    if precision not in RUNTIME_PRECISIONS:
        return None
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    try:
        return OnnxEncoder.from_preset(path, engine=precision)
    except FileNotFoundError:
        return None
