"""A newcomer's first hour, timed: every ``zoo`` command with tiny settings, one after the other, as a user types them.

    python tools/tiny_runs.py                       # writes bench/results/tiny_runs.json and .md
    python tools/tiny_runs.py --only "train bi-encoder,encode"

Each command runs in a fresh process on the embedded preset and LCQMC files (``--data-dir`` adds the other tasks'
where a command needs them), with ``--limit-train 500 --limit-eval 200`` or the command's equivalent, in a
temporary folder. Reported per command: wall seconds (start-up included), its exit status, and whether its output
stayed quiet (no TensorFlow start-up, retracing or traceback lines). Also the start-up of ``zoo --help`` and of
``zoo encode`` on a one-line file. The machine's load is not controlled: run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOISE = ("retracing", "Allocation of", "Ignoring Assert", "cuInit", "oneDNN", "absl::", "cpu_feature_guard",
         "cudart_stub", "XLA service", "Traceback", "FAILED_PRECONDITION", "INFO:zoo:")
LIMITS = ["--limit-train", "500", "--limit-eval", "200"]


def commands(work, data_dir):
    """(name, argv) of the tiny runs, in an order where each one's inputs exist."""
    texts = os.path.join(work, "texts.txt")
    return [
        ("zoo --help", ["--help"]),
        ("encode, one line (start-up)", ["encode", "--input", os.path.join(work, "one.txt"), "--output",
                                         os.path.join(work, "one.npy"), "--no-progress"]),
        ("train bi-encoder", ["train", "bi-encoder", *LIMITS, "--output", os.path.join(work, "bi")]),
        ("train cross-encoder", ["train", "cross-encoder", *LIMITS, "--maxlen", "64", "--output",
                                 os.path.join(work, "cross")]),
        ("train dvbert", ["train", "dvbert", *LIMITS, "--epochs", "1", "--teacher", os.path.join(work, "cross", "model"),
                          "--output", os.path.join(work, "dvbert")]),
        ("train simbert", ["train", "simbert", "--tasks", "LCQMC", "--limit-train", "300", "--limit-eval", "200",
                           "--eval-tasks", "LCQMC", "--samples", "我想买一部手机", "--output", os.path.join(work, "simbert")]),
        ("pretrain", ["pretrain", "--steps", "5", "--limit-train", "500", "--batch-size", "8", "--maxlen", "64",
                      "--data-dir", data_dir, "--output", os.path.join(work, "pretrain")]),
        ("mirror-bert", ["mirror-bert", *LIMITS, "--batch-size", "50", "--output", os.path.join(work, "mirror")]),
        ("compare", ["compare", "--tasks", "LCQMC", *LIMITS, "--output", os.path.join(work, "compare")]),
        ("evaluate", ["evaluate", "--model", os.path.join(work, "bi", "model"), "--tasks", "LCQMC", "--limit-eval",
                      "200"]),
        ("encode, 1,000 lines", ["encode", "--input", texts, "--output", os.path.join(work, "v.npy"), "--no-progress"]),
        ("index build", ["index", "build", "--input", texts, "--output", os.path.join(work, "index")]),
        ("search", ["search", "--index", os.path.join(work, "index"), "--query", "花呗怎么开通"]),
        ("export", ["export", "--model", os.path.join(work, "bi", "model"), "--output", os.path.join(work, "models")]),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=os.path.join("..", "shared", "data"),
                        help="where the pretraining corpus is (default: ../shared/data)")
    parser.add_argument("--only", default="", help="comma-separated command names to run (default: all)")
    parser.add_argument("--output", default=os.path.join(REPO, "bench", "results", "tiny_runs"))
    args = parser.parse_args()
    only = {c.strip() for c in args.only.split(",") if c.strip()}
    rows, load_before = [], os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="zoo-tiny-") as work:
        import gzip

        with gzip.open(os.path.join(REPO, "data", "LCQMC", "LCQMC.test.data.gz"), "rt", encoding="utf-8") as f:
            lines = [next(f).split("\t")[0] for _ in range(1000)]
        with open(os.path.join(work, "texts.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(work, "one.txt"), "w", encoding="utf-8") as f:
            f.write(lines[0] + "\n")
        for name, argv in commands(work, os.path.abspath(args.data_dir)):
            if only and name not in only:
                continue
            start = time.time()
            done = subprocess.run([sys.executable, "-m", "zoo", *argv], capture_output=True, text=True, cwd=work,
                                  env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": ""})
            seconds = time.time() - start
            noisy = [line for line in done.stderr.splitlines() if any(n in line for n in NOISE)]
            data_dir = os.path.abspath(args.data_dir)
            shown = " ".join(a.replace(work + os.sep, "").replace(data_dir, args.data_dir) for a in argv)
            rows.append({"command": name, "argv": f"zoo {shown}", "seconds": round(seconds, 1),
                         "exit_status": done.returncode, "quiet": not noisy, "noise": noisy[:5]})
            print(f"{name}: {seconds:.1f} s, exit {done.returncode}, {'quiet' if not noisy else noisy[:2]}",
                  file=sys.stderr, flush=True)
            if done.returncode:
                print(done.stderr[-2000:], file=sys.stderr)
    import platform

    shown = ["python", "tools/tiny_runs.py"] + (["--only", args.only] if args.only else [])
    result = {"command": " ".join(shown), "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()], "rows": rows}
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output + ".json", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
    table = ["| command | seconds | exit | quiet |", "|---|---|---|---|"]
    table += [f"| `{r['argv']}` | {r['seconds']:.1f} | {r['exit_status']} | {'yes' if r['quiet'] else 'no'} |"
              for r in rows]
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(table) + "\n")
    print("\n".join(table))
    return 0 if all(r["exit_status"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
