"""The served model: a version folder written by ``zoo export`` (a SavedModel, or an ONNX export: the fused graph
in ONNX Runtime with the tokenizer in Python, behind the same signatures), its signatures, input checks and TF
Serving's status and metadata answers. Protocol-free: REST and gRPC both call ``ServedModel.predict``."""

from __future__ import annotations

import os

import numpy as np

from ..errors import CheckpointError, ZooError
from ..inference.pipeline import prompted
from ..paths import EXPORT_MANIFEST, check_manifest, read_json_file

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class RequestError(ZooError, ValueError):
    """A bad request (HTTP 400, gRPC INVALID_ARGUMENT)."""


class NotFound(ZooError, LookupError):
    """An unknown model, version, signature or route (HTTP 404, gRPC NOT_FOUND)."""


MODEL_FILES = ("saved_model.pb", "model.onnx")  # a SavedModel, or an ONNX export (``zoo export --format onnx``)


def _is_export(folder):
    return any(os.path.exists(os.path.join(folder, f)) for f in MODEL_FILES)


def find_version(model_dir):
    """(version, path) of the export to serve: ``model_dir`` itself if it holds ``saved_model.pb`` or
    ``model.onnx`` (version = its folder name if numeric, else 1), else its highest numeric sub-folder (TF
    Serving's ``<base>/<name>/<version>`` layout)."""
    model_dir = os.path.abspath(os.fspath(model_dir))
    if _is_export(model_dir):
        name = os.path.basename(model_dir)
        return (int(name) if name.isdigit() else 1), model_dir
    versions = sorted(int(d) for d in (os.listdir(model_dir) if os.path.isdir(model_dir) else [])
                      if d.isdigit() and _is_export(os.path.join(model_dir, d)))
    if not versions:
        raise FileNotFoundError(f"{model_dir}: no SavedModel (expected {model_dir}/saved_model.pb or "
                                f"{model_dir}/<version>/saved_model.pb, as written by `zoo export`; or model.onnx "
                                f"from `zoo export --format onnx`)")
    return versions[-1], os.path.join(model_dir, str(versions[-1]))


class Signature:
    """One signature of the loaded SavedModel: its inputs {name: (dtype, rank)} and output names.

    ``batchable``: string inputs and outputs whose shape past the batch axis is fixed (``embedding``
    [batch, H]), so requests can be merged and split without their answers depending on each other
    (``tokenize``'s [batch, length] outputs would carry the merged batch's padding).
    """

    def __init__(self, name, fn):
        self.name, self.fn = name, fn
        specs = fn.structured_input_signature[1]
        self.inputs = {k: (s.dtype.name, s.shape.rank) for k, s in sorted(specs.items())}  # ("string", 1) ...
        self.outputs = sorted(fn.structured_outputs)
        self.strings_in = all(dtype == "string" for dtype, _ in self.inputs.values())
        self.batchable = self.strings_in and all(s.shape[1:].is_fully_defined()
                                                 for s in fn.structured_outputs.values())

    def output_width(self, name):
        """The size of output ``name``'s last axis (None when unknown)."""
        return self.fn.structured_outputs[name].shape[-1]

    def __call__(self, arrays):
        import tensorflow as tf

        try:
            out = self.fn(**{k: tf.constant(v, dtype=self.inputs[k][0]) for k, v in arrays.items()})
        except tf.errors.InvalidArgumentError as e:
            raise RequestError(f"the model rejected the input: {_tf_error_text(e.message)}") from None
        return {k: v.numpy() for k, v in out.items()}


def served_prompt(manifest):
    """The text an export's text signature puts before each input: its embedding model's default prompt, as the
    manifest records it ("" for none, and for an export of an older zoo)."""
    model = manifest.get("model") or {}
    return prompted("", model.get("prompts") or {}, default_prompt_name=model.get("default_prompt_name"))


class ServedModel:
    """One loaded version: ``signatures`` by name, limits on what a request may hold, and the answers TF
    Serving gives about it (status, metadata)."""

    def __init__(self, name, version, path, max_request_batch=256, max_chars=4096):
        self.name, self.version, self.path = name, version, path
        self.max_request_batch, self.max_chars = max_request_batch, max_chars
        manifest = os.path.join(path, EXPORT_MANIFEST)
        record = {}
        if os.path.exists(manifest):  # written by `zoo export`; TF Serving ignores it
            record = read_json_file(manifest, "an export's manifest")
            check_manifest(path, record.get("files"), EXPORT_MANIFEST)
        self.tokenizer, self.limit = self._length_tools(path, record)
        self.normalize = (record.get("model") or {}).get("normalize", True)  # its HeadSpec's (older exports: True)
        self.prompt = served_prompt(record)  # what the text signature puts before each text (lengths count it)
        if os.path.exists(os.path.join(path, "model.onnx")) and not os.path.exists(os.path.join(path, "saved_model.pb")):
            self._module, self.signatures = None, onnx_signatures(path)
            for sig in self.signatures.values():  # warm-up, and the output shapes for the metadata
                if sig.strings_in:
                    sig.warm_up()
            return
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the tf-text ops the tokenizer graph uses)

        try:
            self._module = tf.saved_model.load(path)
        except Exception as e:  # noqa: BLE001 -- a damaged saved_model.pb or variables file
            raise CheckpointError(f"{path}: cannot load the SavedModel ({type(e).__name__}: "
                                  f"{str(e).strip().splitlines()[0][:300]})") from None
        self.signatures = {k: Signature(k, fn) for k, fn in self._module.signatures.items()}
        if "serving_default" not in self.signatures:
            raise ValueError(f"{path}: the SavedModel has no serving_default signature")
        for sig in self.signatures.values():  # warm-up: the first call of a loaded function is slow
            if sig.strings_in:
                sig({k: np.array([b"warm up"], object) for k in sig.inputs})

    @staticmethod
    def _length_tools(path, record):
        """(zoo.Tokenizer, maxlen) of an export that records them (``zoo.serving.lengths`` counts and windows
        over-long inputs with them); (None, None) for an older export, whose over-long inputs the graph cuts."""
        from ..paths import VOCAB_FILE
        from ..tokenizer.wordpiece import Tokenizer

        if not record.get("maxlen") or not os.path.exists(os.path.join(path, VOCAB_FILE)):
            if os.path.exists(os.path.join(path, "saved_model.pb")):
                from ..logs import log

                log.warning("%s: this export records no tokenizer and maxlen (written by an older zoo): inputs over "
                            "its maxlen are cut without notice; export it again to have them refused or chunked",
                            path)
            return None, None
        return Tokenizer.from_preset(path), int(record["maxlen"])

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

    def metadata(self, name, version=None):
        """The SignatureDefs of the served SavedModel (TF Serving's GetModelMetadata)."""
        self.check_model(name, version)
        if self._module is None:
            return {k: sig.signature_def() for k, sig in self.signatures.items()}
        from tensorflow.core.protobuf import saved_model_pb2

        proto = saved_model_pb2.SavedModel()
        with open(os.path.join(self.path, "saved_model.pb"), "rb") as f:
            proto.ParseFromString(f.read())
        return proto.meta_graphs[0].signature_def

    def check_inputs(self, sig, arrays):
        """Checks names, types, batch size and text lengths; returns the batch size."""
        if set(arrays) != set(sig.inputs):
            raise RequestError(f"signature {sig.name!r} takes inputs {sorted(sig.inputs)}, got {sorted(arrays)}")
        sizes = set()
        for key, a in arrays.items():
            dtype, rank = sig.inputs[key]
            if a.ndim != rank:
                raise RequestError(f"input {key!r} must have rank {rank} (a batch of "
                                   f"{'strings' if dtype == 'string' else 'rows'}), got shape {list(a.shape)}")
            if dtype == "string":
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


def _tf_error_text(message):
    """The informative line of a TF runtime error ("indices[0,0] = 99999 is not in [0, 21128)")."""
    lines = [line.strip() for line in message.splitlines()]
    useful = [line for line in lines
              if line and not line.startswith(("Graph execution error", "Detected at node", "<stack", "[["))]
    return (useful or lines or [""])[0]


# ----------------------------------------------------------------------------------- ONNX exports
class OnnxSignature:
    """A signature of an ONNX export, shaped like ``Signature`` (``inputs``, ``outputs``, ``strings_in``,
    ``batchable``, ``output_width``) without TensorFlow."""

    def __init__(self, name, inputs, outputs, call, fixed_shapes=True):
        self.name, self.inputs, self.outputs, self._call = name, dict(sorted(inputs.items())), sorted(outputs), call
        self.strings_in = all(dtype == "string" for dtype, _ in self.inputs.values())
        self._shapes = dict(outputs)  # output -> shape past the batch axis (None: unknown until warmed up)
        self.fixed_shapes = fixed_shapes  # False: outputs [batch, length] (tokenize), never merged by the batcher

    @property
    def batchable(self):
        return self.strings_in and self.fixed_shapes and all(s is not None for s in self._shapes.values())

    def output_width(self, name):
        shape = self._shapes.get(name)
        return shape[-1] if shape else None

    def warm_up(self):
        out = self({k: np.array([b"warm up"], object) for k in self.inputs})
        if self.fixed_shapes:
            self._shapes = {k: list(v.shape[1:]) for k, v in out.items()}

    def __call__(self, arrays):
        return self._call(arrays)

    def signature_def(self):
        """This signature as a TF Serving SignatureDef (for the metadata answers; ``zoo.serving.protos``)."""
        from .protos import signature_def

        return signature_def(self.name, {k: (dtype, [None] * rank) for k, (dtype, rank) in self.inputs.items()},
                             {k: ("int32" if k in ID_NAMES else "float32", [None, *(shape or [None])])
                              for k, shape in self._shapes.items()})


ID_NAMES = ("token_ids", "segment_ids", "padding_mask")


def onnx_signatures(path):
    """The ``text``, ``ids``, ``tokenize`` and ``serving_default`` (= text) signatures of an ONNX export: the fused
    graph in ONNX Runtime, the texts tokenized with ``zoo.Tokenizer`` (the ids the SavedModel's graph gives). No
    TensorFlow is imported."""
    from ..inference.sessions import new_session, require_onnx
    from ..tokenizer.wordpiece import Tokenizer

    try:
        require_onnx()
    except ImportError as e:
        raise CheckpointError(f"{path}: an ONNX export; {e}") from None
    manifest = read_json_file(os.path.join(path, EXPORT_MANIFEST), "an ONNX export's manifest")
    try:
        session = new_session(os.path.join(path, "model.onnx"))
        tokenizer = Tokenizer.from_preset(path)
        text_inputs, output, maxlen = list(manifest["text_inputs"]), manifest["output"], int(manifest["maxlen"])
        limits = {"token_ids": int(manifest["vocabulary_size"]), "segment_ids": int(manifest["num_segments"]),
                  "padding_mask": 2}
        max_positions = int(manifest["max_positions"])
    except Exception as e:  # noqa: BLE001 -- a damaged graph, tokenizer or manifest
        raise CheckpointError(f"{path}: cannot load the ONNX export ({type(e).__name__}: "
                              f"{str(e).strip().splitlines()[0][:300]})") from None

    prompt = served_prompt(manifest)

    def tokenize(arrays):  # the default prompt first, as the SavedModel's text signature and encode() put it
        texts = [[prompt + v.decode("utf-8") for v in arrays[k]] for k in text_inputs]
        return tokenizer(texts[0], texts[1] if len(texts) > 1 else None, maxlen=maxlen)

    def from_ids(arrays):
        ids = {k: np.asarray(arrays[k]) for k in ID_NAMES}
        if len({v.shape for v in ids.values()}) != 1:
            raise RequestError(f"token_ids, segment_ids and padding_mask must have one shape, got "
                               f"{[list(v.shape) for v in ids.values()]}")
        if ids["token_ids"].shape[1] > max_positions:
            raise RequestError(f"rows of {ids['token_ids'].shape[1]} tokens; the model has {max_positions} positions")
        for k, limit in limits.items():
            bad = ids[k][(ids[k] < 0) | (ids[k] >= limit)]
            if bad.size:
                raise RequestError(f"the model rejected the input: {k} value {int(bad[0])} is not in [0, {limit})")
        return {output: session.run(None, {k: v.astype("int32") for k, v in ids.items()})[0]}

    strings = {k: ("string", 1) for k in text_inputs}
    return {name: OnnxSignature(name, strings, {output: None}, lambda arrays: from_ids(tokenize(arrays)))
            for name in ("text", "serving_default")} | {
        "ids": OnnxSignature("ids", {k: ("int32", 2) for k in ID_NAMES}, {output: None}, from_ids),
        "tokenize": OnnxSignature("tokenize", strings, {k: [None] for k in ID_NAMES}, tokenize, fixed_shapes=False)}
