"""An installed wheel (not this checkout) carries every package and the shipped presets, loadable by name; and the
suite's own rerun policy for a crashed worker (setup.cfg)."""

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

    shipped = [p.strip().rstrip("/*") for p in setup_cfg()["options.package_data"]["zoo._presets"].split(",")]
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


def test_a_crashed_test_runs_once_more_and_a_plain_failure_does_not(tmp_path):
    """The suite's rerun policy (setup.cfg): a test whose xdist worker dies reruns once in a fresh worker; one that
    dies twice fails; a plain failure is never rerun."""
    pytest.importorskip("pytest_rerunfailures")
    (tmp_path / "setup.cfg").write_text(Path(REPO, "setup.cfg").read_text(encoding="utf-8"))
    (tmp_path / "test_crashing.py").write_text(CRASHING_TESTS)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                          "test_crashing.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300).stdout
    assert "2 failed, 1 passed, 2 rerun" in out, out
    assert "FAILED test_crashing.py::test_fails_once - AssertionError: a plain failure" in out, out
    assert "FAILED test_crashing.py::test_crashes_every_time" in out, out
