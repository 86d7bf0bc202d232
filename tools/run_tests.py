"""Run the test suite lane by lane and print one closing line.

    python tools/run_tests.py                  # every lane: the README's test command and CI's
    python tools/run_tests.py -m "not slow"    # the fast lane: arguments go to every lane's pytest
    python tools/run_tests.py --record-durations   # also record each test's seconds in tests/durations.json

Each lane is one pytest run with its own processes (tests/conftest.py LANES): the main lane on 2 xdist workers
(TensorFlow, ONNX Runtime, faiss, grpc), then Ray and Milvus Lite, one process each. The main lane hands its workers
one test at a time (``--maxschedchunk 1``): by default xdist first gives each worker a block of consecutive tests,
and with the longest tests first the first worker's block held every long test while the others ran short ones. PyTorch runs only in the
subprocesses of tests/torch_reference.py. The last line sums the lanes: "N passed, N failed, N skipped"; the exit
status is non-zero when a lane failed or crashed (a lane whose selection is empty counts as passed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LANES = (("main", ["-n", "2", "--maxschedchunk", "1"]), ("ray", []), ("milvus", []))
COUNTED = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
NO_TESTS = 5  # pytest's exit status when the selection is empty


def run_lane(root, lane, workers, args, record=False):
    """One pytest run in ``root``; returns (exit status, {outcome: count}) from the lane's report file. ``record``:
    each test's seconds go to tests/durations.json (the suite's longest-first order: tests/conftest.py)."""
    with tempfile.TemporaryDirectory(prefix="zoo_lane_") as tmp:
        report = os.path.join(tmp, "counts.json")
        env = {**os.environ, "ZOO_LANE_REPORT": report}
        if record:
            env["ZOO_RECORD_DURATIONS"] = os.path.join(root, "tests", "durations.json")
        command = [sys.executable, "-m", "pytest", "-q", f"--lane={lane}", *workers, *args]
        print(f"== lane {lane}: {' '.join(command[1:])}", flush=True)
        status = subprocess.call(command, cwd=root, env=env)
        try:
            with open(report, encoding="utf-8") as f:
                counts = json.load(f)
        except FileNotFoundError:  # pytest died before its summary
            counts = {}
    return status, counts


def machine():
    """The CPU model, its cores and memory (a crash or a time is read next to the machine it happened on)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info = f.read()
        model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
                     "unknown CPU")
        flags = [f for f in ("avx512_vnni", "amx_bf16") if f in info]
        with open("/proc/meminfo", encoding="utf-8") as f:
            gib = int(f.readline().split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        return "unknown (no /proc)"
    return f"{model}, {len(os.sched_getaffinity(0))} cores, {gib:.0f} GiB" + (f", {' '.join(flags)}" if flags else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lanes", default=",".join(name for name, _ in LANES),
                        help="comma-separated lanes to run (default: all)")
    parser.add_argument("--root", default=ROOT, help="the folder to run pytest in (default: this repository)")
    parser.add_argument("--record-durations", action="store_true",
                        help="record each test's seconds in tests/durations.json (the order of the next runs)")
    known, pytest_args = parser.parse_known_args()
    chosen = known.lanes.split(",")
    unknown = set(chosen) - {name for name, _ in LANES}
    if unknown:
        parser.error(f"unknown lanes {sorted(unknown)}; lanes: {[name for name, _ in LANES]}")
    t0, total, failed_lanes = time.time(), dict.fromkeys(COUNTED, 0), []
    for lane, workers in LANES:
        if lane not in chosen:
            continue
        status, counts = run_lane(known.root, lane, workers, pytest_args, known.record_durations)
        for k in COUNTED:
            total[k] += counts.get(k, 0)
        if status not in (0, NO_TESTS) or (status == NO_TESTS and counts.get("error")):
            failed_lanes.append(f"{lane} (exit {status})")
    minutes = (time.time() - t0) / 60
    print(f"machine: {machine()}")
    print(f"lanes: {', '.join(chosen)} in {minutes:.1f} min" + (f"; failed: {', '.join(failed_lanes)}"
                                                                  if failed_lanes else ""))
    extra = "".join(f", {total[k]} {k}" for k in ("skipped", "error", "xfailed", "xpassed") if total[k])
    print(f"{total['passed']} passed, {total['failed']} failed{extra}", flush=True)
    sys.exit(1 if failed_lanes or total["failed"] or total["error"] else 0)


if __name__ == "__main__":
    main()
