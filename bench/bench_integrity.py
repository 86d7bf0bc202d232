"""What checking a preset's manifest (sha256 + size of every file) costs when loading it.

    python bench/bench_integrity.py                          # the default preset, 7 interleaved repeats
    python bench/bench_integrity.py --preset zoo-embed-zh-L4

Loads the preset with and without the check, alternating, and prints the medians and their difference; writes
bench/results/integrity.json.
"""

import argparse
import os
import statistics
import time

import zoo
from zoo.paths import resolve, write_json_atomic
from zoo.presets import load_saved
from zoo.train.results import versions

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default=zoo.DEFAULT_PRESET)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default=os.path.join(HERE, "results", "integrity.json"))
    args = p.parse_args()
    folder = resolve(args.preset)
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    load_saved(folder)  # warm-up: imports, file cache
    seconds = {True: [], False: []}
    for _ in range(args.repeats):
        for verify in (True, False):
            t = time.perf_counter()
            load_saved(folder, verify=verify)
            seconds[verify].append(time.perf_counter() - t)
    checked, unchecked = statistics.median(seconds[True]), statistics.median(seconds[False])
    result = {"preset": args.preset, "bytes": size, "repeats": args.repeats, "load_checked_s": checked,
              "load_unchecked_s": unchecked, "check_cost_s": checked - unchecked, "all_seconds":
              {"checked": seconds[True], "unchecked": seconds[False]}, "versions": versions()}
    print(f"{args.preset} ({size / 1e6:.1f} MB): load {checked:.3f} s with the manifest check, {unchecked:.3f} s "
          f"without (medians of {args.repeats} interleaved): the check costs {checked - unchecked:.3f} s")
    write_json_atomic(args.out, result)


if __name__ == "__main__":
    main()
