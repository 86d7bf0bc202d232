"""The APIs retrieval stacks call, next to TF Serving's: OpenAI's embeddings (``POST /v1/embeddings``,
``GET /v1/models``), text-embeddings-inference's rerank (``POST /rerank``), and zoo's ``POST /v1/search`` (a
loaded index) and ``POST /v1/paraphrases`` (a served SimBERT preset).

Each handler takes the server and the parsed JSON body and returns the JSON answer, or raises ``ApiError``
(or ``RequestError`` / ``NotFound``), which ``rest`` writes in the route's error shape: OpenAI's
``{"error": {"message", "type", "param", "code"}}`` or text-embeddings-inference's ``{"error", "error_type"}``.
"""

from __future__ import annotations

import base64

import numpy as np

from ..retrieval.base import SEARCH_MODES
from ..vectors import normalize_rows
from .engines import CROSS_ENCODER, EMBEDDING
from .lengths import TooLong
from .model import NotFound, RequestError

MAX_PARAPHRASE_SAMPLES = 200


class ApiError(Exception):
    """An answer other than 200: ``status``, ``message``, and the ``param`` (field) it is about."""

    def __init__(self, status, message, param=None, code=None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


def openai_error(status, message, param=None, code=None):
    kind = {401: "authentication_error", 404: "invalid_request_error", 429: "rate_limit_error"}.get(
        status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def tei_error(status, message):
    kind = {401: "Unhealthy", 413: "Validation", 422: "Validation", 503: "Overloaded"}.get(
        status, "Validation" if status < 500 else "Backend")
    return {"error": message, "error_type": kind}


# ------------------------------------------------------------------------------ field checks
def check_fields(body, allowed, required=()):
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ApiError(400, f"Unrecognized request argument supplied: {', '.join(unknown)}", param=unknown[0])
    for name in required:
        if name not in body:
            raise ApiError(400, f"you must provide '{name}'", param=name)


def integer(body, name, default, low, high):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ApiError(400, f"'{name}' must be an integer from {low} to {high}, got {value!r:.40}", param=name)
    return value


def boolean(body, name, default=False):
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise ApiError(400, f"'{name}' must be true or false, got {value!r:.40}", param=name)
    return value


def texts_field(server, value, name, allow_empty=True):
    """A string or a list of strings -> list of strings, within the server's limits."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts:
        raise ApiError(400, f"'{name}' must be a string or a non-empty list of strings", param=name)
    if all(isinstance(t, int) and not isinstance(t, bool) for t in texts) or any(isinstance(t, list) for t in texts):
        raise ApiError(400, f"'{name}' holds token ids; this server takes text (its tokenizer is not OpenAI's: "
                            f"with LangChain's OpenAIEmbeddings pass check_embedding_ctx_length=False)", param=name)
    if len(texts) > server.max_request_batch:
        raise ApiError(400, f"'{name}' has {len(texts)} texts; the limit is {server.max_request_batch} per request",
                       param=name)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ApiError(400, f"'{name}'[{i}] must be a string, got {type(t).__name__}", param=name)
        if not allow_empty and not t.strip():
            raise ApiError(400, f"'{name}'[{i}] is empty", param=name)
        if len(t) > server.max_chars:
            raise ApiError(400, f"'{name}'[{i}] has {len(t)} characters; the limit is {server.max_chars}",
                           param=name)
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, f"'{name}'[{i}] is not valid Unicode (a lone surrogate)", param=name) from None
    return texts


def string_field(body, name, default=None):
    value = body.get(name, default)
    if not isinstance(value, str) or not value.strip():
        raise ApiError(400, f"'{name}' must be a non-empty string", param=name)
    return value


def served(server, body, kind, route):
    """The engine named by ``model`` (default: the first of ``kind``)."""
    name = body.get("model")
    if name is None:
        name = next((n for n, e in server.engines.items() if e.kind == kind), None)
        if name is None:
            raise ApiError(400, f"{route}: this server serves no {kind} model ({sorted(server.engines)})",
                           param="model")
    if not isinstance(name, str):
        raise ApiError(400, "'model' must be a string", param="model")
    if name not in server.engines:
        raise ApiError(404, f"The model '{name}' does not exist; this server has {sorted(server.engines)}",
                       param="model", code="model_not_found")
    engine = server.engines[name]
    try:
        engine.need(kind, route)
    except RequestError as e:
        raise ApiError(400, str(e), param="model") from None
    return engine


# ------------------------------------------------------------------------------ OpenAI
def list_models(server):
    """OpenAI's model list; zoo adds ``index`` (what ``/v1/search`` answers from, or null)."""
    index = None
    if server.index is not None:
        index = {"texts": len(server.index), "dim": server.index.dim, "model": server.index.model,
                 "encoder": server.index_engine.name if server.index_engine else None}
    return {"object": "list", "data": [e.info() for e in server.engines.values()], "index": index}


async def embeddings(server, body):
    """OpenAI's embeddings: ``input`` (a string or a list), ``model``, ``encoding_format`` ("float" or "base64":
    little-endian float32), ``dimensions`` (the first D dimensions, re-normalised), ``user`` (ignored); zoo's
    ``truncate`` (true: an input over the model's limit is cut, as ``encode`` does; otherwise the server's
    ``--long-text`` policy: by default it is refused, naming its length and the limit). ``usage`` counts the
    tokens embedded."""
    check_fields(body, ("input", "model", "encoding_format", "dimensions", "user", "truncate"),
                 required=("input", "model"))
    engine = served(server, body, EMBEDDING, "/v1/embeddings")
    texts = texts_field(server, body["input"], "input")
    mode = "truncate" if boolean(body, "truncate") else server.long_text
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise ApiError(400, f"'encoding_format' must be 'float' or 'base64', got {encoding!r:.40}",
                       param="encoding_format")
    dimensions = integer(body, "dimensions", None, 1, engine.dim)
    try:
        vectors, tokens = await engine.embed(texts, mode)
    except TooLong as e:
        raise ApiError(400, f"'input'[{e.index}] has {e.tokens} tokens; model {engine.name!r} takes at most {e.limit} "
                            "tokens per input: shorten it, send \"truncate\": true to cut it, or serve with "
                            f"{server.setting('long_text', 'chunk')} to embed it whole", param="input",
                       code="context_length_exceeded") from None
    vectors = np.asarray(vectors, dtype="float32")
    if dimensions is not None:
        vectors = vectors[:, :dimensions]  # the first dimensions, normalised again where the model normalises
        vectors = normalize_rows(vectors) if engine.normalize else vectors
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if encoding == "base64"
             else v.tolist()} for i, v in enumerate(vectors)]
    used = int(sum(tokens))
    return {"object": "list", "data": data, "model": engine.name,
            "usage": {"prompt_tokens": used, "total_tokens": used}}


# ------------------------------------------------------------------------------ text-embeddings-inference
async def rerank(server, body):
    """TEI's rerank: ``query``, ``texts``, ``raw_scores``, ``return_text``, ``truncate`` (true: a (query, text)
    pair over the model's limit is cut; otherwise it is refused with 413, as TEI does, unless the server runs
    ``--long-text truncate``), ``truncation_direction`` ("Right"); zoo's ``model`` picks a cross-encoder. Answers
    [{"index", "score"[, "text"]}] best first."""
    check_fields(body, ("query", "texts", "raw_scores", "return_text", "truncate", "truncation_direction", "model"),
                 required=("query", "texts"))
    engine = served(server, body, CROSS_ENCODER, "/rerank")
    query = string_field(body, "query")
    texts = texts_field(server, body["texts"], "texts", allow_empty=False)
    raw, with_text = boolean(body, "raw_scores"), boolean(body, "return_text")
    mode = "truncate" if boolean(body, "truncate") or server.long_text == "truncate" else "refuse"
    if body.get("truncation_direction", "Right") != "Right":
        raise ApiError(400, "'truncation_direction': only 'Right' is supported (zoo keeps a text's first tokens)",
                       param="truncation_direction")
    if len(query) > server.max_chars:
        raise ApiError(400, f"'query' has {len(query)} characters; the limit is {server.max_chars}", param="query")
    try:
        scores, _ = await engine.score([(query, t) for t in texts], mode)
    except TooLong as e:
        raise ApiError(413, f"Input validation error: the query and texts[{e.index}] make {e.tokens} tokens; model "
                            f"{engine.name!r} takes at most {e.limit}: send \"truncate\": true to cut them") from None
    scores = engine.scores(np.asarray(scores, "float32"), raw)
    order = np.argsort(-scores, kind="stable")
    return [{"index": int(i), "score": float(scores[i]), **({"text": texts[i]} if with_text else {})}
            for i in order]


# ------------------------------------------------------------------------------ zoo's own
async def search(server, body):
    """Top-k hits of the loaded index for one query text: ``query``, ``top_k``, ``mode`` (dense, lexical or
    hybrid), ``weight`` (hybrid: the dense side's share; default: the index's), ``filter`` (a Milvus index: an
    expression on the metadata fields)."""
    from starlette.concurrency import run_in_threadpool

    check_fields(body, ("query", "top_k", "mode", "weight", "filter"), required=("query",))
    if server.index is None:
        raise ApiError(404, f"no index is loaded (start the server with {server.setting('index', 'DIR')})")
    query = string_field(body, "query")
    texts_field(server, query, "query")
    top_k = integer(body, "top_k", 10, 1, 1000)
    mode = body.get("mode", "dense")
    if mode not in SEARCH_MODES:
        raise ApiError(400, f"'mode' must be one of {list(SEARCH_MODES)}, got {mode!r:.40}", param="mode")
    weight = body.get("weight")  # None: the index's own (calibrated) weight
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                               or not 0.0 <= weight <= 1.0):
        raise ApiError(400, f"'weight' must be a number in [0, 1], got {weight!r:.40}", param="weight")
    options = {}
    if body.get("filter") is not None:
        if not getattr(server.index, "filters", False):
            raise ApiError(400, "'filter' needs a Milvus index (this index has no metadata)", param="filter")
        options["filter"] = string_field(body, "filter")
    vectors = None
    if mode != "lexical":
        if server.index_engine is None:
            raise ApiError(400, f"mode {mode!r} embeds the query, and this server serves no sentence encoder: use "
                                f"mode 'lexical'", param="mode")
        vectors, _ = await server.index_engine.embed([query], server.long_text)
    try:
        hits = await run_in_threadpool(server.search_index, query, top_k, mode, weight, vectors, options)
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    return {"object": "list", "model": server.index_engine.name if server.index_engine else None, "mode": mode,
            "data": [{"id": i, "text": t, "score": s} for i, t, s in hits]}


async def paraphrases(server, body):
    """A served SimBERT's paraphrases of ``text``: ``n`` samples, the best ``k`` by cosine to the text."""
    check_fields(body, ("text", "model", "n", "k", "seed"), required=("text",))
    engine = served(server, body, EMBEDDING, "/v1/paraphrases")
    if not engine.paraphrases:
        raise ApiError(400, f"model {engine.name!r} writes no paraphrases (serve a SimBERT preset or run folder, not "
                            f"an export)", param="model")
    text = string_field(body, "text")
    texts_field(server, text, "text")
    n = integer(body, "n", 20, 1, MAX_PARAPHRASE_SAMPLES)
    k = integer(body, "k", 5, 1, n)
    seed = integer(body, "seed", None, 0, 2**31 - 1)
    found = await engine.paraphrase(text, n, k, seed)
    return {"object": "list", "model": engine.name, "data": [{"text": t, "score": s} for t, s in found]}


def as_api_error(error):
    """RequestError / NotFound from the model layer -> ApiError."""
    if isinstance(error, NotFound):
        return ApiError(404, str(error), code="model_not_found")
    if isinstance(error, RequestError):
        return ApiError(400, str(error))
    return error
