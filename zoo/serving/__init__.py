"""Serve an exported zoo SavedModel with the TF Serving APIs: REST (Starlette on uvicorn) and gRPC
(``tensorflow-serving-api`` protos, ``PredictionService`` and ``ModelService``). ``zoo serve``.

Modules: ``model`` (the loaded version, signatures, input checks), ``batcher`` (concurrent requests merged into
one model call), ``rest`` and ``grpc_service`` (the two protocols), ``server`` (``ModelServer``, which ties them).
"""

from __future__ import annotations

import dataclasses
import signal
import threading

from ..config import option
from .batcher import Batcher
from .model import NotFound, RequestError, ServedModel, Signature, find_version
from .server import ModelServer

__all__ = ["Batcher", "ModelServer", "NotFound", "RequestError", "ServeConfig", "ServedModel", "Signature",
           "find_version", "run"]


@dataclasses.dataclass
class ServeConfig:
    """Serve MODEL (a SavedModel folder, or a NAME folder with numeric versions: the highest is served) at
    http://HOST:PORT/v1/models/NAME[:predict], and with --grpc-port over gRPC."""

    model: str = option(None, "the exported folder (OUT/NAME or OUT/NAME/VERSION)", required=True)
    port: int = option(8501, "REST port")
    grpc_port: int | None = option(None, "gRPC port (default: no gRPC; TF Serving uses 8500)")
    host: str = option("127.0.0.1", "address to listen on")
    name: str = option("default", "model name in the URLs")
    max_batch_size: int = option(64, "rows merged into one model call")
    batch_timeout_ms: float = option(2.0, "how long a batch waits for more requests")
    max_request_batch: int = option(256, "instances allowed in one request")
    max_chars: int = option(4096, "characters allowed in one text")
    request_timeout_s: float = option(30.0, "seconds a request may take to arrive and to be answered")
    poll_seconds: float = option(2.0, "how often a NAME folder is checked for a new version (0: never)")
    verbose: bool = option(False, "log every request")


def run(config: ServeConfig):
    """Serve until SIGTERM or Ctrl-C."""
    server = ModelServer(config.model, name=config.name, host=config.host, port=config.port,
                         grpc_port=config.grpc_port, max_batch_size=config.max_batch_size,
                         batch_timeout_ms=config.batch_timeout_ms, max_request_batch=config.max_request_batch,
                         max_chars=config.max_chars, verbose=config.verbose,
                         poll_seconds=config.poll_seconds, request_timeout_s=config.request_timeout_s).start()
    grpc = f", gRPC {config.host}:{server.grpc_port}" if server.grpc_port else ""
    print(f"serving {server.name} version {server.version} ({server.path}): REST {server.url}{grpc}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0
