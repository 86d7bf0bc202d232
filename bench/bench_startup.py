"""Start-up of the ``zoo`` command: ``zoo --help``, ``zoo train bi-encoder --help`` and ``zoo encode`` of one line,
for one checkout or several side by side (interleaved rounds, medians; the same Python environment).

    python bench/bench_startup.py                                    # this checkout
    python bench/bench_startup.py --checkout OLD_CHECKOUT --checkout . --rounds 5

Each timing is a fresh process (``python -m zoo ...`` run in the checkout's folder, so that its ``zoo`` package is
imported). Writes bench/results/startup.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", action="append", help="a zoo checkout (repeat; default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default=os.path.join(HERE, "results", "startup"))
    args = parser.parse_args()
    checkouts = [os.path.abspath(c) for c in args.checkout or [os.path.dirname(HERE)]]
    with tempfile.TemporaryDirectory() as work:
        one = os.path.join(work, "one.txt")
        with open(one, "w", encoding="utf-8") as f:
            f.write("花呗怎么开通\n")
        commands = {"zoo --help": ["--help"], "zoo train bi-encoder --help": ["train", "bi-encoder", "--help"],
                    "zoo encode (one line)": ["encode", "--input", one, "--output", os.path.join(work, "v.npy"),
                                              "--no-progress"]}
        seconds = {(c, name): [] for c in checkouts for name in commands}
        for r in range(args.rounds):
            for name, argv in commands.items():
                for c in checkouts[r % len(checkouts):] + checkouts[:r % len(checkouts)]:  # rotated order
                    if os.path.exists(os.path.join(work, "v.npy")):
                        os.remove(os.path.join(work, "v.npy"))
                    start = time.perf_counter()
                    done = subprocess.run([sys.executable, "-m", "zoo", *argv], cwd=c, capture_output=True, text=True)
                    seconds[(c, name)].append(time.perf_counter() - start)
                    if done.returncode:
                        raise SystemExit(f"{c}: zoo {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
                    print(f"round {r + 1} {os.path.basename(c)}: {name} {seconds[(c, name)][-1]:.2f} s",
                          file=sys.stderr, flush=True)
    labels = {c: f"checkout {i + 1} ({os.path.basename(c) or c})" for i, c in enumerate(checkouts)}
    rows = [{"checkout": labels[c], "command": name, "median_seconds": statistics.median(seconds[(c, name)]),
             "seconds": seconds[(c, name)]} for c in checkouts for name in commands]
    header = "| command | " + " | ".join(labels[c] for c in checkouts) + " |"
    lines = [header, "|---" * (len(checkouts) + 1) + "|"]
    for name in commands:
        lines.append(f"| `{name}` | " + " | ".join(f"{statistics.median(seconds[(c, name)]):.2f} s"
                                                   for c in checkouts) + " |")
    text = "\n".join(lines) + f"\n\nmedian of {args.rounds} interleaved rounds, each a fresh process\n"
    with open(args.output + ".json", "w", encoding="utf-8") as f:
        json.dump({"rounds": args.rounds, "rows": rows}, f, indent=1)
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
