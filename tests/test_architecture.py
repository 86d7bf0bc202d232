"""The house rules, checked from the source and from fresh processes: imports run one way, importing zoo changes
nothing, the command line starts quietly and has one parser for every job, and the public API is reachable."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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


def run_python(code, env=None):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, **(env or {})})


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
    assert not [line for line in done.stderr.splitlines() if any(n in line for n in NOISE)], done.stderr


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
    args = parser.parse_args(["train", "bi-encoder", "--task", "BQ", "--loss", "sbert", "--no-length-buckets"])
    from zoo.jobs.bi_encoder import BiEncoderConfig

    assert args.config_class is BiEncoderConfig and args.objective == "sbert" and args.length_buckets is False


def test_bad_flag_fails_before_anything_is_loaded_or_written(tmp_path, capsys):
    """--warmup 1.5 is refused by the config itself: exit status 2, no run folder, no data read."""
    from zoo.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["train", "bi-encoder", "--task", "LCQMC", "--warmup", "1.5", "--output", str(out),
              "--data-dir", str(tmp_path / "no-data-here")])
    assert e.value.code == 2 and "--warmup" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit):
        main(["train", "bi-encoder", "--task", "LCQMC,NOPE"])
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
    parse(BiEncoderConfig, ["--task", "LCQMC"])
    list(logs.batch_starts(1000, 10, "predict"))
    assert "predict" in capsys.readouterr().err  # with progress bars on, parsing changes nothing
    parse(BiEncoderConfig, ["--task", "LCQMC", "--no-progress"])
    list(logs.batch_starts(1000, 10, "predict"))
    assert capsys.readouterr().err == ""
    list(logs.batch_starts(1000, 10, "predict", enabled=True))
    assert "predict" in capsys.readouterr().err


def test_evaluate_and_encode_commands(tmp_path, capsys):
    import keras

    import zoo
    from conftest import CJK_CHARS
    from test_training import write_synthetic_task
    from zoo.cli import main

    write_synthetic_task(str(tmp_path / "data"), sizes=(20, 40, 40))
    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    keras.utils.set_random_seed(0)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
    zoo.save_preset(zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=32), zoo.Tokenizer(vocab),
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
