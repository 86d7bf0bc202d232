"""Matrix products at the sizes of a BERT layer, float32 against int8, on this CPU (ONNX Runtime; PyTorch too).

    python bench/bench_matmul.py

What bounds the fused graphs' speed (``zoo.inference.fused_onnx``): the products of the projection and feed-forward layers
are most of a layer's time, so an encoder can only be as much faster in int8 as ONNX Runtime's int8 product is
than its float32 one. For each hidden size H (256: L4; 384: L6; 768: BERT-base), a batch of ``--rows`` token rows
(64 sentences of ~14 tokens) times the [H, 4H] feed-forward kernel, as ``MatMul`` (float32) and as the
``DynamicQuantizeMatMul`` of dynamic int8 (activations quantized per call, int8 weights: u8s8; and u8u8, uint8
weights), and as the ``QuantizeLinear`` -> ``QLinearMatMul`` -> ``DequantizeLinear`` of zoo's static int8 graphs
(fixed scales: ``int8 static``), each a graph of its own on every core; and, when PyTorch is installed, PyTorch's own float32
``Linear`` and its dynamically quantized int8 one (FBGEMM's kernels): how much faster int8 can be on this CPU with
another library's kernels. Interleaved rounds, medians; before each system's timed calls, 0.2 s of rest (so the
other library's threads stop spinning) and one warm-up call. Writes bench/results/matmul.json and .md (GFLOP/s, int8
over float32).
"""

import argparse
import os
import tempfile
import time

import numpy as np

from zoo.inference.autotune import machine_id
from zoo.hardware import cpu_flags
from zoo.inference.sessions import new_session
from zoo.paths import write_json_atomic, write_text_atomic
from zoo.train.results import table, versions

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("fp32", "int8 u8s8", "int8 u8u8", "int8 static")
TORCH_KINDS = ("torch fp32", "torch int8")


def torch_products(weights, threads):
    """PyTorch's float32 Linear and its dynamic int8 version (x86: FBGEMM) for ``weights`` -> {kind: callable(x)},
    or {} without PyTorch."""
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(threads)
    linear = torch.nn.Linear(*weights.shape, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(weights.T.copy()))
    int8 = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8)

    def call(module):
        def run(x):
            with torch.inference_mode():
                return module(torch.from_numpy(x))  # no copy
        return run

    return {"torch fp32": call(linear), "torch int8": call(int8)}


def graph(kind, weights):
    """An ONNX graph x [rows, H] -> x @ weights: float32 MatMul, dynamic int8 DynamicQuantizeMatMul, or the static
    int8 product of zoo's calibrated graphs."""
    from onnx import TensorProto, helper, numpy_helper

    hidden, out = weights.shape
    if kind == "fp32":
        nodes, inits = [helper.make_node("MatMul", ["x", "w"], ["y"])], [numpy_helper.from_array(weights, "w")]
    elif kind == "int8 static":  # zoo's calibrated graphs: u8 activations and outputs, s8 weights, fixed scales
        w_scale = np.abs(weights).max() / 127
        x_scale, y_scale = np.float32(8 / 255), np.float32(2 * np.sqrt(hidden) * np.abs(weights).max() / 255)
        consts = {"xs": x_scale, "xz": np.uint8(128), "w": np.round(weights / w_scale).astype("int8"),
                  "ws": np.float32(w_scale), "wz": np.int8(0), "ys": y_scale, "yz": np.uint8(128)}
        inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
        nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
                 helper.make_node("QLinearMatMul", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["yq"]),
                 helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    else:
        if kind == "int8 u8s8":
            scale = np.abs(weights).max() / 127
            quantized, zero = np.round(weights / scale).astype("int8"), np.int8(0)
        else:
            scale = (weights.max() - weights.min()) / 255
            zero = np.uint8(np.round(-weights.min() / scale))
            quantized = np.clip(np.round(weights / scale) + zero, 0, 255).astype("uint8")
        nodes = [helper.make_node("DynamicQuantizeMatMul", ["x", "w", "s", "z"], ["y"], domain="com.microsoft")]
        inits = [numpy_helper.from_array(quantized, "w"), numpy_helper.from_array(np.float32([scale]), "s"),
                 numpy_helper.from_array(np.array([zero]), "z")]
    g = helper.make_graph(nodes, "product", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (None, hidden))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (None, out))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def main():
    import onnx

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, action="append", help="hidden sizes (default 256, 384, 768)")
    parser.add_argument("--rows", type=int, default=896, help="token rows per product (default: 64 x 14)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20, help="products timed per round")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "matmul"))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for hidden in args.hidden or (256, 384, 768):
            weights = (rng.standard_normal((hidden, 4 * hidden)) * 0.05).astype("float32")
            x = rng.standard_normal((args.rows, hidden)).astype("float32")
            products = {}
            for kind in KINDS:
                path = os.path.join(work, f"{hidden}_{kind.replace(' ', '_')}.onnx")
                onnx.save(graph(kind, weights), path)
                session = new_session(path)
                products[kind] = lambda x, session=session: session.run(None, {"x": x})
            threads = session.get_session_options().intra_op_num_threads
            products.update(torch_products(weights, threads))
            kinds = list(products)
            for kind in kinds:
                products[kind](x)
            seconds = {k: [] for k in kinds}
            for r in range(args.rounds):
                for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                    time.sleep(0.2)  # the other library's pool threads stop spinning; then one warm-up call
                    products[kind](x)
                    start = time.perf_counter()
                    for _ in range(args.calls):
                        products[kind](x)
                    seconds[kind].append((time.perf_counter() - start) / args.calls)
            flops = 2 * args.rows * hidden * 4 * hidden
            gflops = {k: flops / float(np.median(s)) / 1e9 for k, s in seconds.items()}
            ratios = {k: gflops[k] / gflops["fp32"] for k in KINDS[1:]}
            if "torch int8" in gflops:
                ratios["torch int8"] = gflops["torch int8"] / gflops["torch fp32"]
            results[str(hidden)] = {"shape": [args.rows, hidden, 4 * hidden], "threads": threads, "gflops": gflops,
                                    "int8_over_fp32": ratios}
            print(f"H={hidden}: " + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in gflops.items()), flush=True)
    default_output = parser.get_default("output")
    flags = "" if args.output == default_output else f" --output {os.path.relpath(args.output)}"
    report = {"command": f"python bench/bench_matmul.py{flags}", "cpu": machine_id(),
              "cpu_flags": sorted(cpu_flags() & {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16",
                                                 "amx_bf16"}),
              "rounds": args.rounds, "calls": args.calls, "results": results, "versions": versions()}
    write_json_atomic(args.output + ".json", report)
    kinds = [k for k in KINDS + TORCH_KINDS if all(k in r["gflops"] for r in results.values())]
    ratios = [k for k in kinds if k in next(iter(results.values()))["int8_over_fp32"]]
    rows = [[h, " x ".join(map(str, r["shape"]))] + [round(r["gflops"][k]) for k in kinds]
            + [r["int8_over_fp32"][k] for k in ratios] for h, r in results.items()]
    text = (f"`{report['command']}` on {report['cpu']} ({', '.join(report['cpu_flags'])}); ONNX Runtime unless "
            f"named; int8 / fp32 within each library\n\n"
            + table(["H", "rows x H x 4H"] + [f"{k} GFLOP/s" for k in kinds] + [f"{k} / fp32" for k in ratios], rows))
    write_text_atomic(args.output + ".md", text)
    print(text)


if __name__ == "__main__":
    main()
