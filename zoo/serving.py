"""Serve an exported zoo SavedModel with the TF Serving APIs: REST (stdlib ``http.server``) and gRPC
(``tensorflow-serving-api`` protos, ``PredictionService`` and ``ModelService``).

>>> server = ModelServer("exported/default", port=0, grpc_port=0).start()
>>> server.url                      # http://127.0.0.1:<port>/v1/models/default
>>> server.stop()

Concurrent requests for the embedding signatures (string in, fixed-size out) are merged into one model call
by a batcher thread (those that arrive within ``batch_timeout_ms``, up to ``max_batch_size`` rows). Bad
requests get HTTP 400 (gRPC INVALID_ARGUMENT) with a message; the server keeps serving.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import queue
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

log = logging.getLogger("zoo.serving")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_STOP = object()  # tells the batcher thread to end


class RequestError(ValueError):
    """A bad request (HTTP 400, gRPC INVALID_ARGUMENT)."""


class NotFound(LookupError):
    """An unknown model, version, signature or route (HTTP 404, gRPC NOT_FOUND)."""


def find_version(model_dir):
    """(version, path) of the SavedModel to serve: ``model_dir`` itself if it holds ``saved_model.pb``
    (version = its folder name if numeric, else 1), else its highest numeric sub-folder (TF Serving's
    ``<base>/<name>/<version>`` layout)."""
    model_dir = os.path.abspath(os.fspath(model_dir))
    if os.path.exists(os.path.join(model_dir, "saved_model.pb")):
        name = os.path.basename(model_dir)
        return (int(name) if name.isdigit() else 1), model_dir
    versions = sorted(int(d) for d in (os.listdir(model_dir) if os.path.isdir(model_dir) else [])
                      if d.isdigit() and os.path.exists(os.path.join(model_dir, d, "saved_model.pb")))
    if not versions:
        raise FileNotFoundError(f"{model_dir}: no SavedModel (expected {model_dir}/saved_model.pb or "
                                f"{model_dir}/<version>/saved_model.pb, as written by `zoo export`)")
    return versions[-1], os.path.join(model_dir, str(versions[-1]))


class Signature:
    """One signature of the loaded SavedModel: its inputs {name: (dtype, rank)} and output names.

    ``batchable``: string inputs and outputs whose shape past the batch axis is fixed (``embedding``
    [batch, H]), so requests can be merged and split without their answers depending on each other
    (``tokenize``'s [batch, length] outputs would carry the merged batch's padding).
    """

    def __init__(self, name, fn):
        import tensorflow as tf

        self.name, self.fn = name, fn
        specs = fn.structured_input_signature[1]
        self.inputs = {k: (s.dtype, s.shape.rank) for k, s in sorted(specs.items())}
        self.outputs = sorted(fn.structured_outputs)
        self.batchable = (all(dtype == tf.string for dtype, _ in self.inputs.values())
                          and all(s.shape[1:].is_fully_defined() for s in fn.structured_outputs.values()))

    def __call__(self, arrays):
        import tensorflow as tf

        out = self.fn(**{k: tf.constant(v, dtype=self.inputs[k][0]) for k, v in arrays.items()})
        return {k: v.numpy() for k, v in out.items()}


class Batcher:
    """Runs requests on one thread, merging those of the same signature that arrive within ``timeout_s``
    of the first one (up to ``max_batch_size`` rows) into one call."""

    def __init__(self, max_batch_size=64, timeout_s=0.002):
        self.max_batch_size, self.timeout_s = max_batch_size, timeout_s
        self.stats = {"batches": 0, "requests": 0, "rows": 0}
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="zoo-batcher", daemon=True)
        self._thread.start()

    def submit(self, signature, arrays, rows):
        future = concurrent.futures.Future()
        self._queue.put((signature, arrays, rows, future))
        return future

    def close(self):
        """Finish the queued requests, then stop the thread."""
        self._queue.put(_STOP)
        self._thread.join(timeout=60)

    def _loop(self):
        carry = None
        while True:
            first = self._queue.get() if carry is None else carry
            carry = None
            if first is _STOP:
                return
            batch, rows = [first], first[2]
            deadline = time.monotonic() + self.timeout_s
            while rows < self.max_batch_size:
                remaining = deadline - time.monotonic()
                try:
                    item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP or item[0] is not first[0] or rows + item[2] > self.max_batch_size:
                    carry = item
                    break
                batch.append(item)
                rows += item[2]
            self._run(batch)

    def _run(self, batch):
        signature = batch[0][0]
        self.stats["batches"] += 1
        self.stats["requests"] += len(batch)
        self.stats["rows"] += sum(rows for _, _, rows, _ in batch)
        try:
            arrays = {k: np.concatenate([a[k] for _, a, _, _ in batch]) for k in batch[0][1]}
            out = signature(arrays)
        except Exception as e:  # noqa: BLE001 (handed to every waiting request)
            for *_, future in batch:
                future.set_exception(e)
            return
        start = 0
        for _, _, rows, future in batch:
            future.set_result({k: v[start:start + rows] for k, v in out.items()})
            start += rows


class ModelServer:
    """TF Serving-compatible REST (and optionally gRPC) server for one exported model.

    ``model_dir``: a SavedModel folder or ``<base>/<name>`` with numeric versions (the highest is served).
    ``port`` / ``grpc_port``: 0 picks a free port (read ``rest_port`` / ``grpc_port`` after ``start``);
    ``grpc_port=None`` disables gRPC. Limits: ``max_request_batch`` rows per request, ``max_chars``
    characters per text, ``max_body_bytes`` per request.
    """

    def __init__(self, model_dir, name="default", host="127.0.0.1", port=8501, grpc_port=None,
                 max_batch_size=64, batch_timeout_ms=2.0, max_request_batch=256, max_chars=4096,
                 max_body_bytes=16 << 20, verbose=False):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"model name {name!r}: use letters, digits, '_', '-', '.'")
        self.name, self.host = name, host
        self.version, self.path = find_version(model_dir)
        self._ports = (port, grpc_port)
        self.rest_port = self.grpc_port = None
        self.max_request_batch, self.max_chars, self.max_body_bytes = max_request_batch, max_chars, max_body_bytes
        self.max_batch_size, self.batch_timeout_s = max_batch_size, batch_timeout_ms / 1000
        self.verbose = verbose
        self.signatures, self._http, self._grpc, self._batcher = {}, None, None, None

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
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the tf-text ops the tokenizer graph uses)

        self._module = tf.saved_model.load(self.path)
        self.signatures = {k: Signature(k, fn) for k, fn in self._module.signatures.items()}
        if "serving_default" not in self.signatures:
            raise ValueError(f"{self.path}: the SavedModel has no serving_default signature")
        for sig in self.signatures.values():  # warm-up: the first call of a loaded function is slow
            if all(dtype == tf.string for dtype, _ in sig.inputs.values()):
                sig({k: np.array([b"warm up"], object) for k in sig.inputs})
        self._batcher = Batcher(self.max_batch_size, self.batch_timeout_s)
        self._http = ThreadingHTTPServer((self.host, self._ports[0]), _handler_class(self))
        self._http.daemon_threads = True
        self.rest_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, name="zoo-rest", daemon=True).start()
        if self._ports[1] is not None:
            self._grpc, self.grpc_port = _start_grpc(self, self._ports[1])

    def stop(self):
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(grace=1).wait()
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

    # ------------------------------------------------------------------ the common path
    def check_model(self, name, version=None):
        if name != self.name:
            raise NotFound(f"Servable not found for request: model {name!r} (this server has {self.name!r})")
        if version is not None and int(version) != self.version:
            raise NotFound(f"Servable not found for request: {name} version {version} "
                           f"(version {self.version} is loaded)")

    def status(self, name, version=None):
        """TF Serving's GetModelStatus answer as a dict."""
        self.check_model(name, version)
        return {"model_version_status": [{"version": str(self.version), "state": "AVAILABLE",
                                          "status": {"error_code": "OK", "error_message": ""}}]}

    def signature(self, name):
        name = name or "serving_default"
        if name not in self.signatures:
            raise RequestError(f"signature {name!r} not found; this model has {sorted(self.signatures)}")
        return self.signatures[name]

    def predict(self, signature_name, arrays, timeout=60):
        """Validated numpy inputs {name: array} -> outputs {name: array}; see ``Signature.batchable``."""
        sig = self.signature(signature_name)
        rows = self.check_inputs(sig, arrays)
        if sig.batchable:
            return self._batcher.submit(sig, arrays, rows).result(timeout)
        import tensorflow as tf

        try:
            return sig(arrays)
        except tf.errors.InvalidArgumentError as e:
            raise RequestError(f"the model rejected the input: {_tf_error_text(e.message)}") from None

    def check_inputs(self, sig, arrays):
        """Checks names, types, batch size and text lengths; returns the batch size."""
        import tensorflow as tf

        if set(arrays) != set(sig.inputs):
            raise RequestError(f"signature {sig.name!r} takes inputs {sorted(sig.inputs)}, got {sorted(arrays)}")
        sizes = set()
        for key, a in arrays.items():
            dtype, rank = sig.inputs[key]
            if a.ndim != rank:
                raise RequestError(f"input {key!r} must have rank {rank} (a batch of "
                                   f"{'strings' if dtype == tf.string else 'rows'}), got shape {list(a.shape)}")
            if dtype == tf.string:
                for i, v in enumerate(a):
                    if not isinstance(v, bytes):
                        raise RequestError(f"input {key!r}[{i}] must be a string, got {type(v).__name__}")
                    try:
                        n = len(v.decode("utf-8"))
                    except UnicodeDecodeError:
                        raise RequestError(f"input {key!r}[{i}] is not valid UTF-8") from None
                    if n > self.max_chars:
                        raise RequestError(f"input {key!r}[{i}] has {n} characters; the limit is {self.max_chars}")
            elif a.dtype.kind not in "iu" or (a.size and (a.min() < INT32_MIN or a.max() > INT32_MAX)):
                raise RequestError(f"input {key!r} must hold int32 integers, got {a.dtype}")
            sizes.add(len(a))
        if len(sizes) != 1:
            raise RequestError(f"inputs have different batch sizes: {sorted(sizes)}")
        rows = sizes.pop()
        if rows == 0:
            raise RequestError("empty batch: send at least one instance")
        if rows > self.max_request_batch:
            raise RequestError(f"batch of {rows} instances; the limit is {self.max_request_batch} per request")
        return rows

    def metadata(self, name, version=None):
        """The SignatureDefs of the served SavedModel (TF Serving's GetModelMetadata)."""
        from tensorflow.core.protobuf import saved_model_pb2

        self.check_model(name, version)
        proto = saved_model_pb2.SavedModel()
        with open(os.path.join(self.path, "saved_model.pb"), "rb") as f:
            proto.ParseFromString(f.read())
        return proto.meta_graphs[0].signature_def

    # ------------------------------------------------------------------ REST
    def rest_predict(self, body):
        """A REST predict body (bytes) -> response dict (TF Serving's row or columnar format)."""
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
        sig = self.signature(signature_name)
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
                    raise RequestError(f"instances[{i}] has keys {sorted(inst)}; signature {sig.name!r} "
                                       f"takes {names}")
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
        arrays = {k: _json_column(k, v, sig.inputs[k][0]) for k, v in columns.items()}
        out = self.predict(sig.name, arrays)
        if "instances" in request:
            if len(out) == 1:
                return {"predictions": next(iter(out.values())).tolist()}
            n = len(next(iter(out.values())))
            return {"predictions": [{k: v[i].tolist() for k, v in out.items()} for i in range(n)]}
        if len(out) == 1:
            return {"outputs": next(iter(out.values())).tolist()}
        return {"outputs": {k: v.tolist() for k, v in out.items()}}


def _tf_error_text(message):
    """The informative line of a TF runtime error ("indices[0,0] = 99999 is not in [0, 21128)")."""
    lines = [line.strip() for line in message.splitlines()]
    useful = [line for line in lines
              if line and not line.startswith(("Graph execution error", "Detected at node", "<stack", "[["))]
    return (useful or lines or [""])[0]


def _json_column(key, values, dtype):
    """A JSON list -> numpy array for one input: UTF-8 bytes for strings, int64 for integers."""
    import tensorflow as tf

    if not isinstance(values, list):
        raise RequestError(f"input {key!r} must be a list (one value per instance)")
    if dtype == tf.string:
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


_ROUTE = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+))?(?:(:predict)|(/metadata))?$")


def _handler_class(server):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "zoo-serving"
        disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed-ACK stall)

        def do_GET(self):
            self._handle("GET")

        def do_POST(self):
            self._handle("POST")

        def _handle(self, method):
            code, reply = 200, None
            try:
                body = self._read_body() if method == "POST" else b""
                match = _ROUTE.match(self.path.split("?")[0])
                if not match:
                    raise NotFound(f"no such route: {method} {self.path} (use /v1/models/<name>[:predict])")
                name, version, predict, metadata = match.groups()
                if bool(predict) != (method == "POST"):
                    raise NotFound(f"{method} {self.path}: use POST for :predict and GET for status/metadata")
                server.check_model(name, version)
                if predict:
                    reply = server.rest_predict(body)
                elif metadata:
                    from google.protobuf.json_format import MessageToDict

                    defs = server.metadata(name, version)
                    reply = {"model_spec": {"name": name, "signature_name": "", "version": str(server.version)},
                             "metadata": {"signature_def": {"signature_def": {
                                 k: MessageToDict(v) for k, v in defs.items()}}}}
                else:
                    reply = server.status(name, version)
            except RequestError as e:
                code, reply = 400, {"error": str(e)}
            except NotFound as e:
                code, reply = 404, {"error": str(e)}
            except _BodyError as e:
                code, reply = e.code, {"error": str(e)}
                self.close_connection = True
            except Exception as e:  # noqa: BLE001 (a server bug must not stop the server)
                log.exception("error while serving %s %s", method, self.path)
                code, reply = 500, {"error": f"internal error: {type(e).__name__}: {e}"}
            data = json.dumps(reply, ensure_ascii=False).encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _read_body(self):
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                raise _BodyError(411, "a POST needs a Content-Length header")
            if int(length) > server.max_body_bytes:
                raise _BodyError(413, f"request body of {length} bytes; the limit is {server.max_body_bytes}")
            return self.rfile.read(int(length))

        def log_message(self, fmt, *args):
            if server.verbose:
                log.info("%s %s", self.address_string(), fmt % args)

    return Handler


class _BodyError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------- gRPC
def _start_grpc(server, port):
    """Start the gRPC PredictionService (Predict, GetModelMetadata) and ModelService (GetModelStatus)."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2, model_service_pb2_grpc,
                                         predict_pb2, prediction_service_pb2_grpc)

    def guarded(method):
        def wrapper(self, request, context):
            try:
                return method(self, request, context)
            except RequestError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            except NotFound as e:
                context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        return wrapper

    def check_spec(spec):
        if spec.version_label:
            raise RequestError("version labels are not supported; use a version number")
        server.check_model(spec.name, spec.version.value if spec.HasField("version") else None)

    class Prediction(prediction_service_pb2_grpc.PredictionServiceServicer):
        @guarded
        def Predict(self, request, context):
            check_spec(request.model_spec)
            arrays = {}
            for key, proto in request.inputs.items():
                try:
                    arrays[key] = tf.make_ndarray(proto)
                except Exception as e:  # noqa: BLE001
                    raise RequestError(f"input {key!r}: cannot read the TensorProto ({e})") from None
            sig = server.signature(request.model_spec.signature_name)
            out = server.predict(sig.name, arrays)
            wanted = list(request.output_filter) or list(out)
            missing = set(wanted) - set(out)
            if missing:
                raise RequestError(f"output_filter names unknown outputs {sorted(missing)}; outputs: {sorted(out)}")
            response = predict_pb2.PredictResponse()
            response.model_spec.name = server.name
            response.model_spec.version.value = server.version
            response.model_spec.signature_name = sig.name
            for k in wanted:
                response.outputs[k].CopyFrom(tf.make_tensor_proto(out[k]))
            return response

        @guarded
        def GetModelMetadata(self, request, context):
            check_spec(request.model_spec)
            if list(request.metadata_field) != ["signature_def"]:
                raise RequestError("metadata_field must be ['signature_def']")
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = server.name
            response.model_spec.version.value = server.version
            defs = get_model_metadata_pb2.SignatureDefMap()
            for k, v in server.metadata(server.name).items():
                defs.signature_def[k].CopyFrom(v)
            response.metadata["signature_def"].Pack(defs)
            return response

    class Models(model_service_pb2_grpc.ModelServiceServicer):
        @guarded
        def GetModelStatus(self, request, context):
            check_spec(request.model_spec)
            response = get_model_status_pb2.GetModelStatusResponse()
            status = response.model_version_status.add()
            status.version = server.version
            status.state = get_model_status_pb2.ModelVersionStatus.AVAILABLE
            return response

    options = [("grpc.max_receive_message_length", server.max_body_bytes),
               ("grpc.max_send_message_length", 64 << 20)]
    grpc_server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=16), options=options)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Prediction(), grpc_server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(Models(), grpc_server)
    bound = grpc_server.add_insecure_port(f"{server.host}:{port}")
    if not bound:
        raise OSError(f"cannot bind gRPC to {server.host}:{port}")
    grpc_server.start()
    return grpc_server, bound
