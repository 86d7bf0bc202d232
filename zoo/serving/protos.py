"""TF Serving's protobuf messages without TensorFlow: the descriptors of its gRPC API (``tf_serving.pb``, taken from
``tensorflow-serving-api`` by ``tools/extract_protos.py``: the same names and field numbers) in a private descriptor
pool, so they never clash with TensorFlow's own when a process loads both; and numpy <-> ``TensorProto``
conversions (``tf.make_ndarray`` / ``tf.make_tensor_proto`` for the types zoo serves)."""

from __future__ import annotations

import functools
import os

import numpy as np

DESCRIPTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_serving.pb")
# tensorflow.DataType values (types.proto) of the arrays zoo serves and reads
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_STRING, DT_INT64, DT_BOOL = 1, 2, 3, 7, 9, 10
NUMPY_TYPES = {DT_FLOAT: np.float32, DT_DOUBLE: np.float64, DT_INT32: np.int32, DT_INT64: np.int64, DT_BOOL: np.bool_}
VALUE_FIELDS = {DT_FLOAT: "float_val", DT_DOUBLE: "double_val", DT_INT32: "int_val", DT_INT64: "int64_val",
                DT_BOOL: "bool_val", DT_STRING: "string_val"}
DTYPE_NAMES = {"float32": DT_FLOAT, "float64": DT_DOUBLE, "int32": DT_INT32, "string": DT_STRING,
               "int64": DT_INT64, "bool": DT_BOOL}


@functools.lru_cache(maxsize=None)
def _pool():
    from google.protobuf import descriptor_pb2, descriptor_pool

    with open(DESCRIPTORS, "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool


@functools.lru_cache(maxsize=None)
def message(full_name):
    """The message class of ``full_name`` ("tensorflow.serving.PredictRequest", "tensorflow.TensorProto" ...)."""
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(full_name))


def to_array(proto):
    """A ``tensorflow.TensorProto`` -> numpy array (strings as an object array of bytes); ValueError for a type
    zoo does not read."""
    dtype = proto.dtype
    shape = [d.size for d in proto.tensor_shape.dim]
    if dtype == DT_STRING:
        values = np.array(list(proto.string_val), dtype=object)
    elif dtype in NUMPY_TYPES:
        kind = NUMPY_TYPES[dtype]
        values = np.frombuffer(proto.tensor_content, dtype=kind).copy() if proto.tensor_content else \
            np.array(getattr(proto, VALUE_FIELDS[dtype]), dtype=kind)
    else:
        raise ValueError(f"tensor dtype {dtype} is not read here (strings, float32/64, int32/64, bool)")
    size = int(np.prod(shape)) if shape else 1
    if values.size == 1 and size != 1:  # TF's short form: one value fills the tensor
        values = np.full(size, values[0], dtype=values.dtype)
    if values.size != size:
        raise ValueError(f"tensor of shape {shape} holds {values.size} values")
    return values.reshape(shape)


def to_proto(array):
    """A numpy array -> ``tensorflow.TensorProto`` (bytes or str as DT_STRING, numbers as tensor_content)."""
    array = np.asarray(array)
    proto = message("tensorflow.TensorProto")()
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    if array.dtype == object or array.dtype.kind in "SU":
        proto.dtype = DT_STRING
        proto.string_val.extend(v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in array.reshape(-1))
        return proto
    name = {"f": "float32" if array.dtype == np.float32 else "float64", "i": "int64" if array.dtype.itemsize == 8
            else "int32", "b": "bool", "u": "int64"}[array.dtype.kind]
    proto.dtype = DTYPE_NAMES[name]
    proto.tensor_content = np.ascontiguousarray(array, dtype=NUMPY_TYPES[proto.dtype]).tobytes()
    return proto


def signature_def(name, inputs, outputs):
    """A ``tensorflow.SignatureDef`` (TF Serving's metadata answer): ``inputs`` / ``outputs`` map a tensor's name to
    (dtype name, shape with None for unknown sizes)."""
    proto = message("tensorflow.SignatureDef")(method_name="tensorflow/serving/predict")
    for group, specs in ((proto.inputs, inputs), (proto.outputs, outputs)):
        for key, (dtype, shape) in specs.items():
            group[key].name = f"{name}_{key}:0"
            group[key].dtype = DTYPE_NAMES[dtype]
            for size in shape:
                group[key].tensor_shape.dim.add(size=-1 if size is None else size)
    return proto
