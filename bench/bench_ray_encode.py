"""`zoo encode --engine ray` (a new local Ray cluster, N actors) next to `zoo encode --processes N` (N spawned local
workers) on the same file, interleaved repeats, medians; each run is a fresh `python -m zoo encode` process.

    python bench/bench_ray_encode.py --lines 4000 --repeats 3

Texts: the first distinct sentences of ../shared/data (LCQMC train). Per run: the wall seconds of the whole command
(imports, model load, worker or cluster start-up included) and the job's own encoding seconds (from the work
folder's start to the last chunk: worker start-up included, the driver's model load not). Writes
bench/results/ray_encode.json.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from zoo.data.tasks import load_task
from zoo.logs import setup_cli
from zoo.paths import write_json_atomic
from zoo.train.results import versions

HERE = os.path.dirname(os.path.abspath(__file__))


def one_run(engine, args, source, out):
    command = [sys.executable, "-m", "zoo", "encode", "--model", args.model, "--input", source, "--output", out,
               "--processes", str(args.processes), "--chunk-size", str(args.chunk_size), "--no-progress"]
    if engine == "ray":
        command += ["--engine", "ray"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    seconds = float(re.search(r"lines in ([\d.]+) s", done.stderr).group(1))
    for path in (out, out + ".json"):
        os.remove(path)
    return {"wall_seconds": wall, "encode_seconds": seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=os.path.join(HERE, "..", "..", "shared", "data"))
    parser.add_argument("--model", default="zoo-embed-zh-L4")
    parser.add_argument("--lines", type=int, default=4000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--chunk-size", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=os.path.join(HERE, "results", "ray_encode.json"))
    args = parser.parse_args()
    setup_cli()
    data = load_task("LCQMC", "train", args.data_dir)
    texts = list(dict.fromkeys(t.replace("\n", " ") for t in data.texts_a + data.texts_b))[:args.lines]
    runs = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "texts.txt")
        with open(source, "w", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
        for repeat in range(args.repeats):
            for engine in ("local", "ray") if repeat % 2 == 0 else ("ray", "local"):
                runs[engine].append(one_run(engine, args, source, os.path.join(tmp, f"{engine}.npy")))
                print(engine, runs[engine][-1], flush=True)
    report = {"command": " ".join(sys.argv), "versions": versions(), "model": args.model, "lines": len(texts),
              "processes": args.processes, "chunk_size": args.chunk_size, "cpus": os.cpu_count(), "runs": runs}
    for engine, measured in runs.items():
        report[engine] = {k: statistics.median(r[k] for r in measured) for k in ("wall_seconds", "encode_seconds")}
        report[engine]["lines_per_second"] = len(texts) / report[engine]["encode_seconds"]
    report["ray_vs_local_rate"] = report["ray"]["lines_per_second"] / report["local"]["lines_per_second"]
    write_json_atomic(args.output, report)
    print({k: report[k] for k in ("local", "ray", "ray_vs_local_rate")})


if __name__ == "__main__":
    main()
