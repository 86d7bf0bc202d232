"""The command line a newcomer meets: help without the backend, one flag vocabulary (old spellings still accepted),
limits honoured everywhere, Ctrl-C that saves and exits in one line, quiet logs, and bad input refused early."""

import argparse
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers import save_tiny_preset, write_synthetic_task

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("keras", "tensorflow", "jax", "torch")
# lines a tiny job must not print: TensorFlow's start-up, retracing and allocation warnings, XLA notices, tracebacks
NOISE = ("retracing", "Allocation of", "Ignoring Assert", "cuInit", "oneDNN", "absl::", "cpu_feature_guard",
         "cudart_stub", "XLA service", "Traceback", "FAILED_PRECONDITION", "INFO:zoo:")
TRAINING_COMMANDS = (("train", "bi-encoder"), ("train", "cross-encoder"), ("train", "dvbert"), ("train", "simbert"),
                     ("pretrain",), ("mirror-bert",), ("compare",))


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    write_synthetic_task(str(root / "data"), sizes=(320, 120, 120))
    save_tiny_preset(root / "preset")
    return root


def zoo_command(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "zoo", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})


def test_help_and_version_load_no_backend():
    """`zoo --help`, `zoo --version` and every `zoo COMMAND --help` parse before anything imports TensorFlow, JAX,
    Keras or torch; each command's help shows every default, the training jobs' --output included."""
    from zoo.cli import COMMANDS, build_parser

    probe = ("import sys, contextlib, io\nfrom zoo.cli import build_parser\nheavy = {}\n"
             "for words in %r:\n"
             "    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
             "        build_parser([*words, '--help']).parse_args([*words, '--help'])\n"
             "    heavy[' '.join(words)] = ([m for m in %r if m in sys.modules], out.getvalue())\n"
             "import json; print(json.dumps(heavy))") % ([list(w) for w, *_ in COMMANDS], HEAVY)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    helps = json.loads(done.stdout)
    assert len(helps) == len(COMMANDS)
    for command, (heavy, text) in helps.items():
        assert heavy == [], f"zoo {command} --help imported {heavy}"
        assert text.startswith("usage: zoo"), command
    parser = build_parser()

    def flag_help(words, flag):
        sub = parser
        for word in words:  # the subcommand's own parser
            sub = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
        action = next(a for a in sub._actions if flag in a.option_strings)
        return (action.help or "") % {"default": action.default}

    for words in TRAINING_COMMANDS:
        for flag in ("--output", "--limit-train", "--limit-eval", "--checkpoint", "--data-dir"):
            assert flag in helps[" ".join(words)][1], (words, flag)
        assert "default:" in flag_help(words, "--output"), words
    assert flag_help(("pretrain",), "--corpus").count("default:") == 1  # not the field's and the tuple's both
    assert "embedded" in flag_help(("train", "bi-encoder"), "--data-dir")
    version = zoo_command("--version", timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"zoo {__import__('zoo').__version__}"
    assert not [h for h in HEAVY if h in version.stderr]


def test_one_flag_vocabulary_and_old_spellings(caplog):  # parsing only: no setup_cli, the messages propagate
    """One name per concept across every job: --tasks, --checkpoint, --output, --limit-train / --limit-eval; the
    old spellings (--task, --from, --limit-groups, --out) still parse, with a message naming the replacement."""
    from zoo.cli import COMMANDS, build_parser, job

    renamed = {"task", "start", "out", "limit_groups"}
    for words, *_ in COMMANDS:
        fields = {f.name for f in dataclasses.fields(job(" ".join(words)).config_class)}
        assert not fields & renamed, (words, fields & renamed)
        if words in TRAINING_COMMANDS:
            assert {"checkpoint", "output", "limit_train", "limit_eval", "data_dir", "seed"} <= fields, words
    assert "limit_eval" in {f.name for f in dataclasses.fields(job("evaluate").config_class)}
    parser = build_parser()
    cases = [(["train", "bi-encoder", "--task", "LCQMC,BQ"], "tasks", ("LCQMC", "BQ"), "--tasks"),
             (["train", "cross-encoder", "--task", "BQ"], "tasks", ("BQ",), "--tasks"),
             (["pretrain", "--from", "somewhere"], "checkpoint", "somewhere", "--checkpoint"),
             (["mirror-bert", "--from", "elsewhere"], "checkpoint", "elsewhere", "--checkpoint"),
             (["train", "simbert", "--limit-groups", "7"], "limit_train", 7, "--limit-train"),
             (["export", "--model", "m", "--out", "o"], "output", "o", "--output")]
    for argv, field, value, replacement in cases:
        caplog.clear()
        args = parser.parse_args(argv)
        assert getattr(args, field) == value, argv
        assert f"{argv[-2]} is deprecated" in caplog.text and replacement in caplog.text, caplog.text
    new = parser.parse_args(["train", "bi-encoder", "--tasks", "LCQMC,BQ"])
    assert new.tasks == ("LCQMC", "BQ")


@pytest.mark.slow
def test_bad_input_is_refused_before_anything_is_read_or_written(tiny_setup, tmp_path, capsys):
    from zoo.cli import main
    from zoo.data.pair_files import read_pairs
    from zoo.errors import DataError

    # --epochs 0: one line, no usage dump, exit 2
    with pytest.raises(SystemExit) as e:
        main(["train", "bi-encoder", "--epochs", "0", "--output", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip().splitlines() == [
        "zoo train bi-encoder: error: --epochs must be >= 1, got 0"], err
    # a checkpoint that does not exist: refused before the data is read, no run folder left behind
    with pytest.raises(SystemExit) as e:
        main(["train", "bi-encoder", "--checkpoint", str(tmp_path / "nowhere"), "--data-dir",
              str(tmp_path / "no-data"), "--output", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "nowhere" in err and not (tmp_path / "b").exists(), err
    # an empty train file: a DataError naming it
    (tmp_path / "empty.data").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="empty.data: no sentence pairs"):
        read_pairs(tmp_path / "empty.data")
    data = tmp_path / "data"
    write_synthetic_task(str(data), sizes=(4, 20, 20))
    (data / "LCQMC.train.data").write_text("", encoding="utf-8")
    code = main(["train", "bi-encoder", "--checkpoint", str(tiny_setup / "preset"), "--data-dir", str(data),
                 "--output", str(tmp_path / "c"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "LCQMC.train.data: no sentence pairs" in err and "zero-size" not in err, err


@pytest.mark.slow
def test_encode_takes_a_column_of_a_tsv_and_warns_about_tabs(tiny_setup, tmp_path, capsys):
    import zoo
    from zoo.cli import main

    pairs = tmp_path / "pairs.tsv"
    lines = (tiny_setup / "data" / "LCQMC.test.data").read_text(encoding="utf-8").splitlines()[:5]
    pairs.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["encode", "--model", str(tiny_setup / "preset"), "--input", str(pairs), "--column", "2",
                 "--output", str(tmp_path / "b.npy"), "--no-progress"]) == 0
    encoder = zoo.SentenceEncoder.from_preset(tiny_setup / "preset")
    np.testing.assert_allclose(np.load(tmp_path / "b.npy"), encoder.encode([x.split("\t")[1] for x in lines]),
                               atol=1e-6)
    capsys.readouterr()
    assert main(["encode", "--model", str(tiny_setup / "preset"), "--input", str(pairs), "--output",
                 str(tmp_path / "w.npy"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "line 1 holds TABs" in err and "--column" in err, err
    assert main(["encode", "--model", str(tiny_setup / "preset"), "--input", str(pairs), "--column", "4",
                 "--output", str(tmp_path / "x.npy"), "--no-progress"]) == 2
    assert "pairs.tsv, line 1: 3 TAB-separated field(s), no column 4" in capsys.readouterr().err


def test_progress_bar_never_counts_past_the_epoch():
    """A resumed epoch's bar starts at an estimate of the pairs already seen; its count stays within the epoch."""
    from zoo.train.loop import ProgressBar

    class Batches:  # 10 steps of 100 pairs, the short one (4 pairs) early: the estimate undercounts the rest
        n = 904

        def __len__(self):
            return 10

    sizes = {step: 100 for step in range(5, 10)}
    bar = ProgressBar(Batches(), 0, 1, 5, sizes, "pair", True)
    for batch in range(5):
        bar.on_train_batch_end(batch, {"loss": 1.0})
    assert bar.bar.n <= Batches.n == bar.bar.total
    bar.on_epoch_end(0)


def run_tiny_job(tiny_setup, output, *extra, timeout=600):
    """The CLI on the tiny preset and data, as a user runs it: a fresh process, TensorFlow's own log level."""
    return zoo_command("train", "bi-encoder", "--checkpoint", tiny_setup / "preset", "--data-dir",
                       tiny_setup / "data", "--maxlen", "16", "--batch-size", "8", "--no-progress", "--output",
                       output, *extra, timeout=timeout, env={"TF_CPP_MIN_LOG_LEVEL": ""})


@pytest.mark.slow
def test_a_tiny_job_prints_only_its_own_lines_and_its_results_name_the_kept_epoch(tiny_setup, tmp_path):
    done = run_tiny_job(tiny_setup, tmp_path / "run", "--limit-train", "64", "--limit-eval", "40")
    assert done.returncode == 0, done.stderr[-3000:]
    noisy = [line for line in done.stderr.splitlines() if any(n in line for n in NOISE)]
    assert not noisy, noisy
    assert all(line.startswith("[zoo] ") or not line.strip() or line.startswith("|") or line.startswith("command:")
               or line.startswith("the model kept") for line in done.stderr.splitlines()), done.stderr
    assert "LCQMC.train.data: the first 64 of 320 pairs" in done.stderr
    assert "LCQMC.valid.data: the first 40 of 120 pairs" in done.stderr
    assert "LCQMC.test.data: the first 40 of 120 pairs" in done.stderr
    markdown = (tmp_path / "run" / "results.md").read_text(encoding="utf-8")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    best = results["best_epoch"]
    assert f"the model kept in OUTPUT/model: epoch {best}, chosen by valid spearman" in markdown
    again = run_tiny_job(tiny_setup, tmp_path / "run", "--limit-train", "64", "--limit-eval", "40")
    assert again.returncode == 0 and "holds a finished run" in again.stderr and "resuming" not in again.stderr


@pytest.mark.slow
def test_ctrl_c_saves_the_step_and_exits_130_in_one_line(tiny_setup, tmp_path):
    """SIGINT while steps run: the step is saved, one line names the rerun command, the process exits 130 within a
    few seconds; the rerun resumes at the saved step and finishes."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "zoo", "train", "bi-encoder", "--checkpoint", str(tiny_setup / "preset"),
           "--data-dir", str(tiny_setup / "data"), "--maxlen", "16", "--batch-size", "2", "--epochs", "3",
           "--save-every", "10", "--limit-eval", "20", "--no-progress", "--no-jit-compile", "--output", str(out)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.time() + 300
    while not (out / "checkpoint").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert proc.poll() is None, proc.stderr.read()[-3000:]
    time.sleep(0.5)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    took = time.time() - sent
    assert proc.returncode == 130, err[-3000:]
    assert took < 30, took
    lines = [line for line in err.splitlines() if line.startswith("interrupted at")]
    assert len(lines) == 1 and "resume with: zoo train bi-encoder" in lines[0], err[-3000:]
    assert "Traceback" not in err and "FAILED_PRECONDITION" not in err and "KeyboardInterrupt" not in err, err
    epoch, step = (int(x) for x in re.match(r"interrupted at epoch (\d+), step (\d+);", lines[0]).groups())
    state = json.loads((out / "checkpoint" / "state.json").read_text())["progress"]
    assert (state["epoch"] + 1, state["step"]) == (epoch, step) and step > 0  # saved at the step it stopped at
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"epoch {epoch}, step {step}" in rerun.stderr
    assert json.loads((out / "results.json").read_text())["epochs"][-1]["epoch"] == 3
