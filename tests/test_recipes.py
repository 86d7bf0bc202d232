"""Every recipe in tasks/ against its job: each flag of the job is honoured (the recipe, or the job's report it
calls, reads that setting) or refused when set (exit status 2, the flag named), never accepted and dropped."""

import ast
import dataclasses
import inspect
import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

import zoo
import zoo.config
from zoo.config import _base_type, flag_name, not_honoured

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "tasks").glob("*.py"))


def recipe_job(path):
    """(job, the ``honours`` of its ``job.parse`` call or None, the recipe's syntax tree) of a recipe."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    command, honours = None, None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "job" and isinstance(node.func.value, ast.Name) and node.func.value.id == "zoo":
                command = node.args[0].value
            elif node.func.attr == "parse" and isinstance(node.func.value, ast.Name) and node.func.value.id == "job":
                for keyword in node.keywords:
                    if keyword.arg == "honours":
                        honours = eval(compile(ast.Expression(keyword.value), str(path), "eval"),
                                       {"zoo": zoo, **vars(zoo.config)})
    assert command, f"{path.name} takes no zoo.job(...)"
    return zoo.job(command), honours, tree


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
    report = ast.parse(textwrap.dedent(inspect.getsource(job.report)))
    read = fields_read(config_reads(tree) | config_reads(report), config_class)
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
