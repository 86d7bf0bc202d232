"""Run a task script in a process forked from a server that has already imported zoo.

The SIGKILL tests start a job dozens of times; each fresh ``python tasks/...`` spends ~12 s importing TensorFlow
before its first step. Here multiprocessing's ``forkserver`` imports zoo once and forks every run from it: each run
is still its own process (killed with SIGKILL, resumed by the next), running the script a user runs, from its top.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import sys

PRELOAD = ["zoo", "zoo.jobs.bi_encoder", "zoo.jobs.evaluate", "zoo.evaluation", "zoo.models", "zoo.train"]
_context = None


def _run(script, argv, log_path):
    """In the child: stdout to /dev/null, stderr to ``log_path``, then run ``script`` as ``__main__``."""
    with open(os.devnull, "w") as null, open(log_path, "a") as log:
        os.dup2(null.fileno(), 1)
        os.dup2(log.fileno(), 2)
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


def start(script, argv, log_path):
    """Start ``python script *argv`` (stderr to ``log_path``) as a process forked from the preloaded server; returns
    the ``multiprocessing.Process`` (``exitcode`` 0 when it finished, -9 after ``kill()``)."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    open(log_path, "w").close()  # empty from the start: no earlier run's lines are read as this run's
    process = _context.Process(target=_run, args=(str(script), [str(a) for a in argv], str(log_path)))
    process.start()
    return process


def run(script, argv, log_path, timeout=600):
    """``start`` and wait; returns the exit code (None if it was still running after ``timeout`` s: then killed)."""
    process = start(script, argv, log_path)
    process.join(timeout)
    if process.exitcode is None:
        process.kill()
        process.join()
        return None
    return process.exitcode
