"""Start-up of the ``zoo`` command: ``zoo --help``, ``zoo train bi-encoder --help``, ``zoo encode`` of one line
(the light runtime where the model's fused graph exists, and ``--precision fp32``: Keras), next to
``python -c "import tensorflow"`` on the same machine; and a ``zoo serve`` process of an ONNX export: seconds to
its first answer and its resident memory after answering (REST, OpenAI), with whether TensorFlow was loaded. For
one checkout or several side by side (interleaved rounds, medians; the same Python environment).

    python bench/bench_startup.py                                    # this checkout
    python bench/bench_startup.py --checkout OLD_CHECKOUT --checkout . --rounds 5

Each timing is a fresh process (``python -m zoo ...`` run in the checkout's folder, so that its ``zoo`` package is
imported). Writes bench/results/startup.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

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
        output = os.path.join(work, "v.npy")
        commands = {"python -c \"import tensorflow\"": ["-c", "import tensorflow"],
                    "zoo --help": ["-m", "zoo", "--help"],
                    "zoo train bi-encoder --help": ["-m", "zoo", "train", "bi-encoder", "--help"],
                    "zoo encode (one line)": ["-m", "zoo", "encode", "--input", one, "--output", output, "--no-progress"],
                    "zoo encode --precision fp32 (one line, Keras)": ["-m", "zoo", "encode", "--input", one, "--output",
                                                                      output, "--no-progress", "--precision", "fp32"]}
        seconds = {(c, name): [] for c in checkouts for name in commands}
        serve = {c: [] for c in checkouts}
        exports = {c: export_onnx(c, os.path.join(work, f"export{i}")) for i, c in enumerate(checkouts)}
        for r in range(args.rounds):
            for name, argv in commands.items():
                for c in checkouts[r % len(checkouts):] + checkouts[:r % len(checkouts)]:  # rotated order
                    if os.path.exists(output):
                        os.remove(output)
                    start = time.perf_counter()
                    done = subprocess.run([sys.executable, *argv], cwd=c, capture_output=True, text=True)
                    seconds[(c, name)].append(time.perf_counter() - start)
                    if done.returncode:
                        raise SystemExit(f"{c}: python {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
                    print(f"round {r + 1} {os.path.basename(c)}: {name} {seconds[(c, name)][-1]:.2f} s",
                          file=sys.stderr, flush=True)
            for c in checkouts[r % len(checkouts):] + checkouts[:r % len(checkouts)]:
                serve[c].append(measure_server(c, exports[c]))
                print(f"round {r + 1} {os.path.basename(c)}: zoo serve {serve[c][-1]}", file=sys.stderr, flush=True)
    labels = {c: f"checkout {i + 1} ({os.path.basename(c) or c})" for i, c in enumerate(checkouts)}
    rows = [{"checkout": labels[c], "command": name, "median_seconds": statistics.median(seconds[(c, name)]),
             "seconds": seconds[(c, name)]} for c in checkouts for name in commands]
    servers = [{"checkout": labels[c], "median_seconds_to_first_answer": statistics.median(
        s["seconds_to_first_answer"] for s in serve[c]), "median_rss_mib": statistics.median(
        s["rss_mib"] for s in serve[c]), "tensorflow_loaded": any(s["tensorflow_loaded"] for s in serve[c]),
        "rounds": serve[c]} for c in checkouts]
    header = "| command | " + " | ".join(labels[c] for c in checkouts) + " |"
    lines = [header, "|---" * (len(checkouts) + 1) + "|"]
    tf_name = next(iter(commands))
    for name in commands:
        lines.append(f"| `{name}` | " + " | ".join(
            f"{statistics.median(seconds[(c, name)]):.2f} s ({statistics.median(seconds[(c, name)]) / statistics.median(seconds[(c, tf_name)]):.0%})"
            for c in checkouts) + " |")
    lines.append("| `zoo serve` of an ONNX export: seconds to its first answer | " + " | ".join(
        f"{s['median_seconds_to_first_answer']:.2f} s" for s in servers) + " |")
    lines.append("| `zoo serve` of an ONNX export: resident memory after answering | " + " | ".join(
        f"{s['median_rss_mib']:.0f} MiB, TensorFlow {'loaded' if s['tensorflow_loaded'] else 'never loaded'}"
        for s in servers) + " |")
    text = "\n".join(lines) + (f"\n\nmedian of {args.rounds} interleaved rounds, each a fresh process; (%): of "
                               f"`{tf_name}` in the same checkout; {cpu()}\n")
    with open(args.output + ".json", "w", encoding="utf-8") as f:
        json.dump({"rounds": args.rounds, "cpu": cpu(), "rows": rows, "servers": servers}, f, indent=1)
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    print(text)


def cpu():
    flags = open("/proc/cpuinfo", encoding="utf-8").read() if os.path.exists("/proc/cpuinfo") else ""
    return f"{os.cpu_count()} cores, {'AVX-512 VNNI' if 'avx512_vnni' in flags else 'AVX2 only'}"


def export_onnx(checkout, folder):
    """An ONNX export of the shipped encoder written by ``checkout``'s zoo -> its NAME folder."""
    subprocess.run([sys.executable, "-m", "zoo", "export", "--model", "zoo-embed-zh-L4", "--output", folder,
                    "--format", "onnx"], cwd=checkout, check=True, capture_output=True)
    return os.path.join(folder, "default")


def measure_server(checkout, export):
    """A fresh ``zoo serve`` of ``export``: seconds until /v1/models answers, then the resident memory after 20
    REST and OpenAI requests of 64 texts, and whether any TensorFlow library is mapped into the process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "zoo", "serve", "--model", export, "--port", str(port)],
                              cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        while True:
            try:
                urllib.request.urlopen(base + "/models", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.perf_counter() - start > 300:
                    raise SystemExit(f"{checkout}: zoo serve did not start")
                time.sleep(0.05)
        ready = time.perf_counter() - start
        texts = ["花呗怎么开通，如何开通花呗？今天天气不错。" * 4] * 64
        for i in range(20):
            path, body = (("/embeddings", {"input": texts, "model": "default"}) if i % 2 else
                          ("/models/default:predict", {"instances": texts}))
            request = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=60).read()
        status = open(f"/proc/{server.pid}/status", encoding="utf-8").read()
        rss = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))) / 1024
        loaded = "tensorflow" in open(f"/proc/{server.pid}/maps", encoding="utf-8").read()
        return {"seconds_to_first_answer": ready, "rss_mib": rss, "tensorflow_loaded": loaded}
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
