"""``ModelServer``: one exported model served over TF Serving's REST API (uvicorn) and, optionally, gRPC."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading

from ..logs import log
from .batcher import Batcher
from .model import ServedModel, find_version


class ModelServer:
    """TF Serving-compatible REST (and optionally gRPC) server for one exported model.

    ``model_dir``: a SavedModel folder or ``<base>/<name>`` with numeric versions (the highest is served).
    ``port`` / ``grpc_port``: 0 picks a free port (read ``rest_port`` / ``grpc_port`` after ``start``);
    ``grpc_port=None`` disables gRPC. Limits: ``max_request_batch`` rows per request, ``max_chars``
    characters per text, ``max_body_bytes`` per request; ``request_timeout_s`` for a body to arrive and for
    the model to answer (HTTP 408 / 503, gRPC DEADLINE_EXCEEDED past the client's own deadline). Like TF Serving, a ``<base>/<name>`` folder is watched
    every ``poll_seconds`` (0: never): a new, higher version is loaded and checked in the background and then
    served; requests in flight finish on the version they started on; a version that fails to load is logged
    and the current one kept.

    >>> with ModelServer("exported/default", port=0) as server:
    ...     server.url                      # http://127.0.0.1:<port>/v1/models/default
    """

    def __init__(self, model_dir, name="default", host="127.0.0.1", port=8501, grpc_port=None,
                 max_batch_size=64, batch_timeout_ms=2.0, max_request_batch=256, max_chars=4096,
                 max_body_bytes=16 << 20, verbose=False, poll_seconds=2.0, request_timeout_s=30.0):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"model name {name!r}: use letters, digits, '_', '-', '.'")
        self.name, self.host, self.model_dir = name, host, model_dir
        self.version, self.path = find_version(model_dir)
        self.poll_seconds, self.request_timeout_s = poll_seconds, request_timeout_s
        self._watching = None
        self._ports = (port, grpc_port)
        self.rest_port = self.grpc_port = None
        self.max_request_batch, self.max_chars, self.max_body_bytes = max_request_batch, max_chars, max_body_bytes
        self.max_batch_size, self.batch_timeout_s = max_batch_size, batch_timeout_ms / 1000
        self.verbose = verbose
        self.model, self._uvicorn, self._rest_thread, self._grpc, self._batcher = None, None, None, None, None

    # ------------------------------------------------------------------ life cycle
    def start(self):
        """Load the model, warm it up and start listening; returns self."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        log.info("serving %s version %d from %s on %s", self.name, self.version, self.path, self.url)
        return self

    def _start(self):
        import uvicorn

        from .rest import build_app

        self.model = ServedModel(self.name, self.version, self.path, self.max_request_batch, self.max_chars)
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
        if self.poll_seconds and os.path.abspath(os.fspath(self.model_dir)) != self.path:  # a <base>/<name> folder
            self._watching = threading.Event()
            threading.Thread(target=self._watch_versions, args=(self._watching,), name="zoo-versions",
                             daemon=True).start()

    def _watch_versions(self, stop):
        """Load each new, higher version as it appears; keep serving the current one when it fails to load."""
        reported = set()
        while not stop.wait(self.poll_seconds):
            try:
                version, path = find_version(self.model_dir)
            except FileNotFoundError:
                continue
            if version <= self.version:
                continue
            try:
                model = ServedModel(self.name, version, path, self.max_request_batch, self.max_chars)
            except Exception as e:  # noqa: BLE001 -- a half-copied or damaged version: retried at the next poll
                if version not in reported:
                    log.error("version %d at %s does not load; still serving version %d: %s", version, path,
                              self.version, e)
                    reported.add(version)
                continue
            self.model, self.version, self.path = model, version, path  # new requests go to the new version
            log.info("now serving %s version %d from %s", self.name, version, path)

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
        return f"http://{self.host}:{self.rest_port}/v1/models/{self.name}"

    # ------------------------------------------------------------------ predictions
    def predict(self, model, sig, arrays, timeout=None):
        """Checked inputs {name: array} -> outputs {name: array}; batchable signatures go through the batcher."""
        rows = model.check_inputs(sig, arrays)
        if sig.batchable:
            return self._batcher.submit(sig, arrays, rows).result(timeout or self.request_timeout_s)
        return sig(arrays)

    async def predict_async(self, model, sig, arrays):
        """``predict`` for the event loop: waits without blocking it."""
        from starlette.concurrency import run_in_threadpool

        rows = model.check_inputs(sig, arrays)
        if sig.batchable:
            return await asyncio.wrap_future(self._batcher.submit(sig, arrays, rows))
        return await run_in_threadpool(sig, arrays)
