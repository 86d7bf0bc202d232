"""Long fuzzing run of zoo's property-based tests: >= 10,000 generated examples per target.

    python bench/fuzz.py                    # 10,000 examples per property (long texts: 1,000), ~10-20 min on 2 cores
    python bench/fuzz.py --examples 500     # quick
    python bench/fuzz.py --only serving     # the targets whose name contains "serving"; the others' figures are kept

Runs tests/test_properties.py and the server's JSON and gRPC fuzzing (tests/test_serving.py) through pytest with
ZOO_HYPOTHESIS_EXAMPLES set, reads Hypothesis' statistics, and writes bench/results/fuzz.json plus a table: per
target, the examples that passed, failed and were rejected as invalid, and the seconds spent.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TARGETS = ["tests/test_properties.py",
           "tests/test_serving.py::test_any_json_body_gets_200_or_4xx_and_the_server_keeps_serving",
           "tests/test_serving.py::test_any_grpc_predict_request_gets_ok_or_a_client_error"]


def parse_statistics(text):
    """{test name: {"passing", "failing", "invalid"}} from pytest --hypothesis-show-statistics output."""
    stats, current = {}, None
    for line in text.splitlines():
        name = re.match(r"\s*(?:tests/)?\S*::(\S+):\s*$", line)
        if name:
            current = name.group(1)
            stats.setdefault(current, {"passing": 0, "failing": 0, "invalid": 0})
            continue
        counts = re.search(r"(\d+) passing\D+?(\d+) failing\D+?(\d+) invalid", line)
        if counts and current:
            for key, value in zip(("passing", "failing", "invalid"), counts.groups()):
                stats[current][key] += int(value)
    return stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "fuzz.json"))
    parser.add_argument("--only", default="", help="run only the targets whose path contains this text; the "
                                                   "figures of the other targets already in --out are kept")
    args = parser.parse_args()
    targets = [t for t in TARGETS if args.only in t]
    env = {**os.environ, "ZOO_HYPOTHESIS_EXAMPLES": str(args.examples), "TF_CPP_MIN_LOG_LEVEL": "3"}
    start = time.time()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--hypothesis-show-statistics", "--hypothesis-seed=0", *targets],
                          cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.time() - start
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    run = {"command": " ".join(["bench/fuzz.py", *sys.argv[1:]]), "examples_requested": args.examples,
           "seconds": round(seconds, 1), "pytest_summary": summary,
           "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    stats = {}
    if args.only and os.path.exists(args.out):  # keep the figures of the targets not run this time
        old = json.load(open(args.out, encoding="utf-8"))
        earlier = {"command": old.get("command"), "examples_requested": old.get("examples_requested"),
                   "seconds": old.get("seconds", 0.0), "pytest_summary": old.get("pytest_summary"),
                   "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.path.getmtime(args.out)))}
        stats = {name: {"run": earlier, **s} for name, s in old.get("targets", {}).items()}
    stats.update({name: {**s, "run": run} for name, s in parse_statistics(done.stdout).items()})
    rows = ["| target | passing | failing | invalid | run (examples requested, seconds of the run) |",
            "|---|---|---|---|---|"]
    rows += [f"| {name} | {s['passing']} | {s['failing']} | {s['invalid']} | `{s['run']['command']}` "
             f"({s['run']['examples_requested']}, {s['run']['seconds']:.0f} s, {s['run']['finished']}) |"
             for name, s in stats.items() if "run" in s]
    table = "\n".join(rows)
    print(table)
    print(f"\npytest: {summary}; {seconds:.0f} s; examples requested per target: {args.examples}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"command": " ".join(["bench/fuzz.py", *sys.argv[1:]]), "examples_requested": args.examples,
                   "seconds": seconds, "pytest_returncode": done.returncode, "pytest_summary": summary,
                   "targets": stats, "table": table, "pytest_output_tail": done.stdout[-6000:]}, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
