"""Latency and throughput of `zoo serve` (REST, loopback) on the default preset.

Exports zoo.DEFAULT_PRESET (BERT L4/H256/A4, cls pooling, maxlen 64) as a SavedModel, or with --format onnx as
the fused ONNX Runtime graph (--quantize int8 or none) that `zoo serve` runs behind the same API (or serves
--model, an exported folder), starts `python -m zoo serve` in a subprocess, and for 1 and 8 concurrent clients
sending 1 and 32 LCQMC test sentences per request measures p50/p99 latency and requests/s. Each configuration runs
--seconds (after a short warm-up) and at most --max-requests requests. Prints a table and writes
bench/results/serving.json (serving_onnx.json with --format onnx).

    python bench/bench_serving.py --seconds 4
    python bench/bench_serving.py --seconds 4 --format onnx --quantize int8
"""

import argparse
import gzip
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LCQMC_TEST = os.path.join(HERE, "..", "data", "LCQMC", "LCQMC.test.data.gz")


def sentences():
    with gzip.open(LCQMC_TEST, "rt", encoding="utf-8") as f:
        return [s for line in f for s in line.rstrip("\n").split("\t")[:2]]


def start_server(model_dir, args):
    cmd = [sys.executable, "-m", "zoo", "serve", "--model", model_dir, "--port", "0",
           "--max-batch-size", str(args.max_batch_size), "--batch-timeout-ms", str(args.batch_timeout_ms)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    line = proc.stdout.readline()
    match = re.search(r"REST http://127\.0\.0\.1:(\d+)/", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"zoo serve did not start: {line!r}")
    return proc, int(match.group(1))


def run_config(port, texts, concurrency, batch, seconds, max_requests, warmup_s=0.5):
    """Latencies (s) of the requests that started in the timed window, and the window's length."""
    latencies, errors = [], []
    lock = threading.Lock()
    counter = iter(range(10**9))
    start = time.perf_counter() + warmup_s
    stop = start + seconds

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            i = next(counter)
            t0 = time.perf_counter()
            if t0 >= stop or len(latencies) >= max_requests:
                break
            offset = (i * batch) % (len(texts) - batch)
            conn.request("POST", "/v1/models/default:predict",
                         body=json.dumps({"instances": texts[offset:offset + batch]}).encode())
            response = conn.getresponse()
            body = response.read()
            t1 = time.perf_counter()
            if response.status != 200:
                errors.append(body[:200])
            elif t0 >= start:
                with lock:
                    latencies.append(t1 - t0)
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, e.g. {errors[0]!r}")
    window = min(time.perf_counter(), stop) - start
    return latencies, window


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="an exported folder (default: export zoo.DEFAULT_PRESET to a temp dir)")
    parser.add_argument("--seconds", type=float, default=4.0, help="timed seconds per configuration")
    parser.add_argument("--max-requests", type=int, default=5000, help="request cap per configuration")
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--batch-timeout-ms", type=float, default=2.0)
    parser.add_argument("--format", default="saved_model", choices=("saved_model", "onnx"))
    parser.add_argument("--quantize", default="int8", choices=("int8", "none"), help="with --format onnx")
    parser.add_argument("--output", default=None, help="default: bench/results/serving.json, serving_onnx.json")
    args = parser.parse_args()
    args.output = args.output or os.path.join(HERE, "results", "serving_onnx.json" if args.format == "onnx"
                                              else "serving.json")

    import zoo
    from zoo.paths import write_json_atomic
    from zoo.train.results import versions

    tmp = None
    model_dir = args.model
    if model_dir is None:
        from zoo.export.onnx import export_onnx_folder
        from zoo.export.saved_model import export_saved_model
        from zoo.export.exportable import load_exportable

        tmp = tempfile.TemporaryDirectory()
        model_dir = os.path.join(tmp.name, "default")
        t = time.perf_counter()
        if args.format == "onnx":
            export_onnx_folder(load_exportable(zoo.DEFAULT_PRESET), os.path.join(model_dir, "1"),
                               quantize=args.quantize)
        else:
            export_saved_model(load_exportable(zoo.DEFAULT_PRESET), os.path.join(model_dir, "1"))
        print(f"exported {zoo.DEFAULT_PRESET} in {time.perf_counter() - t:.1f} s")
    texts = sentences()
    load_before = os.getloadavg()
    proc, port = start_server(model_dir, args)
    rows = []
    try:
        for concurrency in (1, 8):
            for batch in (1, 32):
                lat, window = run_config(port, texts, concurrency, batch, args.seconds, args.max_requests)
                lat_ms = np.array(lat) * 1000
                rows.append({"concurrency": concurrency, "batch": batch, "requests": len(lat),
                             "seconds": round(window, 2), "p50_ms": round(float(np.percentile(lat_ms, 50)), 2),
                             "p99_ms": round(float(np.percentile(lat_ms, 99)), 2),
                             "requests_per_s": round(len(lat) / window, 1),
                             "sentences_per_s": round(len(lat) * batch / window, 1)})
                print(rows[-1], flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if tmp is not None:
            tmp.cleanup()

    header = "| concurrency | strings/request | requests | p50 ms | p99 ms | requests/s | sentences/s |"
    table = [header, "|" + "---|" * 7]
    table += [f"| {r['concurrency']} | {r['batch']} | {r['requests']} | {r['p50_ms']} | {r['p99_ms']} | "
              f"{r['requests_per_s']} | {r['sentences_per_s']} |" for r in rows]
    print("\n".join(table))
    result = {
        "command": " ".join(sys.argv),
        "model": args.model or f"{zoo.DEFAULT_PRESET} (SentenceEncoder, cls, maxlen 64)",
        "format": "SavedModel" if args.format == "saved_model" else f"ONNX, fused graph, {args.quantize}",
        "server": {"max_batch_size": args.max_batch_size, "batch_timeout_ms": args.batch_timeout_ms,
                   "transport": "REST, HTTP/1.1 keep-alive, 127.0.0.1", "process": "python -m zoo serve"},
        "texts": "LCQMC test sentences in file order",
        "cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "versions": versions(), "results": rows, "table": table,
    }
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    write_json_atomic(args.output, result)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
