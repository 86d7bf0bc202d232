"""TF Serving's REST API on Starlette (served by uvicorn): routes, request bodies in the row (``instances``) and
columnar (``inputs``) formats, and errors as JSON with TF Serving's status codes."""

from __future__ import annotations

import asyncio
import hmac
import json
import re

import numpy as np

from ..logs import log
from .model import NotFound, RequestError

ROUTE = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+))?(?:(:predict)|(/metadata))?$")


class Unavailable(Exception):
    """The request waited longer than the server's per-request timeout (HTTP 503)."""


class BodyError(Exception):
    """A request body refused before it is read (HTTP 411 / 413)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def parse_predict(model, body):
    """A REST predict body (bytes) -> (signature, {input: numpy array}, row format?)."""
    try:
        request = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(f"malformed JSON: {e}") from None
    if not isinstance(request, dict):
        raise RequestError("the request must be a JSON object with 'instances' or 'inputs'")
    unknown = set(request) - {"instances", "inputs", "signature_name"}
    if unknown:
        raise RequestError(f"unknown field(s) {sorted(unknown)}; use 'instances' or 'inputs' "
                           f"(and optionally 'signature_name')")
    if ("instances" in request) == ("inputs" in request):
        raise RequestError("send exactly one of 'instances' (row format) or 'inputs' (columnar format)")
    signature_name = request.get("signature_name")
    if signature_name is not None and not isinstance(signature_name, str):
        raise RequestError("'signature_name' must be a string")
    sig = model.signature(signature_name)
    names = list(sig.inputs)
    if "instances" in request:
        instances = request["instances"]
        if not isinstance(instances, list):
            raise RequestError("'instances' must be a list")
        columns = {k: [] for k in names}
        for i, inst in enumerate(instances):
            if not isinstance(inst, dict):
                if len(names) > 1:
                    raise RequestError(f"instances[{i}] must be an object with keys {names}")
                inst = {names[0]: inst}
            elif set(inst) != set(names):
                raise RequestError(f"instances[{i}] has keys {sorted(inst)}; signature {sig.name!r} takes {names}")
            for k in names:
                columns[k].append(inst[k])
    else:
        columns = request["inputs"]
        if isinstance(columns, dict):
            if set(columns) != set(names):
                raise RequestError(f"'inputs' has keys {sorted(columns)}; signature {sig.name!r} takes {names}")
        elif len(names) == 1:
            columns = {names[0]: columns}
        else:
            raise RequestError(f"'inputs' must be an object with keys {names}")
    return sig, {k: json_column(k, v, sig.inputs[k][0]) for k, v in columns.items()}, "instances" in request


def format_outputs(out, row_format):
    """Model outputs -> TF Serving's ``predictions`` (row format) or ``outputs`` (columnar) answer."""
    if row_format:
        if len(out) == 1:
            return {"predictions": next(iter(out.values())).tolist()}
        n = len(next(iter(out.values())))
        return {"predictions": [{k: v[i].tolist() for k, v in out.items()} for i in range(n)]}
    if len(out) == 1:
        return {"outputs": next(iter(out.values())).tolist()}
    return {"outputs": {k: v.tolist() for k, v in out.items()}}


def json_column(key, values, dtype):
    """A JSON list -> numpy array for one input: UTF-8 bytes for strings, int64 for integers."""
    if not isinstance(values, list):
        raise RequestError(f"input {key!r} must be a list (one value per instance)")
    if dtype == "string":
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise RequestError(f"input {key!r}[{i}] must be a string, got {type(v).__name__}: {v!r:.40}")
        try:
            return np.array([v.encode("utf-8") for v in values], dtype=object).reshape(len(values))
        except UnicodeEncodeError:
            raise RequestError(f"input {key!r} holds a string that is not valid Unicode (a lone surrogate)") \
                from None
    try:
        a = np.array(values)
    except ValueError:
        raise RequestError(f"input {key!r}: rows must all have the same length") from None
    if a.dtype == object or (a.size and a.dtype.kind not in "iu"):
        raise RequestError(f"input {key!r} must hold integers (rows of equal length), got {a.dtype}")
    return a.astype(np.int64) if a.size else a.astype(np.int64).reshape(len(values), 0)


def authorized(server, request):
    """True when the server has no API key, or the request carries it as ``Authorization: Bearer KEY``."""
    if not server.api_key:
        return True
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), server.api_key.encode())


UNAUTHORIZED = "Incorrect API key provided: send the server's key as 'Authorization: Bearer KEY'"


def build_app(server):
    """The Starlette application of a ``ModelServer``: the OpenAI, rerank, search and paraphrase routes
    (``serving.apis``), the web page at ``/`` with ``ui``, and a catch-all route dispatching on TF Serving's
    paths."""
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, JSONResponse
    from starlette.routing import Route

    from . import apis

    async def read_body(request):
        length = request.headers.get("content-length")
        if length is None or not length.isdigit():
            raise BodyError(411, "a POST needs a Content-Length header")
        if int(length) > server.max_body_bytes:
            raise BodyError(413, f"request body of {length} bytes; the limit is {server.max_body_bytes}")
        try:  # a client that sends its body too slowly is cut off, without holding anything else up
            return await asyncio.wait_for(request.body(), server.request_timeout_s)
        except asyncio.TimeoutError:
            raise BodyError(408, f"the request body did not arrive within {server.request_timeout_s:g} s") from None

    def logged(request, code):
        if server.verbose:
            log.info("%s %s %s -> %d", request.client.host if request.client else "-", request.method,
                     request.url.path, code)

    def api_route(handler, method, shape):
        """A JSON API route: key check, body limits, JSON object, ``handler(server, body)``, errors in ``shape``
        ("openai" or "tei"; text-embeddings-inference answers a bad request with 422)."""
        error_body = apis.openai_error if shape == "openai" else lambda status, message, *_: apis.tei_error(
            status, message)

        async def endpoint(request):
            code, headers = 200, {}
            try:
                if not authorized(server, request):
                    raise apis.ApiError(401, UNAUTHORIZED, code="invalid_api_key")
                if request.method != method:
                    raise apis.ApiError(405, f"{request.method} {request.url.path}: use {method}")
                body = None
                if method == "POST":
                    raw = await read_body(request)
                    try:
                        body = json.loads(raw)
                    except (json.JSONDecodeError, UnicodeDecodeError) as e:
                        raise apis.ApiError(400, f"malformed JSON: {e}") from None
                try:
                    reply = await asyncio.wait_for(handler(server, body), server.request_timeout_s)
                except asyncio.TimeoutError:
                    raise apis.ApiError(503, f"the model did not answer within {server.request_timeout_s:g} s "
                                             f"(server overloaded?); try again") from None
                except (RequestError, NotFound) as e:
                    raise apis.as_api_error(e) from None
            except apis.ApiError as e:
                code = 422 if shape == "tei" and e.status == 400 else e.status
                reply = error_body(code, str(e), e.param, e.code)
            except BodyError as e:
                code, reply, headers = e.code, error_body(e.code, str(e)), {"connection": "close"}
            except Exception as e:  # noqa: BLE001 (a server bug must not stop the server)
                log.exception("error while serving %s %s", request.method, request.url.path)
                code, reply = 500, error_body(500, f"internal error: {type(e).__name__}: {e}")
            logged(request, code)
            return JSONResponse(reply, status_code=code, headers=headers)

        return endpoint

    async def handle(request):
        method, path, code, headers = request.method, request.url.path, 200, {}
        try:
            if not authorized(server, request):
                raise BodyError(401, UNAUTHORIZED)
            body = await read_body(request) if method == "POST" else b""
            match = ROUTE.match(path)
            if not match:
                raise NotFound(f"no such route: {method} {path} (use /v1/models/<name>[:predict], /v1/embeddings, "
                               f"/rerank, /v1/search)")
            name, version, predict, metadata = match.groups()
            if bool(predict) != (method == "POST"):
                raise NotFound(f"{method} {path}: use POST for :predict and GET for status/metadata")
            model = server.served_model(name)
            model.check_model(name, version)
            if predict:
                sig, arrays, row_format = parse_predict(model, body)
                try:
                    outputs = await asyncio.wait_for(server.predict_async(model, sig, arrays),
                                                     server.request_timeout_s)
                except asyncio.TimeoutError:
                    raise Unavailable(f"the model did not answer within {server.request_timeout_s:g} s "
                                      f"(server overloaded?); try again") from None
                reply = format_outputs(outputs, row_format)
            elif metadata:
                from google.protobuf.json_format import MessageToDict

                defs = model.metadata(name, version)
                reply = {"model_spec": {"name": name, "signature_name": "", "version": str(model.version)},
                         "metadata": {"signature_def": {"signature_def": {
                             k: MessageToDict(v) for k, v in defs.items()}}}}
            else:
                reply = model.status(name, version)
        except RequestError as e:
            code, reply = 400, {"error": str(e)}
        except NotFound as e:
            code, reply = 404, {"error": str(e)}
        except Unavailable as e:
            code, reply = 503, {"error": str(e)}
        except BodyError as e:
            code, reply, headers = e.code, {"error": str(e)}, {"connection": "close"}
        except Exception as e:  # noqa: BLE001 (a server bug must not stop the server)
            log.exception("error while serving %s %s", method, path)
            code, reply = 500, {"error": f"internal error: {type(e).__name__}: {e}"}
        logged(request, code)
        return JSONResponse(reply, status_code=code, headers=headers)

    async def models(server, _):
        return apis.list_models(server)

    async def page(request):
        from .ui import PAGE

        return HTMLResponse(PAGE)

    both = ["GET", "POST"]
    routes = [Route("/v1/embeddings", api_route(apis.embeddings, "POST", "openai"), methods=both),
              Route("/v1/models", api_route(models, "GET", "openai"), methods=both),
              Route("/v1/search", api_route(apis.search, "POST", "openai"), methods=both),
              Route("/v1/paraphrases", api_route(apis.paraphrases, "POST", "openai"), methods=both),
              Route("/rerank", api_route(apis.rerank, "POST", "tei"), methods=both)]
    if server.ui:
        routes.append(Route("/", page, methods=["GET"]))
    return Starlette(routes=routes + [Route("/{path:path}", handle, methods=both)])
