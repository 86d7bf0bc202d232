"""What this machine has (a leaf: the standard library only, and the Keras backend when ``accelerator`` is called):
the CPU's model and instruction-set flags, the cores this process may use, and the accelerator the backend computes
on. Describing the machine imports neither ONNX Runtime nor OpenVINO."""

from __future__ import annotations

import os
import platform


def cpu_flags():
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def bf16_supported():
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def accelerator():
    """The GPU (or TPU) the Keras backend computes on, or None on a CPU-only machine."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return "GPU" if tf.config.list_logical_devices("GPU") else None
    if backend == "jax":
        import jax

        platform_name = jax.devices()[0].platform
        return platform_name.upper() if platform_name != "cpu" else None
    if backend == "torch":
        import torch

        return "GPU" if torch.cuda.is_available() else None
    return None


SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16",
               "amx_tile", "amx_int8", "amx_bf16")  # the instruction sets that change which kernels run


def instruction_sets(flags=None):
    """The CPU's instruction sets of ``SPEED_FLAGS`` it has, sorted (part of fastest's cache key)."""
    flags = cpu_flags() if flags is None else flags
    return sorted(f for f in SPEED_FLAGS if f in flags)


def cpu_model():
    """The CPU's model name (Linux /proc/cpuinfo; ``platform.processor()`` elsewhere, possibly empty)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def usable_cpus():
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def cpu_kind(flags=None):
    """The CPU's vector kind as speed figures name it: "AVX-512 VNNI", "AVX-512", "AVX2" or "other"."""
    flags = cpu_flags() if flags is None else flags
    return ("AVX-512 VNNI" if "avx512_vnni" in flags else "AVX-512" if "avx512f" in flags
            else "AVX2" if "avx2" in flags else "other")
