"""Every recipe in tasks/ against its job: each flag of the job is honoured (the recipe, or the job's report it
calls, reads that setting) or refused when set (exit status 2, the flag named), never accepted and dropped."""

import ast
import dataclasses
import inspect
import json
import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import numpy as np
import pytest

import zoo
import zoo.config
from helpers import recipe_job
from zoo.config import _base_type, flag_name, not_honoured

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "tasks").glob("*.py"))




def config_reads(tree, name="config"):
    """Attribute names read from the variable ``name`` in a syntax tree."""
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == name}


def fields_read(names, config_class):
    """``names`` with the properties of ``config_class`` among them replaced by the fields they read."""
    fields, todo, seen = set(), list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        attribute = getattr(config_class, name, None)
        if isinstance(attribute, property) or inspect.isfunction(attribute):  # a property, or a method such as reading
            function = attribute.fget if isinstance(attribute, property) else attribute
            todo += config_reads(ast.parse(textwrap.dedent(inspect.getsource(function))), "self")
        else:
            fields.add(name)
    return fields


def steps_reads(job, tree):
    """Attribute names the job's steps that the recipe calls (``steps.NAME(...)``) read from their ``config``, and
    the job module's functions (and ``zoo.jobs.common``'s) those steps call in turn."""
    from zoo.jobs import common

    called = {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
              and node.func.value.id == "steps"}
    reads, seen = set(), set()
    todo = [(job.module, name) for name in called]
    while todo:
        module, name = todo.pop()
        function = getattr(module, name, None)
        if (module, name) in seen or not inspect.isfunction(function):
            continue
        seen.add((module, name))
        source = ast.parse(textwrap.dedent(inspect.getsource(function)))
        reads |= config_reads(source)
        for node in ast.walk(source):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                todo.append((module, node.func.id))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    isinstance(node.func.value, ast.Name) and node.func.value.id == "common":
                todo.append((common, node.func.attr))
    return reads


def flagged_fields(config_class):
    return [f for f in dataclasses.fields(config_class) if f.metadata.get("help")]


def set_flag(field, config_class):
    """Command-line words setting ``field`` to something other than its default."""
    flag = flag_name(field)
    kind = _base_type(typing.get_type_hints(config_class)[field.name])
    if kind is bool:
        return [flag]
    if field.metadata.get("choices"):
        return [flag, next(c for c in field.metadata["choices"] if c != field.default)]
    if kind is tuple:
        return [flag, "PAWSX"]
    if kind in (int, float):
        return [flag, str((field.default or 0) + (1 if kind is int else 0.5))]
    return [flag, "elsewhere"]


def test_every_recipe_is_found():
    assert {p.name for p in RECIPES} >= {"lcqmc_cosent.py", "train_bi_encoder.py", "dvbert_distill.py",
                                         "pretrain.py", "compare_matching.py"}


@pytest.mark.parametrize("path", RECIPES, ids=[p.name for p in RECIPES])
def test_each_flag_of_the_job_is_honoured_or_refused(path, capsys):
    job, honours, tree = recipe_job(path)
    config_class = job.config_class
    refused = not_honoured(config_class, honours)
    runs_the_job = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "run"
                       and isinstance(n.func.value, ast.Name) and n.func.value.id == "job" for n in ast.walk(tree))
    if runs_the_job:  # the recipe hands the config to the job itself
        assert not refused
        return
    read = fields_read(config_reads(tree) | steps_reads(job, tree), config_class)
    honoured = [f.name for f in flagged_fields(config_class) if f.name not in refused]
    assert [name for name in honoured if name not in read] == [], f"{path.name} takes these flags and drops them"
    required = [word for f in flagged_fields(config_class) if f.metadata.get("required")
                for word in set_flag(f, config_class)]
    for field in flagged_fields(config_class):
        if field.name not in refused:
            continue
        with pytest.raises(SystemExit) as exit_info:
            job.parse([*required, *set_flag(field, config_class)], honours=honours)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"{flag_name(field)}: not honoured" in err, (field.name, err)
        assert f"zoo {job.command} does" in err


def test_the_lcqmc_recipe_refuses_the_flags_it_does_not_act_on(capsys):
    """--eval-tasks and --batching used to be accepted and dropped by tasks/lcqmc_cosent.py: now the script exits 2
    naming both, before loading any data; its --help lists them apart."""
    done = subprocess.run([sys.executable, str(REPO / "tasks" / "lcqmc_cosent.py"), "--eval-tasks", "PAWSX",
                           "--batching", "mixed", "--output", "never-written"], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--batching, --eval-tasks: not honoured by this script" in done.stderr, done.stderr[-2000:]
    assert not (REPO / "never-written").exists()
    job, honours, _ = recipe_job(REPO / "tasks" / "lcqmc_cosent.py")
    with pytest.raises(SystemExit):
        job.parse(["--help"], honours=honours)
    help_text = capsys.readouterr().out
    usage, refused_part = help_text.split("Not honoured here")
    assert "--batching" not in usage and "--pooling" in usage and "--batching" in refused_part
    config = job.parse(["--tasks", "LCQMC", "--pooling", "mean"], honours=honours)  # the defaults pass
    assert config.pooling == "mean" and config.tasks == ("LCQMC",)


def test_honours_names_fields_only():
    with pytest.raises(ValueError, match="honours names no field of BiEncoderConfig: \\['poolin'\\]"):
        zoo.job("train bi-encoder").parse([], honours=("poolin",))


# ---------------------------------------------------------------------------------- each recipe = its job
TINY = ["--data-dir", "{data}", "--checkpoint", "{preset}", "--epochs", "1", "--batch-size", "16", "--maxlen", "16",
        "--no-progress", "--no-jit-compile", "--seed", "7"]
RUNS = {  # recipe -> its tiny run's flags (the same for the recipe and for its job)
    "lcqmc_cosent.py": [*TINY, "--lr", "2e-3", "--limit-eval", "100"],
    "train_bi_encoder.py": [*TINY, "--lr", "2e-3", "--limit-eval", "100", "--tasks", "LCQMC", "--loss", "cosine_mse"],
    "train_cross_encoder.py": [*TINY, "--lr", "1e-3", "--limit-eval", "100", "--tasks", "LCQMC"],
    "dvbert_distill.py": [*TINY, "--lr", "2e-3", "--limit-eval", "100", "--tasks", "LCQMC", "--teacher", "{teacher}",
                          "--objective", "cosent-gap", "--limit-train", "160"],
    "simbert_train.py": [*TINY, "--lr", "1e-3", "--tasks", "LCQMC", "--eval-tasks", "LCQMC", "--limit-eval", "60",
                         "--limit-train", "64", "--samples", "一二三"],
    "mirror_bert.py": [*TINY, "--lr", "1e-3", "--tasks", "LCQMC", "--limit-train", "64", "--limit-eval", "60"],
    "pretrain.py": ["--checkpoint", "{mlm_preset}", "--data-dir", "{data}", "--corpus", "{corpus}", "--task-texts",
                    "LCQMC", "--steps", "4", "--eval-every", "2", "--batch-size", "8", "--maxlen", "32",
                    "--no-progress", "--no-jit-compile", "--limit-eval", "20", "--seed", "7"],
}
NOT_SCORES = ("command", "versions", "machine", "config", "distribution", "train_seconds", "seconds", "data_files")


def test_every_recipe_has_a_tiny_run_or_runs_its_job_itself():
    for path in RECIPES:
        job, _, tree = recipe_job(path)
        runs_the_job = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "run"
                           for n in ast.walk(tree))
        assert path.name in RUNS or runs_the_job, f"{path.name}: add its tiny run to RUNS"


def scores(results):
    """A results.json without what a second run of the same settings may change (times, paths, versions)."""
    return {k: v for k, v in results.items() if k not in NOT_SCORES}


@pytest.fixture(scope="module")
def tiny_runs(tiny_setup, tmp_path_factory):
    """What the tiny runs need beside ``tiny_setup``: a preset with an MLM head, a corpus file, where the teacher goes
    (``trained_teacher``)."""
    import keras

    from helpers import CJK_CHARS
    from zoo.presets import save_preset

    root = tmp_path_factory.mktemp("recipes")
    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
    keras.utils.set_random_seed(2)
    save_preset(zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=64, dropout=0.0, with_mlm=True),
                zoo.Tokenizer(vocab), root / "mlm")
    rng = np.random.default_rng(0)
    (root / "corpus.txt").write_text("\n".join("".join(rng.choice(chars, 40)) + "。" + "".join(rng.choice(chars, 30))
                                               for _ in range(60)) + "\n", encoding="utf-8")
    values = {"data": str(tiny_setup / "data"), "preset": str(tiny_setup / "preset"), "mlm_preset": str(root / "mlm"),
              "corpus": str(root / "corpus.txt"), "teacher": str(root / "teacher" / "model")}
    return values


def trained_teacher(values):
    """The cross-encoder the distillation recipe learns from, trained at ``values["teacher"]`` the first time."""
    if not Path(values["teacher"]).exists():
        zoo.job("train cross-encoder").run(zoo.job("train cross-encoder").parse(
            [f.format(**values) for f in RUNS["train_cross_encoder.py"]] + ["--output", str(Path(values["teacher"]).parent)]))
    return values["teacher"]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RUNS))
def test_recipe_equals_its_job(recipe, tiny_runs, tmp_path, monkeypatch):
    """A recipe runs its job's steps: the recipe and ``zoo.job(...).run`` with the same flags and seed write the
    same results.json, score for score, curve for curve (in this process, one after the other)."""
    import runpy

    from zoo import logs

    path = REPO / "tasks" / recipe
    job, honours, _ = recipe_job(path)
    if any("{teacher}" in f for f in RUNS[recipe]):
        trained_teacher(tiny_runs)
    flags = [f.format(**tiny_runs) for f in RUNS[recipe]]
    monkeypatch.setattr(logs, "_bars_shown", logs._bars_shown)  # --no-progress turns the bars off process-wide
    monkeypatch.setattr(sys, "argv", [str(path), *flags, "--output", str(tmp_path / "recipe")])
    runpy.run_path(str(path), run_name="__main__")
    job.run(job.parse([*flags, "--output", str(tmp_path / "job")], honours=honours))
    by_recipe, by_job = (json.loads((tmp_path / name / "results.json").read_text(encoding="utf-8"))
                         for name in ("recipe", "job"))
    assert scores(by_recipe) == scores(by_job)
    curve = by_job.get("epochs") or by_job.get("curve")
    assert curve and len(curve) >= 2 and scores(by_job)  # the runs trained and were scored
