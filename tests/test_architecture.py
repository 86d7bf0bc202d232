"""The house rules, checked from the source and from fresh processes: imports run one way, importing zoo changes
nothing, the command line starts quietly and has one parser for every job, and the public API is reachable."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from zoo.presets import save_preset

REPO = Path(__file__).resolve().parents[1]
NOISE = ("cuda", "oneDNN", "absl::InitializeLog", "cpu_feature_guard", "XLA service")


def import_graph():
    """{module: modules of zoo it imports} read from the source, nested imports included."""
    modules = {}
    for path in (REPO / "zoo").rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = (ast.parse(path.read_text(encoding="utf-8")), path.name == "__init__.py")
    graph = {}
    for name, (tree, is_package) in modules.items():
        package = name if is_package else name.rsplit(".", 1)[0]
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                for alias in node.names:
                    for candidate in (f"{base}.{alias.name}", base):
                        if candidate in modules:
                            targets.add(candidate)
                            break
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name in modules}
        graph[name] = targets - {name, "zoo"}
    return graph


def find_cycle(graph):
    state, stack = {}, []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state and (cycle := visit(v)):
                return cycle
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (cycle := visit(u)):
            return cycle
    return None


def test_no_import_cycle_in_zoo():
    graph = import_graph()
    assert len(graph) > 30 and "zoo.paths" in graph
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
    assert graph["zoo.paths"] <= {"zoo.errors"} and graph["zoo.errors"] == set()  # the leaves
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]  # the checker sees a cycle


def layer_table():
    """[(layer, {module names})] in the order of docs/architecture.md's table (``jobs/`` is every module of the
    package ``zoo.jobs``; ``checkpoints/`` likewise)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = text.split("## Layers", 1)[1].split("\n\n## ", 1)[0]
    layers = []
    for line in rows.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("layer", "---"):
            continue
        names = set(re.findall(r"`([\w/]+)`", re.sub(r"\([^)]*\)", "", cells[1])))  # "`jobs/` (`a`, ...)": jobs/
        layers.append((cells[0], names))
    return layers


def layer_of(module, layers):
    """The index of ``module``'s row in the layer table, or None."""
    short = module.removeprefix("zoo.")
    for i, (_, names) in enumerate(layers):
        for name in names:
            if name.endswith("/") and (short == name[:-1] or short.startswith(name[:-1] + ".")):
                return i
            if short == name or (short == "zoo" and name == "__init__") or short == name.replace("/", "."):
                return i
    return None


def test_modules_import_only_their_own_and_lower_layers():
    """The layer table of docs/architecture.md, enforced: every module has a row, and none imports a later one."""
    layers, graph = layer_table(), import_graph()
    assert [name for name, _ in layers][:3] == ["leaves", "formats", "data"] and len(layers) == 12
    unplaced = sorted(m for m in graph if m != "zoo" and layer_of(m, layers) is None)
    assert not unplaced, f"modules missing from docs/architecture.md's layer table: {unplaced}"
    upward = sorted(f"{m} ({layers[layer_of(m, layers)][0]}) imports {t} ({layers[layer_of(t, layers)][0]})"
                    for m, targets in graph.items() if m != "zoo" for t in targets
                    if layer_of(t, layers) is not None and layer_of(t, layers) > layer_of(m, layers))
    assert not upward, upward
    # the checker sees a violation: a leaf importing the models layer
    fake = {"zoo.errors": {"zoo.models.task"}, "zoo.models.task": set()}
    assert any(layer_of(t, layers) > layer_of(m, layers) for m, ts in fake.items() for t in ts)


TESTS = REPO / "tests"


def imported_test_modules(source):
    """The test modules (``test_*``) and ``conftest`` that a module's source imports."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return [n for n in names if n.split(".")[0].startswith("test_") or n.split(".")[0] == "conftest"]


def test_no_test_module_imports_another():
    """What the tests share is in tests/helpers.py (and conftest.py's fixtures): no module of tests/ imports a
    test module or conftest."""
    offending = {p.name: imported_test_modules(p.read_text(encoding="utf-8")) for p in sorted(TESTS.glob("*.py"))}
    offending = {name: found for name, found in offending.items() if found}
    assert len(list(TESTS.glob("test_*.py"))) > 30 and not offending, offending
    assert imported_test_modules("from test_serving import predict\nimport conftest") == ["test_serving", "conftest"]


def test_longest_recorded_tests_run_first():
    """The suite's order comes from recorded durations (tests/durations.json), not from test names: test files by
    their recorded seconds in all, longest first, each file's tests together; within a file, tests of ``LONG`` seconds
    or more first, longest first, the rest in their order."""
    from types import SimpleNamespace

    from helpers import LONG, longest_first, recorded_durations

    ids = ("x.py::a", "x.py::b", "y.py::c", "z.py::d", "y.py::e", "z.py::f", "z.py::g")
    items = [SimpleNamespace(nodeid=n) for n in ids]
    durations = {"x.py::b": LONG + 5, "y.py::c": LONG - 1, "y.py::e": 2.0, "z.py::d": 10.0, "z.py::f": LONG + 50,
                 "z.py::g": LONG + 60}
    assert [i.nodeid for i in longest_first(items, durations)] == [
        "z.py::g", "z.py::f", "z.py::d", "x.py::b", "x.py::a", "y.py::c", "y.py::e"]
    recorded = recorded_durations()
    assert recorded and max(recorded.values()) >= LONG, "tests/durations.json: record it (tools/run_tests.py)"


def run_python(code, env=None):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_import_zoo_changes_no_environment_and_reaches_every_submodule():
    """zoo sets no environment variable of its own: what changes is exactly what importing TensorFlow changes."""
    changed = ("print(json.dumps({'changed': sorted(k for k in set(before) | set(os.environ) "
               "if before.get(k) != os.environ.get(k))}))")
    done = run_python(
        "import os, json; before = dict(os.environ); import zoo; "
        "mods = [zoo.evaluation.best_threshold, zoo.retrieval.SemanticIndex, zoo.data.load_task, "
        "zoo.serving.ModelServer, zoo.export.export_saved_model, zoo.generation.Seq2SeqDecoder, zoo.train.fit, "
        "zoo.jobs.bi_encoder.run]; " + changed, env={"TF_CPP_MIN_LOG_LEVEL": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    by_zoo = set(json.loads(done.stdout.strip().splitlines()[-1])["changed"])
    plain = run_python("import os, json; before = dict(os.environ); import tensorflow; " + changed,
                       env={"TF_CPP_MIN_LOG_LEVEL": ""})
    by_tensorflow = set(json.loads(plain.stdout.strip().splitlines()[-1])["changed"])
    assert "TF_CPP_MIN_LOG_LEVEL" not in by_zoo and by_zoo <= by_tensorflow, by_zoo - by_tensorflow
    # the library leaves file descriptor 2 alone: TensorFlow's own start-up lines pass through (the command-line
    # tools hide them: test_cli_starts_quietly_and_every_command_has_help)
    assert [line for line in done.stderr.splitlines() if any(n in line for n in NOISE)], done.stderr
    bare = run_python("import sys, zoo; print(sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch') "
                      "if m in sys.modules))", env={"TF_CPP_MIN_LOG_LEVEL": ""})
    assert bare.returncode == 0 and bare.stdout.strip() == "[]" and bare.stderr == "", bare.stderr


def test_cli_starts_quietly_and_every_command_has_help():
    done = subprocess.run([sys.executable, "-m", "zoo", "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and not [n for n in NOISE if n in done.stderr], done.stderr
    for command in ("train", "pretrain", "mirror-bert", "compare", "evaluate", "encode", "export", "serve"):
        assert command in done.stdout
    from zoo.cli import build_parser

    parser = build_parser()
    for words in (["train", "bi-encoder"], ["train", "cross-encoder"], ["train", "dvbert"], ["train", "simbert"],
                  ["pretrain"], ["mirror-bert"], ["compare"], ["evaluate"], ["encode"], ["export"], ["serve"]):
        with pytest.raises(SystemExit) as e:
            parser.parse_args(words + ["--help"])
        assert e.value.code == 0, words
    args = parser.parse_args(["train", "bi-encoder", "--tasks", "BQ", "--loss", "sbert", "--no-length-buckets"])
    from zoo.jobs.bi_encoder import BiEncoderConfig

    assert args.config_class is BiEncoderConfig and args.objective == "sbert" and args.length_buckets is False


def test_bad_flag_fails_before_anything_is_loaded_or_written(tmp_path, capsys):
    """--warmup 1.5 is refused by the config itself: exit status 2, no run folder, no data read."""
    from zoo.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["train", "bi-encoder", "--tasks", "LCQMC", "--warmup", "1.5", "--output", str(out),
              "--data-dir", str(tmp_path / "no-data-here")])
    assert e.value.code == 2 and "--warmup" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit):
        main(["train", "bi-encoder", "--tasks", "LCQMC,NOPE"])
    assert "NOPE" in capsys.readouterr().err
    from zoo.jobs.pretrain import PretrainConfig

    assert PretrainConfig(steps=5).eval_every == 5  # --steps 5 runs 5 steps (one evaluation), not 200


def test_no_progress_flag_silences_every_bar_of_the_process(monkeypatch, capsys):
    """--no-progress (parsed for a job) turns off the bars its evaluations draw by default too, not only training's;
    a bar a caller asks for explicitly still shows."""
    from zoo import logs
    from zoo.config import parse
    from zoo.jobs.bi_encoder import BiEncoderConfig

    monkeypatch.setattr(logs, "_bars_shown", True)  # restored after the test
    list(logs.batch_starts(1000, 10, "predict"))
    assert "predict" in capsys.readouterr().err  # 100 batches: a bar by default
    parse(BiEncoderConfig, ["--tasks", "LCQMC"])
    list(logs.batch_starts(1000, 10, "predict"))
    assert "predict" in capsys.readouterr().err  # with progress bars on, parsing changes nothing
    parse(BiEncoderConfig, ["--tasks", "LCQMC", "--no-progress"])
    list(logs.batch_starts(1000, 10, "predict"))
    assert capsys.readouterr().err == ""
    list(logs.batch_starts(1000, 10, "predict", enabled=True))
    assert "predict" in capsys.readouterr().err


@pytest.mark.slow
def test_evaluate_and_encode_commands(tmp_path, capsys):
    import keras

    import zoo
    from helpers import CJK_CHARS
    from helpers import write_synthetic_task
    from zoo.cli import main

    write_synthetic_task(str(tmp_path / "data"), sizes=(20, 40, 40))
    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    keras.utils.set_random_seed(0)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
    save_preset(zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=32), zoo.Tokenizer(vocab),
                    tmp_path / "bb")
    assert main(["evaluate", "--model", str(tmp_path / "bb"), "--tasks", "LCQMC", "--data-dir",
                 str(tmp_path / "data"), "--output", str(tmp_path / "eval")]) == 0
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert results["model_class"] == "SentenceEncoder" and "test_accuracy" in results["tasks"]["LCQMC"]
    assert "| LCQMC |" in capsys.readouterr().out
    (tmp_path / "texts.txt").write_text("".join(chars[:6]) + "\n\n" + "".join(chars[6:9]) + "\n", encoding="utf-8")
    assert main(["encode", "--model", str(tmp_path / "bb"), "--input", str(tmp_path / "texts.txt"), "--output",
                 str(tmp_path / "v.npy")]) == 0
    vectors = np.load(tmp_path / "v.npy")
    encoder = zoo.SentenceEncoder.from_preset(tmp_path / "bb")
    np.testing.assert_allclose(vectors, encoder.encode(["".join(chars[:6]), "", "".join(chars[6:9])]), atol=1e-6)
    assert main(["encode", "--model", str(tmp_path / "bb"), "--input", str(tmp_path / "missing.txt"), "--output",
                 str(tmp_path / "w.npy")]) == 2
    assert "missing.txt" in capsys.readouterr().err and not (tmp_path / "w.npy").exists()


def test_recipes_import_public_names_only():
    """tasks/*.py are written on zoo's public API: nothing from zoo.jobs, no name starting with "_"."""
    offending = []
    for path in sorted((REPO / "tasks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("zoo"):
                if node.module.startswith("zoo.jobs") or any(a.name.startswith("_") for a in node.names):
                    offending.append(f"{path.name}: from {node.module} import {[a.name for a in node.names]}")
            elif isinstance(node, ast.Import):
                offending += [f"{path.name}: import {a.name}" for a in node.names if a.name.startswith("zoo.jobs")]
            elif isinstance(node, ast.Attribute) and (node.attr == "jobs" or node.attr.startswith("_")) and \
                    isinstance(node.value, ast.Name) and node.value.id == "zoo":
                offending.append(f"{path.name}: zoo.{node.attr}")
    assert len(list((REPO / "tasks").glob("*.py"))) >= 8 and not offending, offending


@pytest.mark.slow
def test_keras_finds_zoo_classes_after_a_bare_import_zoo_in_either_order(tmp_path):
    """``import zoo`` loads no Keras, yet ``keras.saving.load_model`` finds zoo's classes whether Keras is imported
    before zoo or after it, or by one of zoo's own modules (the registration hooks)."""
    import keras

    import zoo

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "你", "好"]
    encoder = zoo.SentenceEncoder(zoo.BertBackbone(len(vocab), 1, 2, 8, 16, max_sequence_length=16),
                                  zoo.Tokenizer(vocab))
    path = str(tmp_path / "enc.keras")
    encoder.save(path)
    want = encoder.encode(["你好"])
    for imports in ("import zoo, keras", "import keras, zoo", "from zoo.backbones.bert import BertBackbone; import keras"):
        done = run_python(f"import numpy as np; {imports}; m = keras.saving.load_model({path!r}); "
                          f"print(type(m).__name__, np.abs(m.encode(['你好']) - np.array({want.tolist()})).max())")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "could not be registered" not in done.stderr, done.stderr  # never a circular import
        name, diff = done.stdout.split()[-2:]
        assert name == "SentenceEncoder" and float(diff) < 1e-6, (imports, done.stdout)
    assert keras.saving.get_registered_object("zoo>SentenceEncoder") is zoo.SentenceEncoder


def test_deprecated_names_warn_with_their_replacement_and_still_work(tmp_path, tiny_vocab):
    """Every alias kept for a release warns (DeprecationWarning naming the replacement and the release that removes
    it) and still does its job; no doc teaches them."""
    import zoo
    from zoo.presets import load_saved

    vocab = tiny_vocab[0]
    backbone = zoo.BertBackbone(len(vocab), 1, 2, 8, 16, max_sequence_length=16)
    tokenizer = zoo.Tokenizer(vocab)
    encoder = zoo.SentenceEncoder(backbone, tokenizer)
    with pytest.warns(DeprecationWarning, match=r"zoo.save_preset is deprecated .* zoo 0\.4: use model.save_to_pre"):
        zoo.save_preset(backbone, tokenizer, tmp_path / "bb")
    for name, replacement in [("load_backbone", "zoo.BertBackbone.from_preset"),
                              ("load_tokenizer", "zoo.Tokenizer.from_preset"), ("load_model", "zoo.from_preset"),
                              ("load_preset", "zoo.from_preset")]:
        with pytest.warns(DeprecationWarning, match=f"zoo.{name} is deprecated.*use {re.escape(replacement)}"):
            loaded = getattr(zoo, name)(tmp_path / "bb")
        assert loaded is not None
    with pytest.warns(DeprecationWarning, match=r"SentenceEncoder.save\(folder\) is deprecated.*save_to_preset"):
        encoder.save(tmp_path / "enc")
    assert type(load_saved(tmp_path / "enc")).__name__ == "SentenceEncoder"
    with pytest.warns(DeprecationWarning, match="Tokenizer.save is deprecated"):
        tokenizer.save(tmp_path / "tok")
    with pytest.warns(DeprecationWarning, match="SentenceEncoder.from_checkpoint is deprecated"):
        zoo.SentenceEncoder.from_checkpoint(tmp_path / "enc")
    with pytest.warns(DeprecationWarning, match="SentenceEncoder.load is deprecated"):
        zoo.SentenceEncoder.load(tmp_path / "enc")
    docs = [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "zoo").rglob("*.py")]
    taught = [f"{p.name}: {n}" for p in docs for n in ("zoo.load_backbone", "zoo.load_tokenizer", "zoo.load_model(",
                                                        "zoo.load_preset", "zoo.save_preset(")
              if n in p.read_text(encoding="utf-8")]
    assert not taught, taught


def test_a_deprecated_spelling_is_an_error_in_the_tests():
    """setup.cfg turns zoo's own deprecation warnings into errors, so zoo's code (and the tests, outside
    ``pytest.warns``) never uses a deprecated spelling; other packages' DeprecationWarnings are not errors."""
    import warnings

    import zoo
    from zoo.errors import ZooDeprecationWarning

    with pytest.raises(ZooDeprecationWarning, match="zoo.load_tokenizer is deprecated"):
        zoo.load_tokenizer  # noqa: B018
    warnings.warn("another package's deprecation", DeprecationWarning)  # ignored, not raised


@pytest.mark.slow
def test_every_submodule_is_an_attribute_of_a_bare_import_zoo():
    """``import zoo`` then ``zoo.logs``, ``zoo.train`` ...: every module of the package is reachable by attribute."""
    import pkgutil

    import zoo

    names = sorted(m.name for m in pkgutil.iter_modules(zoo.__path__) if not m.name.startswith("_"))
    done = run_python("import zoo; print([n for n in %r if getattr(zoo, n) is None])" % names)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr[-3000:]
    assert {"logs", "train", "data", "cli"} <= set(names)


def test_a_feature_whose_extra_is_missing_names_the_pip_install(monkeypatch):
    """With an optional package absent, the feature that needs it raises MissingExtra naming ``pip install
    'zoo[EXTRA]'``; the core (loading, training, encode) needs none of them (setup.cfg's install_requires)."""
    import configparser

    from zoo.errors import MissingExtra, require
    from zoo.retrieval.base import SemanticIndex

    for module in ("faiss", "bm25s"):
        monkeypatch.setitem(sys.modules, module, None)  # "import faiss" now raises ImportError
    index = SemanticIndex(dim=4, backend="hnsw").add(vectors=np.eye(4, dtype="float32"), texts=list("一二三四"))
    with pytest.raises(MissingExtra, match=r"pip install 'zoo\[search\]'"):
        index.search_vectors(np.eye(4, dtype="float32")[:1], 2)
    with pytest.raises(MissingExtra, match=r"BM25.*pip install 'zoo\[search\]'"):
        index.search_lexical(["一"], 2)
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingExtra, match=r"zoo\[ray\]") as e:
        require("ray", "ray", "zoo encode --engine ray")
    assert isinstance(e.value, ImportError)
    from zoo.inference import sessions
    from zoo.tokenizer import graph

    monkeypatch.setitem(sys.modules, "tensorflow_text", None)
    with pytest.raises(MissingExtra, match=r"SavedModel.*pip install 'zoo\[serve\]'"):
        graph.tf_text()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingExtra, match=r"ONNX.*pip install 'zoo\[onnx\]'"):
        sessions.require_onnx()
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    core = setup["options"]["install_requires"]
    for optional in ("faiss", "bm25s", "starlette", "uvicorn", "grpcio", "onnx", "matplotlib", "pymilvus", "ray",
                     "tensorflow-text"):
        assert optional not in core, optional
    extras = setup["options.extras_require"]
    assert {"serve", "search", "onnx", "plots", "milvus", "ray", "docs", "all", "test"} <= set(extras)
