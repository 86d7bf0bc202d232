"""tools/results_pages.py: the manual's figures are generated from the result files, and a stale page fails."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_tool():
    spec = importlib.util.spec_from_file_location("results_pages", ROOT / "tools" / "results_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def copy(tmp_path):
    """A copy of what the generator reads and writes."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "bench" / "results", root / "bench" / "results")
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copytree(ROOT / "tasks", root / "tasks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "README.md", root / "README.md")
    for preset in (ROOT / "data" / "presets").iterdir():
        for name in ("ship.json", "zoo_config.json"):
            if (preset / name).exists():
                (root / "data" / "presets" / preset.name).mkdir(parents=True, exist_ok=True)
                shutil.copy(preset / name, root / "data" / "presets" / preset.name / name)
    (root / "data" / "LCQMC").mkdir(parents=True)
    (root / "data" / "LCQMC" / "LCQMC.train.data.gz").symlink_to(ROOT / "data" / "LCQMC" / "LCQMC.train.data.gz")
    return root


def test_the_manual_is_current():
    """Every results page and generated block matches the result files (else: run tools/results_pages.py)."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "results_pages.py"), "--check"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_fails_on_a_stale_block_and_write_repairs_it(copy, capsys):
    tool = load_tool()
    assert tool.main(["--check", "--root", str(copy)]) == 0
    readme = copy / "README.md"
    text = readme.read_text(encoding="utf-8")
    start = text.index("<!-- generated: models -->")
    edited = text[:start] + text[start:].replace("72.33", "99.99", 1)
    assert edited != text
    readme.write_text(edited, encoding="utf-8")
    assert tool.main(["--check", "--root", str(copy)]) == 1
    assert "README.md" in capsys.readouterr().err
    assert readme.read_text(encoding="utf-8") == edited  # --check writes nothing
    assert tool.main(["--root", str(copy)]) == 0
    assert readme.read_text(encoding="utf-8") == text
    assert tool.main(["--check", "--root", str(copy)]) == 0


def test_a_changed_result_file_changes_its_page(copy, capsys):
    tool = load_tool()
    path = copy / "bench" / "results" / "serving.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["results"][0]["p99_ms"] = 123456.0
    path.write_text(json.dumps(data), encoding="utf-8")
    assert tool.main(["--check", "--root", str(copy)]) == 1
    assert "docs/results/speed.md" in capsys.readouterr().err
    assert tool.main(["--root", str(copy)]) == 0
    assert "123456.0" in (copy / "docs" / "results" / "speed.md").read_text(encoding="utf-8")


def test_a_recipe_header_states_its_recorded_scores(copy):
    """The docstring block of a recipe carries the command and the test score of its run record."""
    tool = load_tool()
    run = json.loads((copy / "bench" / "results" / "runs" / "lcqmc_cosent_4000.json").read_text(encoding="utf-8"))
    recipe = (copy / "tasks" / "lcqmc_cosent.py").read_text(encoding="utf-8")
    assert f"test Spearman {run['test_spearman']:.2f}" in recipe
    assert "--limit-train 4000" in recipe
    run["test_spearman"] = 12.3456
    (copy / "bench" / "results" / "runs" / "lcqmc_cosent_4000.json").write_text(json.dumps(run), encoding="utf-8")
    assert tool.main(["--root", str(copy)]) == 0
    assert "test Spearman 12.35" in (copy / "tasks" / "lcqmc_cosent.py").read_text(encoding="utf-8")


def test_an_unknown_block_or_a_missing_source_names_the_file(copy):
    tool = load_tool()
    page = copy / "docs" / "search.md"
    page.write_text("# x\n\n<!-- generated: no-such-block -->\n<!-- /generated -->\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"docs/search\.md:3: unknown generated block 'no-such-block'"):
        tool.main(["--check", "--root", str(copy)])
    page.write_text("# x\n", encoding="utf-8")
    (copy / "bench" / "results" / "million.json").unlink()
    with pytest.raises(SystemExit, match=r"bench/results/million\.json not found"):
        tool.main(["--check", "--root", str(copy)])


def test_no_path_of_a_particular_machine_in_the_repository():
    """Results, documents and code name paths relative to the repository (runs/NAME, ../shared/...), never a
    machine's own folders."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\n")
    needles = ("/" + "work/", "/" + "root/")
    hits = []
    for name in filter(None, files):
        path = ROOT / name
        if not path.is_file() or path.suffix in (".h5", ".gz", ".npz", ".npy", ".png", ".onnx"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        hits += [f"{name}:{i}" for i, line in enumerate(text.split("\n"), 1) if any(n in line for n in needles)]
    assert not hits, "machine paths in: " + ", ".join(hits)


def test_a_new_result_file_gets_a_page(copy, capsys):
    """A benchmark file no page covers gets its own page (its table, else its scalar fields) and an index entry."""
    tool = load_tool()
    (copy / "bench" / "results" / "new_bench.json").write_text(
        json.dumps({"command": "bench/new_bench.py --rounds 3", "summary": {"ratio": 1.2345}}), encoding="utf-8")
    assert tool.main(["--check", "--root", str(copy)]) == 1
    assert "docs/results/new_bench.md" in capsys.readouterr().err
    assert tool.main(["--root", str(copy)]) == 0
    page = (copy / "docs" / "results" / "new_bench.md").read_text(encoding="utf-8")
    assert "`python bench/new_bench.py --rounds 3`" in page and "| summary.ratio | 1.234 |" in page
    assert "[new_bench](new_bench.md)" in (copy / "docs" / "results" / "index.md").read_text(encoding="utf-8")
