"""Every ```python and ```bash block of README.md and docs/**/*.md runs here.

A page's blocks run top to bottom in one temporary folder (``tasks``, ``bench``, ``tools`` and ``data`` link to the
repository's, ``../shared`` to the shared reference data), with the repository's Python first on PATH; the python
blocks of a page share one fresh interpreter. Markers, on the line before a block:

* ``<!-- no-run: REASON -->``: not run (a GPU, hours of training, an install); reported as a skip with its reason.
* ``<!-- background: URL -->``: a bash block that starts a server; it runs in the background until the page ends,
  and the next block waits until URL answers.
* ``<!-- output: WHAT -->``: before a ```text block: the output the run block above it prints. Its lines must
  appear, in order, among the lines that block prints (log lines in between are allowed), so a page's shown output
  cannot drift from what the code gives.

README.md opens with its two set-up commands (a venv, an install, the main job on the whole train split / the
suite itself): they are not run here but by CI itself (``.ci/run`` installs from scratch and runs the suite), and
are counted with the marked blocks.

The blocks run with ``ZOO_JIT_COMPILE=0`` (TensorFlow training jobs as ``--no-jit-compile``): on the CPUs the suite runs on,
XLA makes training 2.4x slower (bench/results/train_xla.md), and what a page's example shows does not depend on
it; the tests of training itself run XLA's path. Blocks of other languages (text, json, console output) are not
run. A page whose run blocks read ``../shared``
needs the shared data (skipped without it; failed under CI=true). The test ids count each page's run blocks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import SHARED, check_command_flags, require_module, require_shared, shell_commands

ROOT = Path(__file__).resolve().parents[1]
RUN = ("python", "bash")
MARKER = re.compile(r"<!-- (no-run|background|output):(.*?)-->")
LINKED = ("tasks", "bench", "tools", "data")
BLOCK_TIMEOUT = 900
# Pages whose examples take under ~20 s on 2 cores run in the fast lane; the others are marked slow.
FAST = {"docs/reliability.md"}


@dataclasses.dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    no_run: str | None = None
    background: str | None = None
    expected_output: str | None = None  # the ```text block marked as this block's output

    @property
    def where(self):
        return f"{self.page}:{self.line}"


def parse(text, page):
    """The fenced code blocks of a Markdown text, with the marker on the line before each; a marker that is not
    right before a python or bash block, or that has no value, is an error naming the line."""
    blocks, lines, i, pending = [], text.split("\n"), 0, None
    while i < len(lines):
        line = lines[i]
        marker = MARKER.fullmatch(line.strip())
        if marker:
            if pending:
                raise ValueError(f"{page}:{pending[0]}: a marker must be followed by a code block")
            if not marker.group(2).strip():
                raise ValueError(f"{page}:{i + 1}: {marker.group(1)} marker without a value")
            pending = (i + 1, marker.group(1), marker.group(2).strip())
        elif line.startswith("```"):
            lang, start = line[3:].strip(), i
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                i += 1
            if i == len(lines):
                raise ValueError(f"{page}:{start + 1}: code block not closed")
            block = Block(page, start + 1, lang, "\n".join(lines[start + 1:i]) + "\n")
            if pending and pending[1] == "output":
                shown = next((b for b in reversed(blocks) if b.lang in RUN), None) if blocks else None
                if lang != "text" or shown is None or blocks[-1] is not shown or shown.no_run or shown.background:
                    raise ValueError(f"{page}:{pending[0]}: an output marker must come between a run block and "
                                     "the ```text block it shows")
                shown.expected_output = block.code
                pending = None
            elif pending:
                if lang not in RUN or (pending[1] == "background" and lang != "bash"):
                    raise ValueError(f"{page}:{pending[0]}: a {pending[1]} marker before a {lang or 'plain'} block")
                setattr(block, pending[1].replace("-", "_"), pending[2])
                pending = None
            blocks.append(block)
        elif line.strip() and pending:
            raise ValueError(f"{page}:{pending[0]}: a marker must be followed by a code block")
        i += 1
    if pending:
        raise ValueError(f"{page}:{pending[0]}: a marker must be followed by a code block")
    return blocks


def pages():
    found = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    return [p.relative_to(ROOT).as_posix() for p in found if p.is_file()]


SETUP_REASON = "the README's set-up commands: a fresh venv and install (run by .ci/run, not from inside the suite)"


def page_blocks(page):
    blocks = [b for b in parse((ROOT / page).read_text(encoding="utf-8"), page) if b.lang in RUN]
    if page == "README.md" and blocks and blocks[0].line == 1:
        blocks[0].no_run = SETUP_REASON
    return blocks


def run_params():
    params = []
    for page in pages():
        run = [b for b in page_blocks(page) if not b.no_run]
        if run:
            marks = () if page in FAST else (pytest.mark.slow,)
            params.append(pytest.param(page, marks=marks, id=f"{page} ({len(run)} blocks)"))
    return params


def marked_params():
    return [pytest.param(b, id=b.where) for page in pages() for b in page_blocks(page) if b.no_run]


def shows(printed, shown):
    """Whether the lines of ``shown`` appear, in order, among the lines of ``printed`` (trailing spaces ignored)."""
    lines = iter(line.rstrip() for line in printed.splitlines())
    return all(any(line == want for line in lines) for want in (w.rstrip() for w in shown.splitlines()) if want)


# ------------------------------------------------------------------------------ running a page
DRIVER = textwrap.dedent("""
    import json, sys, traceback
    namespace = {"__name__": "__main__"}
    for request in sys.stdin:
        request = json.loads(request)
        try:
            exec(compile(request["code"], request["name"], "exec"), namespace)
            status = "ok"
        except BaseException:
            traceback.print_exc()
            status = "error"
        sys.stdout.flush()
        sys.stderr.flush()
        print("\\n" + request["sentinel"] + status, flush=True)
""")


class PageRun:
    """A page's working folder, its Python interpreter (started on first use) and its background servers."""

    def __init__(self, tmp_path):
        self.work = tmp_path / "work"
        self.work.mkdir()
        for name in LINKED:
            (self.work / name).symlink_to(ROOT / name)
        if SHARED.exists():
            (tmp_path / "shared").symlink_to(SHARED)
        self.env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                        PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1",
                        ZOO_JIT_COMPILE="0")  # the commands' training without XLA: 2.4x faster on CPUs
        self.python = self.lines = None
        self.background = []  # (process, block)
        self.waiting = None  # (url, block) the next block waits for

    def run(self, block):
        if self.waiting:
            self.wait_for(*self.waiting)
            self.waiting = None
        if block.background:
            log = self.work.parent / f"background-{block.line}.log"
            with open(log, "w") as out:  # the child keeps its own copy of the descriptor
                process = subprocess.Popen(["bash", "-c", block.code], cwd=self.work, env=self.env, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)
            self.background.append((process, block, log))
            self.waiting = (block.background, block)
            return
        ok, output = self.run_python(block) if block.lang == "python" else self.run_bash(block)
        if not ok:
            pytest.fail(f"{block.where}: {block.lang} block failed\n{block.code}--- output ---\n{output[-6000:]}",
                        pytrace=False)
        if block.expected_output is not None and not shows(output, block.expected_output):
            pytest.fail(f"{block.where}: the page shows an output this block no longer prints\n--- shown ---\n"
                        f"{block.expected_output}--- printed ---\n{output[-6000:]}", pytrace=False)

    def run_bash(self, block):
        done = subprocess.run(["bash", "-e", "-c", block.code], cwd=self.work, env=self.env,
                              capture_output=True, text=True, timeout=BLOCK_TIMEOUT, check=False)
        return done.returncode == 0, done.stdout + done.stderr

    def run_python(self, block):
        if self.python is None:
            self.python = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=self.work, env=self.env,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           text=True, encoding="utf-8")
            self.lines = queue.Queue()
            threading.Thread(target=lambda: [self.lines.put(x) for x in self.python.stdout] + [self.lines.put(None)],
                             daemon=True).start()
        sentinel = f"@@docs-example-{time.monotonic_ns()}@@"
        self.python.stdin.write(json.dumps({"code": block.code, "name": block.where, "sentinel": sentinel}) + "\n")
        self.python.stdin.flush()
        output, deadline = [], time.monotonic() + BLOCK_TIMEOUT
        while True:
            try:
                line = self.lines.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                return False, "".join(output) + f"\n(timed out after {BLOCK_TIMEOUT} s)"
            if line is None:
                return False, "".join(output) + "\n(the interpreter exited)"
            if line.startswith(sentinel):
                return line.strip().endswith("ok"), "".join(output)
            output.append(line)

    def wait_for(self, url, block, timeout=300):
        deadline = time.monotonic() + timeout
        process, _, log = next(item for item in self.background if item[1] is block)
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"{block.where}: the background block exited ({process.returncode}) before {url} "
                            f"answered\n{Path(log).read_text()[-6000:]}", pytrace=False)
            try:
                with urllib.request.urlopen(url, timeout=5):
                    return
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"{block.where}: {url} did not answer within {timeout} s\n{Path(log).read_text()[-6000:]}",
                    pytrace=False)

    def close(self):
        if self.python is not None:
            self.python.stdin.close()
            try:
                self.python.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.python.kill()
        for process, _, _ in self.background:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)


@pytest.mark.parametrize("page", run_params())
def test_examples_run(page, tmp_path):
    """The page's python and bash blocks run in order without an error."""
    blocks = [b for b in page_blocks(page) if not b.no_run]
    if any("../shared" in b.code for b in blocks):
        require_shared("data", "models")
    runner = PageRun(tmp_path)
    try:
        for block in blocks:
            runner.run(block)
        if runner.waiting:  # a server started last must at least come up
            runner.wait_for(*runner.waiting)
    finally:
        runner.close()


@pytest.mark.parametrize("block", marked_params())
def test_marked_examples(block):
    """Blocks marked no-run still hold: a reason is given, Python parses (an included file exists), bash passes
    ``bash -n``, and every ``zoo`` command and recipe in it takes the flags it names (parsed, not run). Then they
    are counted in the skip report with their reasons."""
    import ast

    assert len(block.no_run.strip()) >= 10, f"{block.where}: say why the block does not run"
    if block.lang == "python":
        include = re.fullmatch(r'--8<-- "([^"]+)"\s*', block.code)
        if include:
            assert (ROOT / include.group(1)).is_file(), f"{block.where}: {include.group(1)} not found"
        else:
            ast.parse(block.code)
    else:
        checked = subprocess.run(["bash", "-n", "-c", block.code], capture_output=True, text=True)
        assert checked.returncode == 0, f"{block.where}: {checked.stderr}"
        for words in shell_commands(block.code):
            check_command_flags(words)  # argparse exits (code 2) naming a flag that does not exist
    pytest.skip(f"{block.where}: not run: {block.no_run}")


def test_the_manual_builds(tmp_path):
    """`mkdocs build --strict`: every page in the navigation exists, no link or API reference is broken."""
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        require_module(module, "pip install -e '.[docs]'")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    assert (tmp_path / "site" / "api" / "sentence-encoder" / "index.html").is_file()


# ------------------------------------------------------------------------------ the collector itself
def test_parse_finds_blocks_and_their_markers():
    text = textwrap.dedent("""\
        # Page
        <!-- no-run: needs a GPU -->
        ```bash
        train --gpu
        ```
        text
        ```python
        print(1)
        ```
        <!-- background: http://127.0.0.1:1/ -->
        ```bash
        serve
        ```
        ```text
        output
        ```
        """)
    blocks = parse(text, "p.md")
    assert [(b.line, b.lang, b.no_run, b.background) for b in blocks] == [
        (3, "bash", "needs a GPU", None), (7, "python", None, None), (11, "bash", None, "http://127.0.0.1:1/"),
        (14, "text", None, None)]
    assert blocks[1].code == "print(1)\n"


@pytest.mark.parametrize("text, error", [
    ("<!-- no-run: x -->\ntext\n```bash\nls\n```\n", "p.md:1: a marker must be followed by a code block"),
    ("<!-- no-run: -->\n```bash\nls\n```\n", "p.md:1: no-run marker without a value"),
    ("<!-- no-run: x -->\n```text\nls\n```\n", "p.md:1: a no-run marker before a text block"),
    ("<!-- background: http://x -->\n```python\n1\n```\n", "p.md:1: a background marker before a python block"),
    ("```bash\nls\n", "p.md:1: code block not closed"),
    ("<!-- output: x -->\n```text\n1\n```\n", "p.md:1: an output marker must come between a run block"),
    ("```python\n1\n```\n<!-- output: x -->\n```json\n1\n```\n", "p.md:4: an output marker must come between"),
])
def test_parse_rejects_misplaced_markers(text, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        parse(text, "p.md")


def test_every_page_parses_and_has_examples():
    """Every page's markers are well placed, and the manual has examples that run (the collector found them)."""
    run = marked = 0
    for page in pages():
        blocks = page_blocks(page)
        run += sum(not b.no_run for b in blocks)
        marked += sum(bool(b.no_run) for b in blocks)
    assert run >= 30 and marked >= 1, (run, marked)
    print(f"documentation examples: {run} run, {marked} marked not to run")


def test_readme_opens_with_the_two_set_up_commands():
    """README's first lines: one command sets up and runs the main job, one sets up and runs CI's test command."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").split("\n")
    assert lines[0] == "```bash" and lines[3] == "```", lines[:4]
    main_job, tests = lines[1], lines[2]
    assert "pip install" in main_job and main_job.endswith("python tasks/lcqmc_cosent.py"), main_job
    ci_run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci_command = re.search(r"python tools/run_tests\.py[^|\n]*?(?= 2>&1)", ci_run)
    assert "pip install" in tests and tests.endswith(ci_command[0]), (tests, ci_command[0])
    assert page_blocks("README.md")[0].no_run == SETUP_REASON


def test_a_shown_output_is_checked_against_what_the_block_prints(tmp_path):
    """A ```text block marked as a block's output fails the page when the block prints something else."""
    blocks = parse("```python\nprint('a')\nprint('b')\n```\n<!-- output: of the block above -->\n"
                   "```text\na\nb\n```\n", "p.md")
    assert blocks[0].expected_output == "a\nb\n"
    assert shows("[zoo] a log line\na\nb  \n", "a\nb\n") and not shows("b\na\n", "a\nb\n")
    runner = PageRun(tmp_path)
    try:
        runner.run(blocks[0])
        changed = dataclasses.replace(blocks[0], code="print('a')\nprint('c')\n")
        with pytest.raises(pytest.fail.Exception, match=r"p\.md:1: the page shows an output this block no longer"):
            runner.run(changed)
    finally:
        runner.close()


def test_runner_reports_a_failing_block(tmp_path):
    """A block that fails fails the page, naming its file and line; python blocks share their interpreter."""
    runner = PageRun(tmp_path)
    try:
        runner.run(Block("p.md", 3, "python", "x = 41\n"))
        runner.run(Block("p.md", 7, "python", "assert x + 1 == 42\nprint('shared', x)\n"))
        runner.run(Block("p.md", 9, "bash", "echo hi > made.txt\n"))
        runner.run(Block("p.md", 11, "python", "assert open('made.txt').read() == 'hi\\n'\n"))
        with pytest.raises(pytest.fail.Exception, match=r"p\.md:13: python block failed(.|\n)*ZeroDivisionError"):
            runner.run(Block("p.md", 13, "python", "1 / 0\n"))
        with pytest.raises(pytest.fail.Exception, match=r"p\.md:15: bash block failed"):
            runner.run(Block("p.md", 15, "bash", "false\necho not reached\n"))
    finally:
        runner.close()
