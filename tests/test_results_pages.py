"""tools/results_pages.py: the manual's figures are generated from the result files, and a stale page fails."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def test_the_main_job_line_is_the_full_runs_record(copy):
    """The README's main-job figures are those of the recorded full run, machine included: nothing is
    extrapolated from a shorter run."""
    tool = load_tool()
    path = copy / "bench" / "results" / "runs" / "lcqmc_cosent.json"
    run = json.loads(path.read_text(encoding="utf-8"))
    assert run["data_files"]["train"].get("pairs_in_file") is None  # the whole train split
    readme = (copy / "README.md").read_text(encoding="utf-8")
    assert f"test Spearman {run['test_spearman']:.2f}" in readme and run["machine"]["cpu_kind"] in readme
    run["seconds"], run["machine"]["cpu_kind"] = 4321.0, "AVX2"
    path.write_text(json.dumps(run), encoding="utf-8")
    assert tool.main(["--root", str(copy)]) == 0
    readme = (copy / "README.md").read_text(encoding="utf-8")
    assert "72 min in all" in readme and "(AVX2" in readme


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
    assert "# New bench\n" in page and "`python bench/new_bench.py --rounds 3`" in page
    assert "| summary.ratio | 1.234 |" in page
    assert "[New bench](new_bench.md)" in (copy / "docs" / "results" / "index.md").read_text(encoding="utf-8")


def test_every_results_page_has_a_title_a_nav_entry_and_readable_tables():
    """A human H1 (not the file's name), the same title in mkdocs.yml's nav, no flattened JSON keys
    (``runs.x.test.LCQMC``), no table wider than 8 columns, and a command (or "not recorded") for every file."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs" / "results").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        title = re.search(r"^# (.+)$", text, re.MULTILINE)[1]
        assert title not in (page.stem, page.stem.replace("_", " ")), page.name
        if page.stem != "index":
            assert f"- {title}: results/{page.name}" in nav, f"{page.name}: no nav entry titled {title!r}"
        assert not re.search(r"^\| \w+(\.[\w-]+)+ \|", text, re.MULTILINE), f"{page.name}: flattened JSON keys"
        for header in re.findall(r"^(\|.*\|)\n\|---", text, re.MULTILINE):
            assert header.count("|") - 1 <= 8, f"{page.name}: a table of {header.count('|') - 1} columns: {header}"
    index = (ROOT / "docs" / "results" / "index.md").read_text(encoding="utf-8")
    assert not re.search(r"^\| `bench/results/[^|]*` \|\s*\|", index, re.MULTILINE), "an empty command cell"
    speed = (ROOT / "docs" / "results" / "speed.md").read_text(encoding="utf-8")
    assert "#### BERT L6/H384 (reference)" in speed and "\n- `python bench/bench_inference.py" in speed
    assert "test (first 2,000)" in speed and "(models.md) scores the full test splits" in speed


def test_word_order_ablation_shows_the_columns_its_conclusion_rests_on():
    """The bench-table block of docs/bi-encoders.md: WORDORDER and PAWS-X valid in a table narrow enough to read."""
    text = (ROOT / "docs" / "bi-encoders.md").read_text(encoding="utf-8")
    block = text.split("<!-- generated: bench-table quality_ablation -->", 1)[1].split("<!-- /generated -->", 1)[0]
    header = next(line for line in block.split("\n") if "WORDORDER" in line and line.startswith("|"))
    assert "PAWS-X valid" in header and "4-task mean" in header and header.count("|") - 1 <= 6


def test_public_models_table_is_generated_from_its_results_file(copy, capsys):
    """models.md and any page's ``public-models`` block show bench/results/public_baselines.json beside the presets'
    ship.json, each public row with its source; ``matchers`` shows zoo's bi- and cross-encoders."""
    tool = load_tool()
    path = copy / "bench" / "results" / "public_baselines.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    bge = next(m for m in data["models"] if m["model"] == "BAAI/bge-small-zh-v1.5")
    models = (copy / "docs" / "results" / "models.md").read_text(encoding="utf-8")
    assert f"| BAAI/bge-small-zh-v1.5 | 24 M params | {bge['test_spearman']['ATEC']:.2f} |" in models
    assert f"published: {bge['source']} |" in models and "| `zoo-embed-zh-L4` (zoo) |" in models
    bge["test_spearman"]["ATEC"] = 12.345
    path.write_text(json.dumps(data), encoding="utf-8")
    page = copy / "docs" / "choosing.md"
    page.write_text("# Choosing\n\n<!-- generated: public-models -->\n<!-- /generated -->\n\n"
                    "<!-- generated: matchers -->\n<!-- /generated -->\n", encoding="utf-8")
    assert tool.main(["--check", "--root", str(copy)]) == 1
    assert "docs/results/models.md" in capsys.readouterr().err
    assert tool.main(["--root", str(copy)]) == 0
    assert "| BAAI/bge-small-zh-v1.5 | 24 M params | 12.35 |" in (copy / "docs" / "results" / "models.md").read_text(
        encoding="utf-8")
    choosing = page.read_text(encoding="utf-8")
    assert "| BAAI/bge-small-zh-v1.5 | 24 M params | 12.35 |" in choosing and "one model per task" in choosing
    compare = json.loads((copy / "bench" / "results" / "runs" / "compare_4000.json").read_text(encoding="utf-8"))
    cross = next(r for r in compare["rows"] if r["model"] == "interact")
    assert f"| interaction cross-encoder | {cross['test_accuracy']:.2f} [" in choosing
    assert "| DvBERT bi-encoder" in choosing and "`python tasks/dvbert_distill.py" in choosing


def test_charts_are_drawn_from_the_result_files(copy, capsys):
    """The search chart (million.json) and, from a compare record that carries plot data, the cross-encoder
    pictures: missing ones make --check fail and are drawn by a write; without plot data the page says so."""
    tool = load_tool()
    results = copy / "docs" / "results"
    page = copy / "docs" / "cross-encoders.md"
    shown = page.read_text(encoding="utf-8")
    drawn = all("plot" in row for row in json.loads((copy / "bench" / "results" / "runs" / "compare_4000.json")
                                                    .read_text(encoding="utf-8"))["rows"])
    assert ("compare_4000_LCQMC_scores_" in shown) == drawn and ("(No pictures yet" in shown) == (not drawn)
    for chart in results.glob("search_recall_*.png"):
        chart.unlink()
    record = copy / "bench" / "results" / "runs" / "compare_4000.json"
    run = json.loads(record.read_text(encoding="utf-8"))
    plots = tool.plots_module()
    rng = np.random.default_rng(0)
    for row in run["rows"]:
        valid_labels, test_labels = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
        row["plot"] = plots.score_plot_record(valid_labels * 0.3 + rng.random(300), valid_labels,
                                              test_labels * 0.3 + rng.random(300), test_labels, 0.65)
    record.write_text(json.dumps(run), encoding="utf-8")
    assert tool.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "docs/results/search_recall_" in err and "docs/cross-encoders.md" in err
    assert tool.main(["--root", str(copy)]) == 0
    assert [p.stat().st_size > 10_000 for p in results.glob("search_recall_*.png")] == [True]
    text = page.read_text(encoding="utf-8")
    for kind in ("scores", "threshold"):
        [chart] = results.glob(f"compare_4000_LCQMC_{kind}_*.png")
        assert chart.stat().st_size > 10_000 and f"](results/{chart.name})" in text  # linked from docs/
    assert "(No pictures yet" not in text
    assert tool.main(["--check", "--root", str(copy)]) == 0


def test_score_plot_record_is_compact_and_complete():
    """What zoo compare keeps per task and model for its two pictures: histogram counts per label that add up to the
    test pairs, and accuracy on valid and test at 100 thresholds."""
    plots = load_tool().plots_module()
    rng = np.random.default_rng(1)
    valid_labels, test_labels = rng.integers(0, 2, 500), rng.integers(0, 2, 400)
    record = plots.score_plot_record(rng.random(500), valid_labels, rng.random(400) + test_labels, test_labels, 0.9)
    h, curve = record["test_histogram"], record["accuracy_by_threshold"]
    assert len(h["edges"]) == 51 and sum(h["similar"]) == test_labels.sum() and sum(h["not_similar"]) == 400 - \
        test_labels.sum()
    assert len(curve["thresholds"]) == len(curve["valid"]) == len(curve["test"]) == 100
    assert record["threshold"] == 0.9 and h["edges"][0] <= 0.9 <= h["edges"][-1]
    assert len(json.dumps(record)) < 6_000


def test_int8_ceiling_counts_an_encoders_work_on_padded_sorted_batches():
    """bench_int8_ceiling's arithmetic: 12 H^2 per token and layer plus attention, x2 for FLOP, on each sorted batch
    padded to its longest text."""
    spec = importlib.util.spec_from_file_location("bench_int8_ceiling", ROOT / "bench" / "bench_int8_ceiling.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    lengths = np.array([10, 10])
    assert bench.gflop(lengths, layers=2, hidden=4) == pytest.approx(2 * 2 * (12 * 16 * 20 + 2 * 4 * 200) / 1e9)

    class Pieces:  # a tokenizer whose texts are their own pieces
        @staticmethod
        def piece_ids(texts):
            return [list(t) for t in texts]

    texts = ["a" * n for n in range(1, 131)]  # 130 texts: batches of 64, 64, 2 once sorted
    padded = bench.batch_lengths(Pieces, texts, maxlen=100)
    assert len(padded) == 130 and list(np.unique(padded)) == [66, 100]  # 64+2 tokens; the rest cut at maxlen


def test_the_speed_block_names_zoos_fastest_system_in_batches_and_for_one_sentence(copy):
    """Per model: zoo's system with the best ratio to sentence-transformers' fastest at batch 64, and the one with
    the lowest one-sentence latency (the two may differ: OpenVINO leads in batches, ONNX Runtime for one text)."""
    tool = load_tool()
    path = copy / "bench" / "results" / "inference.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    model = next(iter(data["models"].values()))
    batched, single = [k for k in model["sentences_per_second"] if k.startswith("zoo_")][:2]
    model["speed_vs_best_st"][batched] = 9.87
    model["latency_batch1"][single]["median_ms"] = 0.01
    path.write_text(json.dumps(data), encoding="utf-8")
    text = tool.block_inference(tool.Sources(copy))
    assert f"zoo's fastest system in batches is {tool.system_label(batched)}" in text and "9.87x sentence-" in text
    assert f"for one sentence {tool.system_label(single)} (0.01 ms" in text
    assert tool.system_label("zoo_light_int8") == "`int8` on the light runtime" and tool.system_label("zoo_int8") == "`int8`"
