"""An installed wheel (not this checkout) carries every package and the shipped presets, loadable by name; the
suite's lanes (tests/conftest.py, tools/run_tests.py): one native stack per process, no rerun of a crashed test."""

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup_cfg():
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"))
    return config


def test_setup_cfg_lists_every_package():
    listed = {p.strip() for p in setup_cfg()["options"]["packages"].replace("\n", ",").split(",") if p.strip()}
    found = {os.path.relpath(root, REPO).replace(os.sep, ".") for root, _, files in os.walk(os.path.join(REPO, "zoo"))
             if "__init__.py" in files}
    assert found | {"zoo._presets"} == listed


@pytest.mark.slow
def test_wheel_ships_the_presets_and_loads_them_by_name(tmp_path):
    import zoo

    entries = [p.strip().rstrip("/*") for p in setup_cfg()["options.package_data"]["zoo._presets"].split(",")]
    shipped = list(dict.fromkeys(e.split("/")[0] for e in entries))  # NAME/* and NAME/onnx/*: one preset
    graphs = [e.split("/")[0] for e in entries if e.endswith("/onnx")]  # presets carrying their fused graph
    assert zoo.DEFAULT_PRESET in shipped and zoo.DEFAULT_ENCODER in shipped
    for name in shipped:
        assert os.path.exists(os.path.join(REPO, "data", "presets", name, "zoo_config.json")), name
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                            str(tmp_path / "dist"), REPO], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("zoo-*.whl")
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    script = f"""
import json, os, zoo
assert zoo.__file__.startswith({str(site)!r}), zoo.__file__
from zoo.paths import PRESETS_DIR
assert PRESETS_DIR.startswith({str(site)!r}), PRESETS_DIR
sizes = {{}}
for name in {shipped!r}:
    model = zoo.models.from_preset(name)
    if hasattr(model, "encode"):
        assert model.encode(["怎么开通花呗"]).shape[0] == 1
for name in {graphs!r}:
    assert os.path.exists(os.path.join(PRESETS_DIR, name, "onnx", "model.onnx")), name
    sizes[name] = sum(os.path.getsize(os.path.join(PRESETS_DIR, name, f)) for f in os.listdir(os.path.join(PRESETS_DIR, name)))
print(json.dumps({{"presets": zoo.available_presets(), "sizes": sizes}}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("ZOO_DATA_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         cwd=str(tmp_path), env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert set(shipped) <= set(json.loads(run.stdout.strip().splitlines()[-1])["presets"])


CRASHING_TESTS = '''
import ctypes, pathlib

def once(name):
    flag = pathlib.Path(__file__).with_name(name)
    first = not flag.exists()
    flag.touch()
    return first

def test_crashes_once():
    if once("crashed"):
        ctypes.string_at(0)  # a segfault: the worker process dies

def test_crashes_every_time():
    ctypes.string_at(0)

def test_fails_once():
    assert not once("failed"), "a plain failure"
'''


def scratch_suite(folder, tests):
    """A folder with the repository's setup.cfg and test conftest (lanes, the native-stack guard) and ``tests``
    ({file name: source})."""
    (folder / "setup.cfg").write_text(Path(REPO, "setup.cfg").read_text(encoding="utf-8"))
    (folder / "conftest.py").write_text(Path(REPO, "tests", "conftest.py").read_text(encoding="utf-8"))
    (folder / "helpers.py").write_text(Path(REPO, "tests", "helpers.py").read_text(encoding="utf-8"))  # conftest's
    for name, source in tests.items():
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text(source)
    return folder


# a scratch suite's pytest neither records its tests' seconds in this suite's tests/durations.json nor counts them
# in this lane's report (tools/run_tests.py hands both paths to this run in the environment)
SCRATCH_ENV = {k: v for k, v in os.environ.items() if k not in ("ZOO_RECORD_DURATIONS", "ZOO_LANE_REPORT")}


def pytest_in(folder, *args):
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(folder),
                           *args], cwd=folder, capture_output=True, text=True, timeout=300, env=SCRATCH_ENV)
    return done.returncode, done.stdout + done.stderr


def test_a_crashed_worker_fails_its_test_and_nothing_is_rerun(tmp_path):
    """No rerun policy (setup.cfg): a test whose xdist worker dies fails at once, as a plain failure does."""
    scratch_suite(tmp_path, {"test_crashing.py": CRASHING_TESTS})
    status, out = pytest_in(tmp_path, "-n", "2", "test_crashing.py")
    assert status == 1 and "3 failed" in out and "rerun" not in out, out
    assert "FAILED test_crashing.py::test_fails_once - AssertionError: a plain failure" in out, out
    assert "crashed while running" in out, out


GUARDED_TESTS = """
import sys, types

def test_imports_a_second_runtime():
    sys.modules["torch"] = types.ModuleType("torch")  # as `import torch` would

def test_after_it():
    assert "torch" in sys.modules
"""


def test_a_test_that_imports_torch_into_the_main_lane_fails(tmp_path):
    """The guard of tests/conftest.py: the first test that brings a runtime kept out of its lane fails, naming it;
    the Ray lane collects only its own files."""
    scratch_suite(tmp_path, {"test_guarded.py": GUARDED_TESTS, "test_ray_encode.py": "def test_ray():\n    pass\n"})
    status, out = pytest_in(tmp_path, ".")
    assert status == 1 and "2 passed, 1 error" in out, out  # test_ray_encode.py is not collected in the main lane
    assert "test_imports_a_second_runtime imported ['torch'] into a main-lane process" in out, out
    status, out = pytest_in(tmp_path, "--lane", "ray")
    assert status == 0 and "1 passed" in out, out


def test_the_lane_runner_sums_the_lanes_in_one_line(tmp_path):
    """tools/run_tests.py runs each lane as its own pytest and closes with one line that counts them all; a failure
    in any lane makes its exit status non-zero."""
    scratch_suite(tmp_path, {"test_main.py": "def test_a():\n    pass\n\ndef test_b():\n    pass\n",
                             "test_ray_encode.py": "def test_ray():\n    pass\n"})
    runner = [sys.executable, os.path.join(REPO, "tools", "run_tests.py"), "--root", str(tmp_path), "-p",
              "no:cacheprovider"]
    done = subprocess.run(runner, capture_output=True, text=True, timeout=300, env=SCRATCH_ENV)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines[-1] == "3 passed, 0 failed", done.stdout + done.stderr
    assert sum(line.startswith("== lane ") for line in lines) == 3  # main, ray, milvus (empty: no test, passes)
    (tmp_path / "test_milvus.py").write_text("def test_milvus():\n    assert False\n")
    done = subprocess.run(runner, capture_output=True, text=True, timeout=300, env=SCRATCH_ENV)
    assert done.returncode == 1 and done.stdout.strip().splitlines()[-1] == "3 passed, 1 failed", done.stdout


def test_recording_durations_replaces_the_lanes_tests_and_keeps_the_others(tmp_path):
    """``tools/run_tests.py --record-durations`` writes each test's seconds; a test no longer collected is dropped
    from the file when its whole lane ran, and the tests of a lane that did not run are kept."""
    scratch_suite(tmp_path, {"tests/test_main.py": "def test_a():\n    pass\n\ndef test_b():\n    pass\n"})
    recorded = tmp_path / "tests" / "durations.json"
    recorded.write_text(json.dumps({"tests/test_main.py::test_gone": 99.0, "tests/test_ray_encode.py::test_ray": 5}))
    runner = [sys.executable, os.path.join(REPO, "tools", "run_tests.py"), "--root", str(tmp_path), "--lanes", "main",
              "--record-durations", "-p", "no:cacheprovider"]
    done = subprocess.run(runner, capture_output=True, text=True, timeout=300, env=SCRATCH_ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(json.loads(recorded.read_text())) == ["tests/test_main.py::test_a", "tests/test_main.py::test_b",
                                                        "tests/test_ray_encode.py::test_ray"]
