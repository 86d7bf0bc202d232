"""A restricted reader of PyTorch's zip checkpoints (``pytorch_model.bin``, torch >= 1.6) that needs no torch:
tensors only, every offset, shape and stride checked against its storage (the file is untrusted)."""

from __future__ import annotations

import math
import zipfile

import numpy as np

from ..errors import CheckpointError


def read_torch_zip(path):
    """Read a torch>=1.6 zip ``pytorch_model.bin`` without torch (tensors only; bfloat16 as float32).

    The file is untrusted: only tensor-rebuilding globals are allowed, and each tensor's declared offset, shape and
    strides must stay inside its storage (no element read past the buffer, no tensor larger than its storage).
    """
    import pickle

    dtypes = {"FloatStorage": np.float32, "HalfStorage": np.float16, "DoubleStorage": np.float64,
              "LongStorage": np.int64, "IntStorage": np.int32, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
              "BFloat16Storage": np.float32}  # bfloat16 is read as float32
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a zip archive (a legacy pre-1.6 PyTorch file, or damaged); install "
                              f"torch to read legacy files")

    def rebuild(storage, offset, size, stride, *args):
        size, stride = tuple(size), tuple(stride)
        numbers = (offset, *size, *stride)
        if (len(size) != len(stride) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                 for v in numbers)):
            raise CheckpointError(f"{path}: a tensor declares an invalid offset/shape/stride "
                                  f"({offset}, {size}, {stride})")
        count = math.prod(size)
        if count == 0:
            return np.zeros(size, storage.dtype)
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= len(storage) or count > len(storage):
            raise CheckpointError(f"{path}: a tensor of shape {size} (offset {offset}, stride {stride}) reaches "
                                  f"past its storage of {len(storage)} elements")
        item = storage.itemsize
        return np.lib.stride_tricks.as_strided(storage[offset:], size, [s * item for s in stride]).copy()

    try:
        with zipfile.ZipFile(path) as z:
            pkl = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
            if pkl is None:
                raise CheckpointError(f"{path}: no data.pkl inside (not a PyTorch checkpoint)")
            root = pkl[: -len("data.pkl")]

            class Unpickler(pickle.Unpickler):
                def find_class(self, module, name):
                    if module == "torch._utils" and name == "_rebuild_tensor_v2":
                        return rebuild
                    if module == "torch" and name in dtypes:
                        return name
                    if module == "collections" and name == "OrderedDict":
                        import collections

                        return collections.OrderedDict
                    raise CheckpointError(f"{path}: unsupported object {module}.{name} in PyTorch file")

                def persistent_load(self, pid):
                    _, storage_type, key, _, _ = pid
                    if storage_type not in dtypes:
                        raise CheckpointError(f"{path}: unsupported storage type {storage_type!r}")
                    data = z.read(f"{root}data/{key}")
                    if storage_type == "BFloat16Storage":  # the upper half of a float32: widen exactly
                        return (np.frombuffer(data, np.uint16).astype(np.uint32) << 16).view(np.float32)
                    return np.frombuffer(data, dtype=dtypes[storage_type])

            state = Unpickler(z.open(pkl)).load()
    except CheckpointError:
        raise
    except Exception as e:  # damaged zip (bad CRC, truncated member), malformed pickle
        raise CheckpointError(f"{path}: cannot read PyTorch file ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise CheckpointError(f"{path}: not a state dict of tensors")
    return dict(state)
