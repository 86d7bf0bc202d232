"""Serve exported zoo SavedModels with the TF Serving APIs: REST (Starlette on uvicorn) and gRPC
(``tensorflow-serving-api`` protos, ``PredictionService`` and ``ModelService``); next to them OpenAI's embeddings
API, text-embeddings-inference's rerank API, search over an index and a web page. ``zoo serve``.

Modules: ``model`` (the loaded version, signatures, input checks), ``batcher`` (concurrent requests merged into
one model call), ``engines`` (what a served name can do: an export, or a preset run with Keras), ``rest`` and
``grpc_service`` (the protocols), ``apis`` (the OpenAI, rerank, search and paraphrase answers), ``ui`` (the page),
``server`` (``ModelServer``, which ties them).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import threading

from ..config import option
from ..errors import ConfigError
from .batcher import Batcher
from .model import NotFound, RequestError, ServedModel, Signature, find_version
from .server import ModelServer

__all__ = ["Batcher", "ModelServer", "NotFound", "RequestError", "ServeConfig", "ServedModel", "Signature",
           "find_version", "run"]


@dataclasses.dataclass
class ServeConfig:
    """Serve MODEL (a SavedModel folder, or a NAME folder with numeric versions: the highest is served) at
    http://HOST:PORT/v1/models/NAME[:predict], and with --grpc-port over gRPC; the same models answer OpenAI's
    /v1/embeddings and /v1/models, and cross-encoders text-embeddings-inference's /rerank. Repeat --model NAME=PATH
    to serve several side by side (a PATH that is not an export, such as a zoo preset or run folder, is served with
    Keras: a SimBERT then also writes paraphrases). --index DIR adds /v1/search, --ui a web page at /."""

    model: tuple = option((), "the exported folder (OUT/NAME or OUT/NAME/VERSION), or NAME=PATH (repeatable; PATH may "
                              "also be a zoo preset or run folder)", append=True, required=True)
    port: int = option(8501, "REST port")
    grpc_port: int | None = option(None, "gRPC port (default: no gRPC; TF Serving uses 8500)")
    host: str = option("127.0.0.1", "address to listen on")
    name: str = option("default", "model name in the URLs (of a --model given without NAME=)")
    max_batch_size: int = option(64, "rows merged into one model call")
    batch_timeout_ms: float = option(2.0, "how long a batch waits for more requests")
    max_request_batch: int = option(256, "instances allowed in one request")
    max_chars: int = option(4096, "characters allowed in one text")
    long_text: str = option("refuse", "an input over the model's maxlen tokens: refused with an error naming its "
                                      "length and the limit (unless the request asks to truncate, as /v1/embeddings' "
                                      "and /rerank's \"truncate\": true), cut, or embedded as overlapping windows "
                                      "averaged (chunk, as encode(long_text=\"chunk\"); pairs are never chunked)",
                            choices=("refuse", "truncate", "chunk"))
    request_timeout_s: float = option(30.0, "seconds a request may take to arrive and to be answered")
    poll_seconds: float = option(2.0, "how often a NAME folder is checked for a new version (0: never)")
    api_key: str | None = option(None, "a key every request must send as 'Authorization: Bearer KEY' (default: "
                                       "none; the ZOO_API_KEY environment variable also sets it)")
    index: str | None = option(None, "a search index folder (`zoo index build`) answered at /v1/search")
    index_model: str | None = option(None, "the served model that embeds /v1/search queries (default: the first "
                                           "sentence encoder)")
    ui: bool = option(False, "a web page at / (similarity, search, paraphrases)")
    threshold: float | None = option(None, "cosine at or above which the page calls two texts the same (default: "
                                           "the valid-fitted threshold recorded with the model, if any)")
    verbose: bool = option(False, "log every request")

    def __post_init__(self):
        if isinstance(self.model, (str, os.PathLike)):
            self.model = (os.fspath(self.model),)
        if not self.model:
            raise ConfigError("--model: give an exported folder, or NAME=PATH")
        if self.api_key is None:
            self.api_key = os.environ.get("ZOO_API_KEY") or None
        models = self.models()
        if len(models) != len(self.model):
            raise ConfigError(f"--model: a name is given twice in {list(self.model)}")

    def models(self):
        """{name: path} of the --model flags (a flag without NAME= is served as --name)."""
        models = {}
        for entry in self.model:
            name, sep, path = entry.partition("=")
            if not sep or os.path.exists(entry) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not path:
                name, path = self.name, entry
            models[name] = path
        return models


def run(config: ServeConfig):
    """``zoo serve``: serve until SIGTERM or Ctrl-C.

    :param config: the command's settings.
    """
    server = ModelServer(models=config.models(), host=config.host, port=config.port,
                         grpc_port=config.grpc_port, max_batch_size=config.max_batch_size,
                         batch_timeout_ms=config.batch_timeout_ms, max_request_batch=config.max_request_batch,
                         max_chars=config.max_chars, verbose=config.verbose,
                         poll_seconds=config.poll_seconds, request_timeout_s=config.request_timeout_s,
                         index=config.index, index_model=config.index_model, api_key=config.api_key,
                         ui=config.ui, threshold=config.threshold, long_text=config.long_text,
                         command_line=True).start()
    grpc = f", gRPC {config.host}:{server.grpc_port}" if server.grpc_port else ""
    version = f" version {server.version}" if server.version else ""
    print(f"serving {server.name}{version} ({server.path}): REST {server.url}{grpc}", flush=True)
    for name in list(server.engines)[1:]:
        print(f"serving {name} ({server.engines[name].source}): REST {server.url.rsplit('/', 1)[0]}/{name}",
              flush=True)
    extras = ["OpenAI-compatible base URL " + server.base_url] + (["web page " + server.base_url[:-3] + "/"]
                                                                   if config.ui else [])
    print("; ".join(extras), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0
