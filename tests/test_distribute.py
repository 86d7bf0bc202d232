"""Data-parallel training (zoo.distribute): the same weights as one device, on 2 simulated JAX devices, 2 JAX
processes on 127.0.0.1 and 2 logical TensorFlow CPUs; resume of a run killed on 2 devices (on 2 and on 1);
global-batch losses under MirroredStrategy; bad settings named."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest

from helpers import save_tiny_preset, write_synthetic_task
from zoo import distribute
from zoo.errors import ConfigError

pytestmark = pytest.mark.slow  # several processes and simulated devices, each importing JAX or TensorFlow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs the zoo command in a fresh process: with TF_CPU_DEVICES=N the CPU is split into N logical TensorFlow devices
# first; with ZOO_KILL_AT_STEP=S the process dies (os._exit, like a SIGKILL: nothing is flushed or saved) right
# after step S of the first epoch.
RUNNER = """
import os, sys
n = int(os.environ.get("TF_CPU_DEVICES", "1"))
if n > 1:
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
kill_at = int(os.environ.get("ZOO_KILL_AT_STEP", "0"))
if kill_at:
    from zoo.train import loop
    original = loop.StateCheckpoint.on_train_batch_end
    def killing(self, batch, logs=None):
        original(self, batch, logs)
        if self.start + batch + 1 == kill_at:
            os._exit(9)
    loop.StateCheckpoint.on_train_batch_end = killing
from zoo.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    write_synthetic_task(str(root / "data"))
    save_tiny_preset(root / "preset", dropout=0.1)
    save_tiny_preset(root / "preset0", dropout=0.0)
    (root / "runner.py").write_text(RUNNER, encoding="utf-8")
    return root


def start(root, output, backend, *flags, preset="preset", devices=1, kill_at=0):
    """Start one bi-encoder run (12 steps of 16 pairs, Adam, a checkpoint every 4 steps) in a subprocess."""
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": REPO, "ZOO_KILL_AT_STEP": str(kill_at)}
    if backend == "jax":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    else:
        env["TF_CPU_DEVICES"] = str(devices)
    cmd = [sys.executable, str(root / "runner.py"), "train", "bi-encoder", "--checkpoint", str(root / preset),
           "--data-dir", str(root / "data"), "--limit-train", "192", "--limit-eval", "32", "--epochs", "1",
           "--batch-size", "16", "--maxlen", "16", "--lr", "2e-3", "--save-every", "4", "--no-progress",
           "--output", str(output), *flags]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(*processes, expect=0):
    logs = []
    for p in processes:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == expect, out[-3000:]
        logs.append(out)
    return logs


def worst_difference(a, b):
    """Largest absolute difference over every variable of two runs' final training states (weights, optimizer)."""
    x, y = (np.load(os.path.join(d, "checkpoint", "state.npz")) for d in (a, b))
    assert x.files == y.files
    return max(float(np.max(np.abs(x[k].astype("float64") - y[k]))) for k in x.files if x[k].size)


def results(run):
    return json.loads((run / "results.json").read_text())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_jax_two_devices_two_processes_and_resume_end_where_one_device_ends(setup, tmp_path):
    """JAX: 12 Adam steps (dropout on) on 2 simulated devices, killed after step 6 (checkpoint at step 4) and
    resumed on 2 devices, or on 1; and on 2 processes joined over 127.0.0.1: every variable within 2e-5 of the
    one-device run (measured 2.9e-6: float32 reduction order; in a faster-learning run such differences grow as
    between any two float32 runs: identical running losses for 13 steps, then a slow drift)."""
    one, killed = tmp_path / "one", tmp_path / "two"
    first = [start(setup, one, "jax"),
             start(setup, killed, "jax", "--distribute", "data-parallel", devices=2, kill_at=6)]
    finish(first[0])
    finish(first[1], expect=9)
    state = json.loads((killed / "checkpoint" / "state.json").read_text())["progress"]
    assert (state["epoch"], state["step"]) == (0, 4) and not (killed / "results.json").exists()
    on_one = tmp_path / "resumed_on_one"
    shutil.copytree(killed, on_one)
    logs = finish(start(setup, killed, "jax", "--distribute", "data-parallel", devices=2),
                  start(setup, on_one, "jax"))
    assert all("resuming from" in log and "epoch 1, step 4" in log for log in logs)
    port = free_port()
    many = tmp_path / "processes"
    flags = ["--distribute", "data-parallel", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    finish(*(start(setup, many, "jax", *flags, "--process-id", str(i)) for i in (0, 1)))

    for run in (killed, on_one, many):
        assert worst_difference(one, run) <= 2e-5, (run.name, worst_difference(one, run))
    assert results(one)["distribution"] == {"mode": "none", "backend": "jax", "devices": 1, "processes": 1,
                                            "global_batch": 16, "per_device_batch": 16.0}
    assert results(killed)["distribution"]["devices"] == 2 and results(killed)["distribution"]["per_device_batch"] == 8
    assert results(many)["distribution"]["processes"] == 2
    assert results(many)["test_spearman"] == pytest.approx(results(one)["test_spearman"], abs=1e-3)


def test_tensorflow_mirrored_two_devices_train_like_one(setup, tmp_path):
    """TensorFlow: MirroredStrategy on 2 logical CPUs, the CoSENT loss of the whole global batch (gathered), vs one
    device: the same mean training loss (relative 1e-5) and every variable within 5e-3 after 12 Adam steps. That
    bound is the float32 noise of this run: one device with and without XLA already differ by 1.4e-3 (Adam
    magnifies rounding in near-zero gradients); doubled gradients differ by 2e-2."""
    one, two = tmp_path / "one", tmp_path / "two"
    finish(start(setup, one, "tensorflow", "--no-jit-compile", preset="preset0"),
           start(setup, two, "tensorflow", "--distribute", "data-parallel", preset="preset0", devices=2))
    assert worst_difference(one, two) <= 5e-3
    loss_one, loss_two = (results(r)["epochs"][1]["train_loss"] for r in (one, two))
    assert loss_two == pytest.approx(loss_one, rel=1e-5)
    assert results(two)["distribution"]["devices"] == 2 and results(two)["config"]["jit_compile"] is False


LOSSES = """
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from zoo import distribute
from zoo.losses import CoSENTLoss, CosineMSELoss, InBatchSoftmaxLoss, SoftTargetLoss
from zoo.models.bi_encoder import PairCosine

rng = np.random.default_rng(0)
x = rng.normal(size=(16, 4)).astype("float32")
cases = {"cosent": (CoSENTLoss(), PairCosine(), rng.integers(0, 2, 8).astype("float32")),
         "cosine_mse": (CosineMSELoss(), PairCosine(), rng.uniform(size=8).astype("float32")),
         "in_batch_softmax": (InBatchSoftmaxLoss(0.05, matryoshka_dims=(2,)), None, np.zeros(16, "float32")),
         "soft_target": (SoftTargetLoss(), None, rng.dirichlet([1, 1], (16, 1)).astype("float32"))}
out = {}
for name, (loss, head, y) in cases.items():
    updates = []
    for mode in ("none", "data-parallel"):
        dist = distribute.setup(mode)
        keras.utils.set_random_seed(0)
        inputs = keras.Input((4,))
        z = keras.layers.Dense(2 if name == "soft_target" else 3)(inputs)
        model = keras.Model(inputs, head(z) if head is not None else z)
        w0 = model.get_weights()[0].copy()
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss, jit_compile=False)
        def gen():
            yield from dist.shard(x, y)
        spec = (tf.TensorSpec([None, 4]), tf.TensorSpec([None, *y.shape[1:]]))
        ds = tf.data.Dataset.from_generator(gen, output_signature=spec)
        if dist.devices > 1:
            ds = tf.distribute.get_strategy().distribute_datasets_from_function(lambda c: ds)
        history = model.fit(ds, steps_per_epoch=1, epochs=1, verbose=0)
        updates.append(((w0 - model.get_weights()[0]).ravel().tolist(), history.history["loss"][0]))
    out[name] = updates
print("RESULT" + __import__("json").dumps(out))
"""


def test_every_batch_loss_is_the_global_batch_loss_under_mirrored_strategy(tmp_path):
    """One SGD step (lr 1) of each compiled zoo loss on 2 replicas of a 16-row batch moves the weights exactly as
    on one device (1e-5), and Keras reports the same loss: CoSENT and the in-batch softmax couple the batch (the
    shards are gathered), cosine MSE and soft targets are per-example means (each replica returns its share)."""
    script = tmp_path / "losses.py"
    script.write_text(LOSSES, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "KERAS_BACKEND": "tensorflow", "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT", 1)[1])
    for name, ((one, loss_one), (two, loss_two)) in out.items():
        assert np.abs(np.array(one)).max() > 1e-3, name  # the step moved the weights
        np.testing.assert_allclose(two, one, atol=1e-5, err_msg=name)
        assert loss_two == pytest.approx(loss_one, rel=1e-5), name


def test_shard_splits_each_batch_by_examples():
    x = {"token_ids": np.arange(20).reshape(10, 2)}  # 5 pairs, interleaved rows a1 b1 a2 b2 ...
    y = np.arange(5)
    jax_two = distribute.Distribution("data-parallel", "jax", devices=2, processes=2, process_id=1)
    [(part_x, part_y)] = jax_two.shard(x, y)  # 4 pairs kept (a multiple of 2 devices), the second process's 2
    assert part_y.tolist() == [2, 3] and part_x["token_ids"][:, 0].tolist() == [8, 10, 12, 14]
    jax_local = distribute.Distribution("data-parallel", "jax", devices=2, processes=1)
    assert [p[1].tolist() for p in jax_local.shard(x, y)] == [[0, 1, 2, 3]]  # one process feeds the whole batch
    tf_two = distribute.Distribution("data-parallel", "tensorflow", devices=2)
    parts = tf_two.shard(x, y)  # one part per replica, in order
    assert [p[1].tolist() for p in parts] == [[0, 1], [2, 3]]
    assert parts[1][0]["token_ids"][:, 0].tolist() == [8, 10, 12, 14]
    assert tf_two.shard({"token_ids": x["token_ids"][:2]}, y[:1]) == []  # fewer examples than devices
    assert distribute.Distribution().shard(x, y)[0][1] is y


def test_several_tensorflow_replicas_train_without_xla_and_the_job_records_it(monkeypatch):
    """``Distribution.jit_compile``: XLA as requested, except with several TensorFlow replicas; the jobs' setup
    (``zoo.jobs.common.setup_distribution``) turns the config's jit_compile off then, so results.json says so."""
    from zoo.jobs.bi_encoder import BiEncoderConfig
    from zoo.jobs.common import setup_distribution

    mirrored = distribute.Distribution("data-parallel", "tensorflow", devices=2)
    assert mirrored.jit_compile(True) is False
    assert distribute.Distribution("data-parallel", "jax", devices=2).jit_compile(True) is True
    assert distribute.Distribution().jit_compile(True) is True and mirrored.jit_compile(False) is False
    calls = []
    monkeypatch.setattr(distribute, "setup", lambda *args, **kwargs: calls.append((args, kwargs)) or mirrored)
    config = BiEncoderConfig(distribute="data-parallel", num_processes=1, batch_size=8)
    assert setup_distribution(config) is mirrored and config.jit_compile is False
    assert calls == [(("data-parallel", None, 1, None), {"batch_size": 8})]


def test_jax_across_processes_refuses_uncompiled_steps_naming_the_flag():
    """JAX's all-reduce between processes runs only in compiled steps (uncompiled, the docs' two-process example
    aborted with "Termination timeout for all reduce"): jit_compile off is a ConfigError there, spelled as the
    command line's --no-jit-compile; one JAX process, or XLA on, is left as requested."""
    from zoo.config import command_line_error
    from zoo.jobs.bi_encoder import BiEncoderConfig

    two = distribute.Distribution("data-parallel", "jax", devices=2, processes=2)
    with pytest.raises(ConfigError, match="^data-parallel training on JAX across 2 processes needs XLA-compiled") \
            as caught:
        two.jit_compile(False)
    assert str(command_line_error(caught.value, BiEncoderConfig)).endswith("): drop --no-jit-compile")
    assert two.jit_compile(True) is True
    assert distribute.Distribution("data-parallel", "jax", devices=2).jit_compile(False) is False


def test_bad_distribution_settings_are_named(monkeypatch):
    with pytest.raises(ConfigError, match="^mode must be one of"):
        distribute.setup("model-parallel")
    with pytest.raises(ConfigError, match=r"^process_id must be in \[0, 1\] for num_processes 2"):
        distribute.setup("data-parallel", coordinator="127.0.0.1:1234", num_processes=2, process_id=2)
    with pytest.raises(ConfigError, match="jax backend"):  # this suite runs on TensorFlow
        distribute.setup("data-parallel", coordinator="127.0.0.1:1234", num_processes=2, process_id=0)
    with pytest.raises(ConfigError, match="^num_processes 2 needs coordinator HOST:PORT"):
        monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
        distribute.setup("data-parallel", num_processes=2, process_id=1)
    monkeypatch.undo()
    monkeypatch.setenv(distribute.ENV_PROCESS_ID, "x")
    with pytest.raises(ConfigError, match="KERAS_DISTRIBUTION_PROCESS_ID"):
        distribute.setup("data-parallel")
    monkeypatch.delenv(distribute.ENV_PROCESS_ID)
    monkeypatch.setattr(distribute, "local_devices", lambda backend: ["/cpu:0", "/cpu:1", "/cpu:2"])
    with pytest.raises(ConfigError, match="^batch_size 16 .* multiple of the 3 devices"):
        distribute.setup("data-parallel", batch_size=16)
    monkeypatch.undo()
    for bad in ("nohost", "host:", "host:99999", ":80"):
        with pytest.raises(ConfigError, match="HOST:PORT"):
            distribute.parse_address(bad)
    port = free_port()  # nothing listens there
    with pytest.raises(ConfigError, match=f"127.0.0.1:{port} unreachable after 1 s"):
        distribute.wait_for("127.0.0.1", port, timeout=1.0)
    assert distribute.setup("none").mode == "none" and distribute.current().devices == 1
