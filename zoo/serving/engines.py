"""What one served name can do for the embeddings, rerank, search and paraphrase APIs.

``ExportedEngine``: a SavedModel written by ``zoo export`` (TF Serving's layout, new versions picked up while
serving); its embeddings and scores go through the server's batcher. ``PresetEngine``: anything
``zoo.models.from_preset`` loads (a zoo preset, a run folder), run with Keras; a SimBERT served this way also
writes paraphrases (its generation head is not part of an export).
"""

from __future__ import annotations

import json
import os
import threading

import numpy as np

from ..heads import HeadSpec
from ..logs import log
from ..paths import EXPORT_MANIFEST, RESULTS_JSON
from .lengths import TooLong, first_over, python_setting, token_counts, tokens_embedded
from .model import RequestError, ServedModel, find_version

EMBEDDING, CROSS_ENCODER, OTHER = "embedding", "cross-encoder", "other"


def fitted_thresholds(folder):
    """{task: cosine threshold fitted on valid} recorded next to a model: a shipped preset's ``ship.json``
    (``scores.float32.TASK.threshold``) or a training run's ``results.json`` (in ``folder`` or its parent, a
    run folder holding ``model/``). Empty when none is recorded."""
    found = {}
    for where in (folder, os.path.dirname(os.path.abspath(folder))):
        ship, results = os.path.join(where, "ship.json"), os.path.join(where, RESULTS_JSON)
        try:
            if os.path.exists(ship):
                with open(ship, encoding="utf-8") as f:
                    scores = json.load(f).get("scores", {}).get("float32", {})
                found = {t: float(s["threshold"]) for t, s in scores.items() if "threshold" in s}
            elif os.path.exists(results):
                with open(results, encoding="utf-8") as f:
                    record = json.load(f)
                tasks = record.get("tasks") or {record.get("config", {}).get("task", "valid"): record}
                found = {t: float(s["threshold"]) for t, s in tasks.items() if "threshold" in s}
        except (OSError, ValueError, TypeError, AttributeError) as e:
            log.warning("%s: thresholds not read (%s)", where, e)
        if found:
            return dict(sorted(found.items()))
    return {}


class Engine:
    """The common part: ``kind`` (EMBEDDING, CROSS_ENCODER or OTHER), ``dim``, ``head`` (a cross-encoder's
    "softmax" or "cosent", None when unknown), ``thresholds`` and whether it writes ``paraphrases``."""

    kind, dim, head, paraphrases, limit, vectors, version, sha256 = OTHER, None, None, False, None, None, None, None
    source = ""  # where the model's files are: for the server's own logs, never in an answer
    normalize = True  # an embedding model's vectors are L2-normalised (its HeadSpec's normalize)
    similarity_fn_name = None  # an embedding model's score of two vectors (cosine, dot, euclidean, manhattan)

    setting = staticmethod(python_setting)  # how a message names a server option (the server sets its own)

    def __init__(self, name, thresholds=None):
        self.name, self.thresholds = name, dict(thresholds or {})

    def info(self):
        """This model in ``GET /v1/models`` (OpenAI's fields, zoo's under ``zoo``)."""
        return {"id": self.name, "object": "model", "created": 0, "owned_by": "zoo",
                "zoo": {"kind": self.kind, "dim": self.dim, "head": self.head, "thresholds": self.thresholds,
                        "paraphrases": self.paraphrases, "version": self.version, "sha256": self.sha256,
                        "max_input_tokens": self.limit, "similarity_fn_name": self.similarity_fn_name,
                        "vector_source": self.vectors}}

    def need(self, kind, route):
        if self.kind != kind:
            what = {EMBEDDING: "a sentence encoder", CROSS_ENCODER: "a cross-encoder"}
            raise RequestError(f"model {self.name!r} is {what.get(self.kind, 'not servable by ' + route)}; "
                               f"{route} needs {what[kind]}")

    def scores(self, served, raw):
        """CrossEncoder.score's scores -> what /rerank returns: a probability (sigmoid of the logit), or the
        logit itself with ``raw`` (``HeadSpec.probabilities`` / ``logits``)."""
        if self.head is None:
            if raw:
                raise RequestError(f"model {self.name!r} does not record its head (re-export it with this zoo): "
                                   f"raw_scores is not available")
            return served
        spec = HeadSpec.score(self.head)
        return spec.logits(served) if raw else spec.probabilities(served)


class ExportedEngine(Engine):
    """A SavedModel folder (or ``<base>/<name>`` with numeric versions: the highest is served and newer ones are
    loaded by ``reload``)."""

    def __init__(self, server, name, model_dir, thresholds=None):
        super().__init__(name, thresholds)
        self.server, self.model_dir = server, model_dir
        self.version, self.path = find_version(model_dir)
        self.model = None
        self._failed = set()

    def load(self):
        self.model = ServedModel(self.name, self.version, self.path, self.server.max_request_batch,
                                 self.server.max_chars)
        self._describe()
        return self

    @property
    def watched(self):
        return os.path.abspath(os.fspath(self.model_dir)) != self.path  # a <base>/<name> folder

    def reload(self):
        """Serve a new, higher version if one loads; keep the current one (logging once) if it does not."""
        try:
            version, path = find_version(self.model_dir)
        except FileNotFoundError:
            return
        if version <= self.version:
            return
        try:
            model = ServedModel(self.name, version, path, self.server.max_request_batch, self.server.max_chars)
        except Exception as e:  # noqa: BLE001 -- a half-copied or damaged version: retried at the next poll
            if version not in self._failed:
                log.error("version %d at %s does not load; still serving version %d: %s", version, path,
                          self.version, e)
                self._failed.add(version)
            return
        self.model, self.version, self.path = model, version, path  # new requests go to the new version
        self._describe()
        log.info("now serving %s version %d from %s", self.name, version, path)

    def _describe(self):
        sig = self.model.signatures.get("text")
        try:
            with open(os.path.join(self.path, EXPORT_MANIFEST), encoding="utf-8") as f:
                manifest = json.load(f)
        except (OSError, ValueError):
            manifest = {}
        described = manifest.get("model") or {}
        onnx_graph = (manifest.get("files") or {}).get("model.onnx")
        self.vectors = {"runtime": "onnxruntime" if onnx_graph else "tensorflow",  # how the answers are computed
                        "precision": manifest.get("precision") or ("onnx-fp32" if onnx_graph else None),
                        "graph_sha256": onnx_graph["sha256"] if onnx_graph else None}
        spec = HeadSpec.from_record(described)  # None for an export of an older zoo: its head is still recorded
        self.source, self.head, self.kind = self.path, spec.head if spec else described.get("head"), OTHER
        served_file = (manifest.get("files") or {}).get("model.onnx" if onnx_graph else "saved_model.pb") or {}
        self.sha256 = served_file.get("sha256")  # of the file that computes the answers, as the manifest records
        self.normalize = spec.normalize if spec else True
        self.limit = self.model.limit
        if sig is not None and "tokenize" in self.model.signatures:
            if list(sig.inputs) == ["text"] and sig.outputs == ["embedding"]:
                self.kind = EMBEDDING
                self.dim = int(sig.output_width("embedding"))
                self.similarity_fn_name = described.get("similarity_fn_name", "cosine")
            elif list(sig.inputs) == ["text_a", "text_b"] and sig.outputs == ["score"]:
                self.kind = CROSS_ENCODER

    async def embed(self, texts, long_text=None):
        """(L2-normalised vectors [n, dim], tokens embedded per text) through the batcher; ``long_text``: the
        length policy (default the server's, ``zoo.serving.lengths``)."""
        model = self.model
        arrays = {"text": _strings(texts)}
        out = await self.server.predict_async(model, model.signatures["text"], arrays, long_text)
        return out["embedding"], await self._tokens(arrays, long_text or self.server.long_text)

    async def score(self, pairs, long_text=None):
        """(CrossEncoder.score's scores [n], tokens per pair); pairs are never chunked."""
        model = self.model
        arrays = {"text_a": _strings([a for a, _ in pairs]), "text_b": _strings([b for _, b in pairs])}
        mode = "refuse" if (long_text or self.server.long_text) == "chunk" else long_text
        out = await self.server.predict_async(model, model.signatures["text"], arrays, mode)
        return out["score"], await self._tokens(arrays, "truncate")

    async def _tokens(self, arrays, mode):
        from starlette.concurrency import run_in_threadpool

        model = self.model
        if model.tokenizer is None:  # an older export: what its graph's tokenizer kept
            tokens = await run_in_threadpool(model.signatures["tokenize"], arrays)
            return tokens["padding_mask"].sum(axis=1).tolist()
        texts = [[model.prompt + v.decode("utf-8") for v in a] for a in arrays.values()]
        return tokens_embedded(model.tokenizer, model.limit, *texts, chunk=mode == "chunk")


class PresetEngine(Engine):
    """A model loaded with ``zoo.models.from_preset`` (a preset name or folder, a run folder, a .keras file); calls
    run one at a time in a worker thread."""

    def __init__(self, name, path, thresholds=None):
        from ..models import SimBERT, from_preset
        from ..paths import resolve

        super().__init__(name, thresholds)
        self.source = str(path)
        self.model = from_preset(path)
        self._lock = threading.Lock()
        try:
            spec = self.model.head_spec()
        except (AttributeError, TypeError):  # a model that serves nothing (e.g. a pretrainer)
            spec = None
        self.limit = getattr(self.model, "maxlen", None)  # a cross-encoder's pairs are cut at its maxlen
        if spec is not None and spec.output == "score":
            self.kind, self.head = CROSS_ENCODER, spec.head
        elif spec is not None:
            self.kind, self.dim, self.normalize = EMBEDDING, int(self.model.dim), spec.normalize
            self.similarity_fn_name = getattr(self.model, "similarity_fn_name", "cosine")
            self.vectors = self.model.vector_source() if hasattr(self.model, "vector_source") else None
            self.paraphrases = isinstance(self.model, SimBERT)
        try:
            from ..inference.graphs import preset_weights_sha256

            self.sha256 = preset_weights_sha256(resolve(path))  # a zoo preset's weights (None for other files)
        except (OSError, ValueError):
            pass
        if not self.thresholds:
            try:
                self.thresholds = fitted_thresholds(resolve(path))
            except (OSError, ValueError):
                pass

    def _run(self, fn, *args):
        with self._lock:
            return fn(*args)

    def _check(self, field, texts, texts_b, mode):
        """TooLong for the first input over the model's maxlen, unless ``mode`` cuts or chunks it."""
        if mode in ("truncate", "chunk") and (texts_b is None or mode == "truncate"):
            return
        over = first_over(token_counts(self.model.tokenizer, texts, texts_b), self.limit)
        if over is not None:
            raise TooLong(field, over[0], over[1], self.limit,
                          ("truncate", "chunk") if texts_b is None else ("truncate",), self.setting)

    async def embed(self, texts, long_text="refuse"):
        from starlette.concurrency import run_in_threadpool

        self._check("input 'text'", texts, None, long_text)
        chunk = long_text == "chunk"
        vectors = await run_in_threadpool(self._run, lambda: self.model.encode(
            texts, show_progress_bar=False, long_text="chunk" if chunk else "truncate", maxlen=self.limit,
            normalize_embeddings=self.normalize))  # as its HeadSpec says, as the exports serve them
        return vectors, tokens_embedded(self.model.tokenizer, self.limit, texts, chunk=chunk)

    async def score(self, pairs, long_text="refuse"):
        from starlette.concurrency import run_in_threadpool

        a, b = [a for a, _ in pairs], [b for _, b in pairs]
        self._check("inputs 'text_a' + 'text_b'", a, b, long_text)
        scores = await run_in_threadpool(self._run, lambda: self.model.score(pairs, show_progress_bar=False))
        return scores, tokens_embedded(self.model.tokenizer, self.limit, a, b)

    async def paraphrase(self, text, n, k, seed=None):
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(self._run, lambda: self.model.gen_synonyms(text, n=n, k=k, seed=seed))


def _strings(texts):
    return np.array([t.encode("utf-8") for t in texts], dtype=object).reshape(len(texts))


def engine_for(server, name, source, thresholds=None):
    """An ExportedEngine when ``source`` holds a SavedModel (itself or numeric version folders), else a
    PresetEngine (FileNotFoundError: neither)."""
    try:
        return ExportedEngine(server, name, source, thresholds)
    except FileNotFoundError as saved_model_missing:
        from ..errors import ZooError

        try:
            return PresetEngine(name, source, thresholds)
        except (ZooError, OSError, ValueError, TypeError) as e:
            raise FileNotFoundError(f"{source}: neither an export ({saved_model_missing}) nor a model zoo loads "
                                    f"({e})") from None
