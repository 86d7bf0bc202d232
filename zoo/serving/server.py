"""``ModelServer``: exported models over TF Serving's REST API (uvicorn) and, optionally, gRPC; next to it the
OpenAI embeddings, rerank, search and paraphrase APIs of ``serving.apis`` and the web page of ``serving.ui``."""

from __future__ import annotations

import asyncio
import re
import socket
import threading

import numpy as np

from ..errors import require
from ..logs import log
from .batcher import Batcher
from .lengths import LONG_TEXT, combine_windows, length_plan, python_setting, window_slices
from .model import NotFound


class ModelServer:
    """TF Serving-compatible REST (and optionally gRPC) server for exported models, which also speaks OpenAI's
    embeddings API, text-embeddings-inference's rerank API and zoo's search and paraphrase APIs (``zoo serve``).

    ```python
    with ModelServer("exported/default", port=0) as server:
        server.url                      # http://127.0.0.1:<port>/v1/models/default
    ```

    Like TF Serving, a ``<base>/<name>`` folder is watched every ``poll_seconds``: a new, higher version is loaded
    and checked in the background and then served; requests in flight finish on the version they started on; a
    version that fails to load is logged and the current one kept.

    :param model_dir: a SavedModel folder, or ``<base>/<name>`` with numeric versions (the highest is served).
    :param name: the name ``model_dir`` is served as.
    :param host: the address to listen on.
    :param port: the REST port (0: a free one; read ``rest_port`` after ``start``).
    :param grpc_port: the gRPC port (0: a free one; None: no gRPC).
    :param max_batch_size: rows the batcher joins into one model call.
    :param batch_timeout_ms: how long the batcher waits for more rows.
    :param max_request_batch: rows per request.
    :param max_chars: characters per text.
    :param max_body_bytes: bytes per request body.
    :param verbose: log each request.
    :param poll_seconds: how often a versioned folder is checked for a new version (0: never).
    :param request_timeout_s: for a body to arrive and for the model to answer (HTTP 408 / 503, gRPC
        DEADLINE_EXCEEDED past the client's own deadline).
    :param models: more {name: folder} served side by side (a folder that is not an export, such as a zoo preset or
        run folder, is served with Keras: not over TF Serving's APIs, but a SimBERT then also writes paraphrases).
    :param index: a folder written by ``SemanticIndex.save`` (or ``zoo index build``), answered at ``/v1/search``.
    :param index_model: the served sentence encoder that embeds the index's queries (None: the first).
    :param api_key: a bearer token every request must carry (401 otherwise).
    :param ui: the web page at ``/``.
    :param threshold: the cosine at or above which the page calls two texts the same (None: what the model's
        folder records, if anything).
    :param long_text: what an input over the model's maxlen tokens gets: "refuse" (an error naming its length,
        unless the request asks to truncate), "truncate", or "chunk" (overlapping windows, ``zoo.serving.lengths``).
    :param command_line: messages name the options as ``zoo serve``'s flags (set by ``zoo serve``).
    """

    def __init__(self, model_dir=None, name="default", host="127.0.0.1", port=8501, grpc_port=None,
                 max_batch_size=64, batch_timeout_ms=2.0, max_request_batch=256, max_chars=4096,
                 max_body_bytes=16 << 20, verbose=False, poll_seconds=2.0, request_timeout_s=30.0, models=None,
                 index=None, index_model=None, api_key=None, ui=False, threshold=None, long_text="refuse",
                 command_line=False):
        sources = ({name: model_dir} if model_dir is not None else {}) | dict(models or {})
        if not sources:
            raise ValueError("nothing to serve: give model_dir or models={name: folder}")
        for n in sources:
            if not isinstance(n, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", n):
                raise ValueError(f"model name {n!r}: use letters, digits, '_', '-', '.'")
        if long_text not in LONG_TEXT:
            raise ValueError(f"long_text must be one of {LONG_TEXT}, got {long_text!r}")
        self.sources, self.host, self.long_text = sources, host, long_text
        self.command_line = command_line  # messages name the server's options as ``zoo serve``'s flags
        self.index_dir, self.index_model, self.api_key, self.ui = index, index_model, api_key, ui
        self.threshold = threshold
        self.poll_seconds, self.request_timeout_s = poll_seconds, request_timeout_s
        self._watching = None
        self._ports = (port, grpc_port)
        self.rest_port = self.grpc_port = None
        self.max_request_batch, self.max_chars, self.max_body_bytes = max_request_batch, max_chars, max_body_bytes
        self.max_batch_size, self.batch_timeout_s = max_batch_size, batch_timeout_ms / 1000
        self.verbose = verbose
        self.engines, self.index, self.index_engine = {}, None, None
        self._index_lock = threading.Lock()
        self._uvicorn, self._rest_thread, self._grpc, self._batcher = None, None, None, None
        self.name = next(iter(sources))

    # ------------------------------------------------------------------ the served models
    @property
    def first(self):
        return self.engines[self.name]

    @property
    def model(self):
        """The first served name's loaded SavedModel version (None before start, or for a preset)."""
        from .engines import ExportedEngine

        engine = self.engines.get(self.name)
        return engine.model if isinstance(engine, ExportedEngine) else None

    @property
    def version(self):
        """The first served model's version being served."""
        return getattr(self.first, "version", None)

    @property
    def path(self):
        return getattr(self.first, "path", self.first.source)

    def served_model(self, name):
        """The loaded SavedModel served as ``name`` (TF Serving's APIs); NotFound otherwise.

        :param name: a served name.
        """
        from .engines import ExportedEngine

        engine = self.engines.get(name)
        if engine is None:
            raise NotFound(f"Servable not found for request: model {name!r} (this server has {sorted(self.engines)})")
        if not isinstance(engine, ExportedEngine):
            raise NotFound(f"model {name!r} is served with Keras; TF Serving's APIs serve "
                           f"exports (`zoo export`), use /v1/embeddings or /rerank for it")
        return engine.model

    # ------------------------------------------------------------------ life cycle
    def start(self):
        """Load the model, warm it up and start listening; returns self."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        for name, engine in self.engines.items():
            log.info("serving %s (%s%s) from %s on %s", name, engine.kind,
                     f", version {engine.version}" if getattr(engine, "version", None) else "", engine.source,
                     self.url.replace(f"/models/{self.name}", f"/models/{name}"))
        return self

    def setting(self, name, *values):
        """How a message names one of this server's options: ``long_text='chunk'`` (Python), or ``--long-text
        chunk`` for a server started by ``zoo serve`` (``command_line``)."""
        if self.command_line:
            return f"--{name.replace('_', '-')} " + " or ".join(map(str, values))
        return python_setting(name, *values)

    def _start(self):
        uvicorn = require("uvicorn", "serve", "zoo serve")
        require("starlette", "serve", "zoo serve")

        from .engines import ExportedEngine, engine_for
        from .rest import build_app

        thresholds = {"given": float(self.threshold)} if self.threshold is not None else None
        for name, source in self.sources.items():
            engine = engine_for(self, name, source, thresholds)
            engine.setting = self.setting
            self.engines[name] = engine.load() if isinstance(engine, ExportedEngine) else engine
        if self.index_dir is not None:
            self._load_index()
        self._batcher = Batcher(self.max_batch_size, self.batch_timeout_s)
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP; without it each
        # response's header and body writes hit the 40 ms Nagle / delayed-ACK stall
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM,
                             socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._ports[0]))
        self.rest_port = sock.getsockname()[1]
        config = uvicorn.Config(build_app(self), log_level="warning", access_log=False, lifespan="off",
                                server_header=False, timeout_graceful_shutdown=30)
        self._uvicorn = uvicorn.Server(config)
        self._rest_thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [sock]},
                                             name="zoo-rest", daemon=True)
        self._rest_thread.start()
        while not self._uvicorn.started and self._rest_thread.is_alive():
            threading.Event().wait(0.01)
        if not self._uvicorn.started:
            raise OSError(f"the REST server did not start on {self.host}:{self.rest_port}")
        if self._ports[1] is not None:
            from .grpc_service import start_grpc

            self._grpc, self.grpc_port = start_grpc(self, self._ports[1])
        watched = [e for e in self.engines.values() if isinstance(e, ExportedEngine) and e.watched]
        if self.poll_seconds and watched:
            self._watching = threading.Event()
            threading.Thread(target=self._watch_versions, args=(self._watching, watched), name="zoo-versions",
                             daemon=True).start()

    def _load_index(self):
        """The index of ``--index`` and the served encoder that embeds its queries (``index_model``, default the
        first sentence encoder); refused when their dimensions differ."""
        from ..errors import ConfigError
        from ..retrieval.base import SemanticIndex
        from .engines import EMBEDDING

        encoders = [n for n, e in self.engines.items() if e.kind == EMBEDDING]
        name = self.index_model or (encoders[0] if encoders else None)
        if name is not None and name not in encoders:
            raise ConfigError(f"index_model {name!r} is not a served sentence encoder (those: {encoders})",
                              param="index_model")
        self.index = SemanticIndex.load(self.index_dir)
        self.index_engine = self.engines[name] if name is not None else None
        if self.index_engine is not None and self.index_engine.dim != self.index.dim:
            raise ConfigError(f"{self.index_dir} holds {self.index.dim}-d vectors"
                              f"{' of ' + self.index.model if self.index.model else ''}; model {name!r} gives "
                              f"{self.index_engine.dim}-d vectors: serve the model the index was built with")

    def search_index(self, query, topk, mode, weight, vectors, options):
        """[(id, text, score)] of the loaded index for one query (one search at a time)."""
        if mode != "lexical" and vectors is None:
            raise ValueError("dense and hybrid search need a served sentence encoder")
        with self._index_lock:
            return self.index.search([query], topk=topk, mode=mode, weight=weight, query_vectors=vectors,
                                     return_ids=True, **options)[0]

    def _watch_versions(self, stop, engines):
        """Load each new, higher version as it appears; keep serving the current one when it fails to load."""
        while not stop.wait(self.poll_seconds):
            for engine in engines:
                engine.reload()

    def stop(self):
        """Stop accepting, finish the requests in flight, then stop."""
        if self._watching is not None:
            self._watching.set()
            self._watching = None
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
            self._rest_thread.join(timeout=60)
            self._uvicorn = None
        if self._grpc is not None:
            self._grpc.stop(grace=5).wait()
            self._grpc = None
        if self._batcher is not None:
            self._batcher.close()
            self._batcher = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def stats(self):
        """Batcher counters: model calls ("batches"), requests and rows run through it."""
        return dict(self._batcher.stats) if self._batcher else {}

    @property
    def url(self):
        """The first served model's TF Serving REST address."""
        return f"http://{self.host}:{self.rest_port}/v1/models/{self.name}"

    @property
    def base_url(self):
        """Where the OpenAI-compatible client points (``.../v1``)."""
        return f"http://{self.host}:{self.rest_port}/v1"

    # ------------------------------------------------------------------ predictions
    def predict(self, model, sig, arrays, timeout=None, long_text=None):
        """Checked inputs {name: array} -> outputs {name: array}; batchable signatures go through the batcher.
        Texts over the model's limit: ``long_text`` (default the server's) refuses them (TooLong),
        cuts them, or embeds them as windows (``zoo.serving.lengths``)."""
        rows = model.check_inputs(sig, arrays)
        plan = length_plan(model, sig, arrays, long_text or self.long_text, self.setting)
        if plan is not None:
            ids = model.signatures["ids"]
            parts = [self.predict(model, ids, part, timeout, "truncate")["embedding"]
                     for part in window_slices(plan, self.max_request_batch)]
            return {"embedding": combine_windows(np.concatenate(parts), plan["owner"], plan["weights"], plan["n"],
                                                 model.normalize)}
        if sig.batchable:
            return self._batcher.submit(sig, arrays, rows).result(timeout or self.request_timeout_s)
        return sig(arrays)

    async def predict_async(self, model, sig, arrays, long_text=None):
        """``predict`` for the event loop: waits without blocking it."""
        from starlette.concurrency import run_in_threadpool

        rows = model.check_inputs(sig, arrays)
        plan = length_plan(model, sig, arrays, long_text or self.long_text, self.setting)
        if plan is not None:
            ids = model.signatures["ids"]
            parts = [(await self.predict_async(model, ids, part, "truncate"))["embedding"]
                     for part in window_slices(plan, self.max_request_batch)]
            return {"embedding": combine_windows(np.concatenate(parts), plan["owner"], plan["weights"], plan["n"],
                                                 model.normalize)}
        if sig.batchable:
            return await asyncio.wrap_future(self._batcher.submit(sig, arrays, rows))
        return await run_in_threadpool(sig, arrays)
