"""Data-parallel training on the engines that already do it: ``keras.distribution`` on JAX (the devices of one host,
or of several hosts/processes through ``keras.distribution.initialize``) and ``tf.distribute.MirroredStrategy`` on
TensorFlow (the devices of one host).

```python
dist = zoo.distribute.setup("data-parallel")            # every local device; then build and compile models
dist = zoo.distribute.setup("data-parallel", coordinator="10.0.0.1:1234", num_processes=2, process_id=0)
```

What zoo adds to them:

* ``setup`` checks the request (backend, process id, coordinator reachable within a timeout) and sets the
  distribution for everything built afterwards; ``current()`` is what was set.
* ``Distribution.shard``: every process builds the same global batch (same order, same padding) and feeds its
  share (JAX: this process's rows; TensorFlow: each replica's, in turn); a batch is trimmed to a multiple of the
  device count (the last batch of an epoch can be short).
* ``gather_batch`` / ``global_sum`` / ``replica_share``: the losses that couple the examples of a batch (CoSENT,
  in-batch softmax, token-weighted means) are losses of the whole global batch. On JAX that is automatic (the
  step is one program over the global batch, split by XLA); on TensorFlow each replica runs the step on its
  shard, so these gather the shards (with the gradient of the gather) first, and every zoo loss returns its
  replica's share of the loss (Keras sums the replicas' gradients).

Multi-host on TensorFlow (``MultiWorkerMirroredStrategy``) is refused: with Keras 3 it has open bugs (keras issues
20585, 20329), and the TensorFlow backend's ``keras.distribution`` is a prototype; multi-host is the JAX path.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time

import keras
import numpy as np

from .choices import DISTRIBUTE_MODES as MODES
from .config import ENV_COORDINATOR, ENV_PROCESS_ID, ENV_PROCESSES
from .errors import ConfigError
from .logs import log


@dataclasses.dataclass(frozen=True)
class Distribution:
    """How training is spread: ``devices`` (all processes together) share every global batch."""

    mode: str = "none"
    backend: str = "tensorflow"
    devices: int = 1
    processes: int = 1
    process_id: int = 0

    @property
    def is_writer(self):
        """Whether this process writes files (checkpoints, models, results): process 0 only."""
        return self.process_id == 0

    def jit_compile(self, requested):
        """Whether training steps may be XLA-compiled: ``requested``, except with several TensorFlow replicas
        (MirroredStrategy's steps cannot be jit-compiled on CPU). JAX across processes needs it: its gradient
        all-reduce is a compiled collective, and uncompiled steps abort ("Termination timeout for all reduce"), so
        ``requested=False`` there is a ConfigError naming ``jit_compile``."""
        if requested and self.backend == "tensorflow" and self.devices > 1:
            log.info("MirroredStrategy: training without XLA (jit_compile off)")
            return False
        if not requested and self.backend == "jax" and self.processes > 1:
            raise ConfigError(f"data-parallel training on JAX across {self.processes} processes needs XLA-compiled "
                              "steps (the gradient all-reduce between processes; uncompiled, JAX aborts with "
                              "'Termination timeout for all reduce'): drop jit_compile", param="jit_compile")
        return requested

    def record(self, batch_size):
        """The ``distribution`` entry of results.json."""
        return {"mode": self.mode, "backend": self.backend, "devices": self.devices, "processes": self.processes,
                "global_batch": batch_size, "per_device_batch": batch_size / self.devices}

    def shard(self, x, y):
        """The global batch ``(x, y)`` trimmed to a multiple of ``devices`` examples, as the list of parts this
        process feeds: one per process on JAX (this process's), one per replica on TensorFlow (all of them, in
        replica order); an empty list when the batch has fewer examples than devices. Arrays may have several
        rows per example (the bi-encoder's interleaved [a1, b1, a2, b2, ...]): each is cut in proportion."""
        if self.devices == 1:
            return [(x, y)]
        n = len(y)
        keep = n - n % self.devices
        if keep == 0:
            return []
        parts = self.processes if self.backend == "jax" else self.devices
        mine = [self.process_id] if self.backend == "jax" else range(parts)

        def cut(a, part):
            a = np.asarray(a)
            size = a.shape[0] // n * keep // parts
            return a[part * size:(part + 1) * size]

        return [(keras.tree.map_structure(lambda a: cut(a, p), x), cut(y, p)) for p in mine]


_current = None
_STRATEGIES = {}


def current():
    """The distribution ``setup`` set last (none, on the current backend, when it was never called)."""
    return _current or Distribution(backend=keras.backend.backend())


def setup(mode="none", coordinator=None, num_processes=None, process_id=None, batch_size=None, timeout=120.0):
    """Set the distribution for the models built from now on, and return it (a ``Distribution``).

    ``mode`` "data-parallel": every local device; with ``coordinator`` ("HOST:PORT" of process 0) and
    ``num_processes`` > 1 (or keras' ``KERAS_DISTRIBUTION_*`` environment variables), the devices of all
    processes (JAX). ``batch_size``, when given, must split evenly over the devices. Raises ConfigError for what
    the backend cannot do, an unreachable coordinator (after ``timeout`` seconds) or a process id out of range.
    "none" undoes an earlier setup."""
    global _current
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
    backend = keras.backend.backend()
    coordinator = coordinator or os.environ.get(ENV_COORDINATOR) or None
    num_processes = _integer(num_processes, ENV_PROCESSES, "num_processes", 1)
    process_id = _integer(process_id, ENV_PROCESS_ID, "process_id", 0)
    if mode == "none":
        if num_processes > 1:
            raise ConfigError("num_processes > 1 needs mode 'data-parallel'")
        _reset(backend)
        _current = Distribution(backend=backend)
        return _current
    if backend not in ("jax", "tensorflow"):
        raise ConfigError(f"mode 'data-parallel' runs on the jax or tensorflow backend, not {backend!r} "
                          f"(set KERAS_BACKEND)")
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ConfigError(f"process_id must be in [0, {num_processes - 1}] for num_processes {num_processes}, "
                          f"got {process_id}")
    if num_processes > 1 and backend != "jax":
        raise ConfigError("several processes/hosts need the jax backend (KERAS_BACKEND=jax): with Keras 3, "
                          "TensorFlow's MultiWorkerMirroredStrategy has open bugs (keras issues 20585, 20329)")
    if num_processes > 1 and not coordinator:
        raise ConfigError(f"num_processes {num_processes} needs coordinator HOST:PORT (the address of process 0)")
    _reset(backend)
    if backend == "jax" and num_processes > 1:
        _initialize_jax(coordinator, num_processes, process_id, timeout)
    devices = local_devices(backend)
    if batch_size is not None and batch_size % len(devices):
        raise ConfigError(f"batch_size {batch_size} (the global batch) must be a multiple of the {len(devices)} "
                          f"devices")
    if backend == "jax":
        data_parallel = keras.distribution.DataParallel(devices=devices)
        data_parallel.auto_shard_dataset = False  # each process feeds its own share (Distribution.shard)
        keras.distribution.set_distribution(data_parallel)
    else:
        import tensorflow as tf

        if tuple(devices) not in _STRATEGIES:  # one per device set: two would reuse each other's collective keys
            _STRATEGIES[tuple(devices)] = tf.distribute.MirroredStrategy(devices=devices)
        tf.distribute.experimental_set_strategy(_STRATEGIES[tuple(devices)])
    count = len(devices)
    _current = Distribution(mode, backend, count, num_processes, process_id)
    log.info("data-parallel on %d %s device(s)%s", count, backend,
             f" in {num_processes} processes (this is process {process_id})" if num_processes > 1 else "")
    return _current


def local_devices(backend):
    """The devices data-parallel training spreads over: JAX's devices of every process; TensorFlow's GPUs, else its
    (logical) CPUs."""
    if backend == "jax":
        return keras.distribution.list_devices()
    import tensorflow as tf

    return [d.name for d in tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")]


def _integer(value, variable, name, default):
    if value is None:
        value = os.environ.get(variable) or default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} (or {variable}) must be an integer, got {value!r}") from None


def _reset(backend):
    if backend == "jax":
        keras.distribution.set_distribution(None)
    elif backend == "tensorflow":
        import tensorflow as tf

        if tf.distribute.has_strategy():
            tf.distribute.experimental_set_strategy(None)


def _initialize_jax(coordinator, num_processes, process_id, timeout):
    """``keras.distribution.initialize`` (once per process), after checking that the coordinator can be reached:
    jax would otherwise wait minutes and then fail without naming it."""
    import jax

    if jax.distributed.is_initialized():
        if jax.process_count() != num_processes or jax.process_index() != process_id:
            raise ConfigError(f"this process already joined a run of {jax.process_count()} processes as process "
                              f"{jax.process_index()}")
        return
    host, port = parse_address(coordinator)
    if process_id != 0:
        wait_for(host, port, timeout)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU devices' collectives across processes
    keras.distribution.initialize(f"{host}:{port}", num_processes, process_id)


def parse_address(address):
    """"HOST:PORT" -> (host, port); ConfigError naming the address otherwise."""
    host, _, port = str(address).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"coordinator must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def wait_for(host, port, timeout):
    """Return once ``host:port`` accepts a TCP connection; ConfigError naming it after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(5.0, timeout)):
                return
        except OSError as e:
            if time.monotonic() >= deadline:
                raise ConfigError(f"coordinator {host}:{port} unreachable after {timeout:.0f} s ({e}); is "
                                  f"process 0 running there?") from None
            time.sleep(0.5)


def barrier(name):
    """Wait until every process of a multi-process run gets here (after process 0 wrote a file the others read)."""
    dist = current()
    if dist.processes > 1 and dist.backend == "jax":
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


# ---------------------------------------------------------------------------------- global-batch losses
def _replica_context():
    """TensorFlow's replica context when a step runs on one of several replicas, else None."""
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    return context if context is not None and context.num_replicas_in_sync > 1 else None


def gather_batch(x):
    """``x`` of the whole global batch (the replicas' shards concatenated along axis 0, in order) inside a
    TensorFlow replica's step; ``x`` itself elsewhere (on JAX the step already sees the global batch). Its
    gradient reaches every replica's shard."""
    context = _replica_context()
    return x if context is None else context.all_gather(x, axis=0)


def replica_share(loss):
    """A scalar loss as one replica's share: divided by the replica count inside a TensorFlow replica's step, so
    that the replicas' gradients, which Keras sums, add up to the gradient of the loss (Keras divides only the
    losses it reduces itself, not a scalar a loss returns). ``loss`` itself elsewhere."""
    context = _replica_context()
    return loss if context is None else loss / context.num_replicas_in_sync


def global_sum(x):
    """The sum of ``x`` over the replicas inside a TensorFlow replica's step; ``x`` itself elsewhere."""
    context = _replica_context()
    if context is None:
        return x
    import tensorflow as tf

    return context.all_reduce(tf.distribute.ReduceOp.SUM, x)
