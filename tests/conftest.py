"""The suite's configuration: lanes, test order, and the fixtures (the helpers they use are in ``helpers.py``).

* ``tiny_vocab`` / ``tiny_hf``: a synthetic ~300-token vocabulary and a tiny random transformers
  ``BertForPreTraining`` (hidden 32, 2 layers, 2 heads, FFN 64) saved with ``save_pretrained``; most tests
  run on these and need nothing from ``shared``.
* ``tiny_setup``: a synthetic LCQMC-style task and a tiny preset to train on.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path


def _share_the_cores():
    """Under xdist, each worker (and every process it starts) gets its share of the CPUs as its thread count, and
    ONNX Runtime's threads sleep instead of spinning: 2 workers each running TensorFlow, ONNX Runtime and OpenMP
    pools as wide as the machine spend the cores on contention (measured on 2 cores: four documentation pages in
    356 s that way, 284 s with one thread each). Set before numpy or TensorFlow load; an explicit setting wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers < 2:
        return
    threads = str(max(1, len(os.sched_getaffinity(0)) // workers))
    for name in ("ZOO_ORT_THREADS", "TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "2")
    os.environ.setdefault("ZOO_ORT_SPIN", "0")


_share_the_cores()
# TensorFlow 2.21's oneDNN batch matmul corrupts the heap when it broadcasts operands of different ranks
# (tensorflow/tensorflow#117700, #123109; fixed upstream by PR #120199, in no release yet): in the suite's workers it
# killed a training test now and then (a segfault inside Keras' fit, CONTRIBUTING.md). The suite runs TensorFlow's own
# kernels; every process it starts inherits the setting.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


def _record_crashes():
    """A worker that crashes takes its stderr with it (xdist reports only "worker crashed"): each worker writes the
    Python stacks of a fatal signal (``faulthandler``: SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) to a file of its
    own in ``ZOO_CRASH_DIR``, which its controller (``ZOO_CRASH_OWNER``: the workers' parent) makes and prints at the
    end (``pytest_terminal_summary``)."""
    import faulthandler
    import tempfile

    if "PYTEST_XDIST_WORKER" not in os.environ or os.environ.get("ZOO_CRASH_OWNER") != str(os.getppid()):
        # a controller, or a pytest that a test started inside a worker: a folder of its own for its workers
        os.environ["ZOO_CRASH_DIR"] = tempfile.mkdtemp(prefix="zoo_crashes_")
        os.environ["ZOO_CRASH_OWNER"] = str(os.getpid())
        return None
    path = os.path.join(os.environ["ZOO_CRASH_DIR"], f"{os.environ['PYTEST_XDIST_WORKER']}-{os.getpid()}.txt")
    crash_file = open(path, "w", encoding="utf-8")  # noqa: SIM115 -- open for the life of the worker
    faulthandler.enable(file=crash_file, all_threads=True)
    return crash_file


_crash_file = _record_crashes()

import pytest  # noqa: E402

from helpers import (longest_first, random_batch, recorded_durations, reference_outputs, save_tiny_preset,  # noqa: E402
                     state_of, synthetic_vocab, tiny_bert_config, write_synthetic_task)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# precision="auto" (encode's default) runs the Keras model in the tests, whose expectations are Keras' outputs;
# tests/test_fused_onnx.py unsets it to test auto's own choice
os.environ.setdefault("ZOO_PRECISION", "fp32")


# ------------------------------------------------------------------------------ lanes
# The suite runs in lanes, one pytest run each (tools/run_tests.py runs them in sequence and sums them up), so that
# a process holds one native stack: the main lane's workers run TensorFlow, ONNX Runtime, faiss and grpc; Ray and
# Milvus Lite run in their own lanes; PyTorch only in subprocesses (tests/torch_reference.py), as JAX-backend
# tests do. ``pytest`` alone runs the main lane; ``pytest --lane ray`` another.
LANES = {"ray": ("test_ray_encode.py",), "milvus": ("test_milvus.py",)}
KEPT_OUT = {"main": ("torch", "ray", "pymilvus", "milvus_lite"), "ray": ("torch", "pymilvus", "milvus_lite"),
            "milvus": ("torch", "ray")}


def pytest_addoption(parser):
    parser.addoption("--lane", default="main", choices=("main", *LANES),
                     help="which lane's test files to collect (tools/run_tests.py runs every lane)")


def lane_of(path):
    return next((lane for lane, files in LANES.items() if Path(path).name in files), "main")


def pytest_ignore_collect(collection_path, config):
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return True if lane_of(collection_path) != config.getoption("lane") else None
    return None


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """A worker's crash stacks go to its file (after pytest's own faulthandler set-up, which points at stderr)."""
    if _crash_file is not None:
        import faulthandler

        faulthandler.enable(file=_crash_file, all_threads=True)


def without_harness_frames(text):
    """The lines of a crash's output without pytest's, pluggy's, xdist's and execnet's frames."""
    return [line for line in text.splitlines() if not any(part in line for part in (
        "/_pytest/", "/pluggy/", "/xdist/", "/execnet/", '"<string>"', "<frozen runpy>", "Extension modules:"))]


def crash_reports(folder):
    """{worker file: the Python stacks it recorded} for each worker that died of a fatal signal in ``folder``."""
    found = {}
    for name in sorted(os.listdir(folder)) if folder and os.path.isdir(folder) else ():
        text = Path(folder, name).read_text(encoding="utf-8", errors="replace").strip()
        if text:
            found[name] = text
    return found


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The stacks of crashed workers, if any; with ZOO_LANE_REPORT set (tools/run_tests.py), the run's counts
    written there as JSON."""
    if not hasattr(config, "workerinput"):
        crashed = [r for r in terminalreporter.stats.get("failed", []) if "crashed" in str(r.longrepr)]
        reports = crash_reports(os.environ.get("ZOO_CRASH_DIR"))
        for name, text in reports.items():  # pytest's and xdist's own frames left out
            terminalreporter.section(f"fatal signal in worker {name[:-4]} (faulthandler's Python stacks)")
            terminalreporter.write_line("\n".join(without_harness_frames(text)[:150]))
        if len(crashed) > len(reports):
            terminalreporter.section("crashed workers")
            terminalreporter.write_line(f"{len(crashed) - len(reports)} worker(s) crashed without a fatal-signal "
                                        f"record: killed (SIGKILL: out of memory?), not a segfault")
    path = os.environ.get("ZOO_LANE_REPORT")
    if path and not hasattr(config, "workerinput"):
        import json

        counts = {k: len(v) for k, v in terminalreporter.stats.items() if k}
        with open(path, "w", encoding="utf-8") as f:
            json.dump({**counts, "exitstatus": int(exitstatus)}, f)


_blamed = set()


@pytest.fixture(autouse=True)
def _one_native_stack(request):
    """A test that imports a runtime kept out of its lane (torch in a TensorFlow worker, say) fails: the first one
    to do it, named with the module."""
    import sys

    lane = request.config.getoption("lane")
    yield
    loaded = [m for m in KEPT_OUT[lane] if m in sys.modules and m not in _blamed]
    if loaded:
        _blamed.update(loaded)
        pytest.fail(f"{request.node.nodeid} imported {loaded} into a {lane}-lane process (tests/conftest.py LANES: "
                    f"run it in a subprocess, as tests/torch_reference.py does, or in its own lane)", pytrace=False)


# ------------------------------------------------------------------------------ test order
# The suite runs on 2 workers (pytest-xdist, tools/run_tests.py), which take one test at a time (--maxschedchunk 1).
# The longest test files start first, each file's tests together: the short files at the end fill the other worker
# around the last long test instead of leaving it alone, and a file's module fixtures (servers, trained models) are
# set up once per worker (ordering single tests across files had set some up again after every interleaved test).
# Which files are long is measured, not written here: tests/durations.json holds each test's seconds from a recorded
# run (``python tools/run_tests.py --record-durations``); a test missing from it counts as short.


def pytest_collection_modifyitems(items):
    items[:] = longest_first(items, recorded_durations())


_durations = {}


def pytest_runtest_logreport(report):
    """With ZOO_RECORD_DURATIONS=PATH (tools/run_tests.py --record-durations), each test's seconds (setup, call and
    teardown) are summed, and written to PATH when the run ends (the xdist controller receives every report)."""
    if os.environ.get("ZOO_RECORD_DURATIONS"):
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    path = os.environ.get("ZOO_RECORD_DURATIONS")
    if path and _durations and not hasattr(session.config, "workerinput"):
        recorded = recorded_durations(path)
        option = session.config.option
        if not (option.file_or_dir or option.keyword or option.markexpr):  # the whole lane ran: forget the tests gone
            lane = session.config.getoption("lane")
            recorded = {k: v for k, v in recorded.items() if lane_of(k.split("::")[0]) != lane}
        recorded.update({k: round(v, 1) for k, v in _durations.items()})
        Path(path).write_text(json.dumps(dict(sorted(recorded.items())), indent=0) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory):
    """(tokens, path of vocab.txt) of the synthetic vocabulary."""
    tokens = synthetic_vocab()
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return tokens, path


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory, tiny_vocab, tiny_batch):
    """A random tiny ``BertForPreTraining`` saved to a folder (config.json, model.safetensors, vocab.txt), built by
    transformers in a subprocess (``torch_reference``).

    Returns a dict: ``dir``; ``variants`` (the same weights as ``BertModel``, ``BertForMaskedLM`` and
    ``pytorch_model.bin`` folders); ``config`` (dict); ``state`` (its state dict as numpy arrays); ``outputs``
    (transformers' outputs on ``tiny_batch``, hidden states and the linear pooler included).
    """
    import torch_reference

    tokens, vocab_path = tiny_vocab
    folder = tmp_path_factory.mktemp("tiny_hf")
    variants = {name: folder.parent / f"{folder.name}_{name.replace('.', '_')}" for name in
                torch_reference.TINY_VARIANTS}
    config = tiny_bert_config(len(tokens))
    out = torch_reference.run("build", config=config, model="BertForPreTraining", seed=0, scale=0.05,
                              save={"hf": str(folder), "variants": {k: str(v) for k, v in variants.items()}},
                              batch=tiny_batch)
    (folder / "vocab.txt").write_text(vocab_path.read_text(encoding="utf-8"), encoding="utf-8")
    return {"dir": folder, "variants": variants, "config": config, "state": state_of(out), "outputs": out}


@pytest.fixture(scope="session")
def tiny_batch(tiny_vocab):
    """A fixed padded batch of random ids for the tiny models."""
    return random_batch(len(tiny_vocab[0]))


@pytest.fixture(scope="session")
def tiny_reference(tiny_hf):
    """transformers outputs of the tiny model on ``tiny_batch``: sequence_output, pooled_output, mlm_logits."""
    return reference_outputs(tiny_hf["outputs"])


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """A folder with a synthetic LCQMC-style task (``data/``) and a tiny preset (``preset/``) to train on."""
    root = tmp_path_factory.mktemp("train")
    write_synthetic_task(str(root / "data"))
    save_tiny_preset(root / "preset")
    return root


@pytest.fixture
def fresh_graph_cache(tmp_path, monkeypatch):
    """A test's own graph cache, and auto deciding for itself (conftest pins ZOO_PRECISION=fp32); a module uses it
    for every test with ``pytestmark = pytest.mark.usefixtures("fresh_graph_cache")``."""
    from zoo.inference import autotune

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ZOO_PRECISION", raising=False)
    monkeypatch.setattr(autotune, "accelerator", lambda: None)  # the same rules on a machine with a GPU
    return tmp_path / "cache"


@pytest.fixture(autouse=True)
def _zoo_logger_restored():
    """Each test starts with the zoo logger (and the process's excepthook) as the test before it found them:
    ``zoo.logs.setup_cli`` (run by in-process ``zoo.cli.main``) changes both."""
    import sys

    log = logging.getLogger("zoo")
    saved = (list(log.handlers), log.level, log.propagate, sys.excepthook)
    yield
    log.handlers[:] = saved[0]
    log.setLevel(saved[1])
    log.propagate = saved[2]
    sys.excepthook = saved[3]
