"""Soak test of `zoo serve`: many clients for a long time, with bad requests mixed in.

    python bench/soak_serving.py                       # 10 minutes, 16 clients, default preset
    python bench/soak_serving.py --minutes 1 --clients 4

Exports zoo.DEFAULT_PRESET (or serves --model), starts `python -m zoo serve` in a subprocess and runs --clients
threads on 127.0.0.1 for --minutes. Each request is, at random: a good one (1-8 LCQMC sentences; 95%), or one
of malformed JSON, a body over the 16 MiB limit (refused from its Content-Length), or a slow sender that
sends half its body and stalls past the server's --request-timeout-s (5% in all). Reports good requests
served and any that failed (target 0), the statuses the bad ones got, p50/p99 latency of good requests, and the
server's RSS: cold, after --warmup-minutes of the same traffic (not counted in the figures), and at the end;
the target is growth < 50 MiB from after the warm-up to the end (the first minute fills TensorFlow's and the
allocator's caches: RSS rises then plateaus, see rss_mib_every_5s). Writes bench/results/soak_serving.json and a table.
"""

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="an exported folder (default: export zoo.DEFAULT_PRESET to a temp dir)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warmup-minutes", type=float, default=1.0,
                        help="traffic before the measured minutes: RSS growth is counted from its end (the first "
                             "requests fill TensorFlow's and the allocator's caches)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--bad-share", type=float, default=0.05)
    parser.add_argument("--output", default=os.path.join(HERE, "results", "soak_serving.json"))
    args = parser.parse_args()

    import subprocess

    import zoo
    from zoo.data.tasks import load_task
    from zoo.paths import write_json_atomic
    from zoo.train.results import versions

    texts = list(dict.fromkeys(load_task("LCQMC", "test").texts_a))[:5000]
    model_dir = args.model
    if not model_dir:
        from zoo.export.saved_model import export_saved_model
        from zoo.export.exportable import load_exportable

        model_dir = os.path.join(tempfile.mkdtemp(), "default")
        export_saved_model(load_exportable(zoo.DEFAULT_PRESET), os.path.join(model_dir, "1"))
    timeout_s = 2.0
    cmd = [sys.executable, "-m", "zoo", "serve", "--model", model_dir, "--port", "0", "--request-timeout-s",
           str(timeout_s), "--poll-seconds", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    import re

    line = proc.stdout.readline()
    port = int(re.search(r"REST http://127\.0\.0\.1:(\d+)/", line).group(1))
    time.sleep(2)
    rss_cold = rss_mib(proc.pid)
    lock = threading.Lock()
    good_latency, good_failed, bad_status = [], [], {}
    measure_from = time.time() + args.warmup_minutes * 60
    stop_at = measure_from + args.minutes * 60

    def bad_request(kind, rng):
        if kind == "slow":
            body = json.dumps({"instances": rng.sample(texts, 2)}).encode()
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(b"POST /v1/models/default:predict HTTP/1.1\r\nHost: x\r\n"
                          + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[: len(body) // 2])
                reply = s.recv(200).decode(errors="replace")
            return reply.split(" ")[1] if reply.startswith("HTTP/1.1") else "closed"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            if kind == "malformed":
                conn.request("POST", "/v1/models/default:predict", body=b'{"instances": ["a", ')
            else:  # oversized: refused from the header, before the body is read
                conn.putrequest("POST", "/v1/models/default:predict")
                conn.putheader("Content-Length", str(17 << 20))
                conn.endheaders()
            return str(conn.getresponse().status)
        finally:
            conn.close()

    def client(seed):
        rng = random.Random(seed)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.time() < stop_at:
            if rng.random() < args.bad_share:
                kind = rng.choice(["malformed", "oversized", "slow"])
                try:
                    status = bad_request(kind, rng)
                except OSError as e:
                    status = type(e).__name__
                with lock:
                    if time.time() < measure_from:
                        continue
                    bad_status[f"{kind} -> {status}"] = bad_status.get(f"{kind} -> {status}", 0) + 1
                continue
            body = json.dumps({"instances": rng.sample(texts, rng.randint(1, 8))})
            t = time.perf_counter()
            try:
                conn.request("POST", "/v1/models/default:predict", body=body,
                             headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                reply = response.read()
                ok = response.status == 200 and len(json.loads(reply)["predictions"]) == len(json.loads(body)[
                    "instances"])
            except (OSError, http.client.HTTPException, ValueError) as e:
                ok, reply = False, repr(e).encode()
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            with lock:
                if ok:
                    if time.time() >= measure_from:  # warm-up requests only count when they fail
                        good_latency.append(time.perf_counter() - t)
                else:
                    good_failed.append(reply[:200].decode(errors="replace"))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    time.sleep(max(0.0, measure_from - time.time()))
    rss_start, t0 = rss_mib(proc.pid), time.time()
    rss_samples = []
    while any(t.is_alive() for t in threads):
        time.sleep(5)
        rss_samples.append(rss_mib(proc.pid))
    for t in threads:
        t.join()
    seconds = time.time() - t0
    rss_end = rss_mib(proc.pid)
    proc.terminate()
    exit_code = proc.wait(timeout=60)
    lat = sorted(good_latency)
    result = {
        "command": " ".join(["bench/soak_serving.py", *sys.argv[1:]]), "minutes": args.minutes,
        "clients": args.clients, "bad_share": args.bad_share, "server_request_timeout_s": timeout_s,
        "seconds": seconds, "good_requests_served": len(lat), "good_requests_failed": len(good_failed),
        "good_failures_sample": good_failed[:5], "bad_requests": bad_status,
        "p50_ms": 1000 * statistics.median(lat) if lat else None,
        "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))] if lat else None,
        "requests_per_s": len(lat) / seconds, "warmup_minutes": args.warmup_minutes,
        "rss_mib_cold": rss_cold, "rss_mib_start": rss_start, "rss_mib_growth": rss_end - rss_start, "rss_mib_end": rss_end,
        "rss_mib_max": max(rss_samples, default=rss_end), "rss_mib_every_5s": [round(r, 1) for r in rss_samples],
        "server_exit_code": exit_code,
        "cpus": os.cpu_count(), "load_average_end": os.getloadavg(), "versions": versions()}
    table = "\n".join([
        "| good served | good failed | p50 ms | p99 ms | good req/s | bad requests (status: count) | RSS MiB cold / after "
        "warm-up -> end (max) | RSS growth MiB |",
        "|---|---|---|---|---|---|---|---|",
        f"| {len(lat)} | {len(good_failed)} | {result['p50_ms']:.1f} | {result['p99_ms']:.1f} | "
        f"{result['requests_per_s']:.1f} | {', '.join(f'{k}: {v}' for k, v in sorted(bad_status.items()))} | "
        f"{rss_cold:.0f} / {rss_start:.0f} -> {rss_end:.0f} ({result['rss_mib_max']:.0f}) | "
        f"{rss_end - rss_start:+.0f} |"])
    result["table"] = table
    print(table)
    print(f"\nserver exit code after SIGTERM: {exit_code}")
    write_json_atomic(args.output, result)
    print(f"wrote {args.output}")
    return 0 if not good_failed and exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
