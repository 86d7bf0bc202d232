"""Write the manual's figures from the result files: no number in the manual is typed by hand.

    python tools/results_pages.py            # rewrite docs/results/*.md and every generated block
    python tools/results_pages.py --check    # exit 1 (naming the files) when a page or block is stale

Sources: ``bench/results/*.json`` (benchmarks), ``bench/results/runs/*.json`` (training runs' results.json, copied
in), and the shipped presets' ``data/presets/NAME/ship.json`` and ``zoo_config.json``. Targets: the pages
``docs/results/*.md`` (written whole) and, in ``README.md``, ``docs/**/*.md`` and the docstrings of ``tasks/*.py``,
the text between ``<!-- generated: NAME [ARG] -->`` and ``<!-- /generated -->``; and the charts those name
(``docs/results/*_DIGEST.png``). Plain Python: no zoo import (the drawing of a compare run's pictures, shared with
``zoo compare``, is ``zoo/_plots.py``, loaded by path; it imports numpy only).
"""

from __future__ import annotations

import argparse
import gzip
import json
import posixpath
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B")
SHIPPED = ("zoo-embed-zh-L4", "zoo-simbert-zh-L4")
MLM_PRESET = "chinese_L-4_H-256_A-4_mlm1k"
BLOCK = re.compile(r"(<!-- generated: ([\w-]+)(?: ([\w.-]+))? -->\n)(.*?)(<!-- /generated -->)", re.DOTALL)
HEADER = ("<!-- Written by `python tools/results_pages.py` from the files named below; edit those, not this page. -->"
          "\n\n")


class Sources:
    """The result files under one repository root, read on first use."""

    def __init__(self, root):
        self.root = Path(root)

    def bench(self, name):
        return self._json(self.root / "bench" / "results" / f"{name}.json")

    def run(self, name):
        return self._json(self.root / "bench" / "results" / "runs" / f"{name}.json")

    def runs(self):
        return sorted(p.stem for p in (self.root / "bench" / "results" / "runs").glob("*.json"))

    def ship(self, preset):
        return self._json(self.root / "data" / "presets" / preset / "ship.json")

    def preset_config(self, preset):
        return self._json(self.root / "data" / "presets" / preset / "zoo_config.json")

    def lines(self, relative):
        """The number of lines of a (gzipped) text file of the repository."""
        path = self.root / relative
        with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as f:
            return sum(1 for _ in f)

    def _json(self, path):
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SystemExit(f"results_pages: {path.relative_to(self.root)} not found (a figure is generated from it)")
        except json.JSONDecodeError as e:
            raise SystemExit(f"results_pages: {path.relative_to(self.root)}: not valid JSON ({e})")


# ------------------------------------------------------------------------------ formatting
def f2(x):
    return f"{x:.2f}"


def f1(x):
    return f"{x:.1f}"


def count(x):
    return f"{x:,.0f}"


def minutes(seconds):
    return f"{seconds:.0f} s" if seconds < 180 else f"{seconds / 60:.0f} min"


RENAMED_FLAGS = {"--task": "--tasks", "--from": "--checkpoint", "--out": "--output"}  # the same flags, renamed


def command(text):
    """A recorded argv as a command to type today: ``python`` in front of a script, ``tasks/`` in front of a
    recipe, and flags that were renamed since the run by their current names."""
    words = [RENAMED_FLAGS.get(w, w) for w in text.split(" ")]
    if words[0].endswith(".py"):
        words = ["python", words[0] if "/" in words[0] else f"tasks/{words[0]}"] + words[1:]
    return " ".join(words)


def shell_lines(text, indent="    ", width=116):
    """A command as indented lines of at most ``width`` characters, continued with backslashes."""
    words = []
    for word in text.split(" "):  # a flag and its value stay on one line
        if words and words[-1].startswith("--") and " " not in words[-1] and not word.startswith("-"):
            words[-1] += " " + word
        else:
            words.append(word)
    lines, line = [], indent
    for word in words:
        if len(line) + len(word) + 1 > width and line.strip():
            lines.append(line + " \\")
            line = indent + "    "
        line += ("" if line.isspace() else " ") + word
    return "\n".join(lines + [line]) + "\n"


def prose(text, width=116):
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False) + "\n"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def source(*names):
    return "Source: " + ", ".join(f"`{n}`" for n in names) + ".\n"


def ci(values):
    return f"[{values[0]:.1f}, {values[1]:.1f}]"


def task_name(task):
    return "PAWS-X" if task == "PAWSX" else task


# ------------------------------------------------------------------------------ blocks (README, docs, recipes)
def block_models(src, arg=None):
    """The shipped models: test Spearman x100 of the shipped (float16) weights, size, training time."""
    rows = []
    for preset in SHIPPED:
        ship = src.ship(preset)
        scores = ship["scores"][ship["weights_dtype"]]
        rows.append([f"`{preset}`", ship["class"], f"{ship['sizes_bytes'][ship['weights_dtype']] / 2**20:.1f} MiB"]
                    + [f2(scores[t]["test_spearman"]) for t in TASKS] + [minutes(ship["train_seconds"])])
    return table(["preset", "class", "size", *map(task_name, TASKS), "training (2 CPU cores)"], rows) + \
        "\nTest Spearman x100 of the cosine (PAWS-X is never trained on). " + \
        source(*(f"data/presets/{p}/ship.json" for p in SHIPPED))


def block_main_job(src, arg=None):
    """What the README's first command costs and gives: the recorded run of the main job on the whole train split
    (its time, scores and the machine it ran on)."""
    run = src.run("lcqmc_cosent")
    pairs, machine = run["data_files"]["train"]["pairs"], run["machine"]
    cores = f"{machine['cores']} CPU cores ({machine['cpu_kind']}{', ' + machine['cpu'] if machine['cpu'] else ''})"
    return (f"The main job trains one epoch over LCQMC's {count(pairs)} train pairs. Its recorded run "
            f"(`{command(run['command'])}`, {run['versions']['keras_backend']} backend) took "
            f"{minutes(run['seconds'])} in all ({minutes(run['train_seconds'])} of training) on {cores} and "
            f"reached test Spearman {f2(run['test_spearman'])}, test accuracy {f2(run['test_accuracy'])}% "
            f"{ci(run['test_accuracy_ci95'])} at the threshold chosen on valid. "
            + source("bench/results/runs/lcqmc_cosent.json"))


def run_scores(run):
    """The outcome of a run record in one line, whatever job wrote it."""
    if "rows" in run:  # zoo compare: one row per task and model
        return "; ".join(f"{task_name(r['task'])} {r['model']}: test accuracy {f2(r['test_accuracy'])}% "
                         f"{ci(r['test_accuracy_ci95'])}, test Spearman {f2(r['test_spearman'])}" for r in run["rows"])
    if "zero_shot_test_spearman_after" in run:  # mirror-bert: zero-shot test Spearman before and after
        before, after = run["zero_shot_test_spearman_before"], run["zero_shot_test_spearman_after"]
        return "zero-shot test Spearman " + ", ".join(f"{task_name(t)} {f2(before[t])} -> {f2(after[t])}"
                                                      for t in after)
    task = run.get("config", {}).get("task") or ",".join(run.get("config", {}).get("tasks", []))
    parts = [f"{task_name(task)} test Spearman {f2(run['test_spearman'])} (valid {f2(run['valid_spearman'])})"]
    if "test_accuracy" in run:
        parts.append(f"test accuracy {f2(run['test_accuracy'])}% {ci(run['test_accuracy_ci95'])} at the valid "
                     "threshold")
    return "; ".join(parts)


def run_time(run):
    return (f"{minutes(run['train_seconds'])} of training" if "train_seconds" in run
            else f"{minutes(run['seconds'])} in all")


def block_run(src, arg):
    """One run record, as a recipe's header states it: the command and its scores."""
    run = src.run(arg)
    return shell_lines(command(run["command"])) + "\n" + prose(
        f"{run_scores(run)}; {run_time(run)} on 2 CPU cores (bench/results/runs/{arg}.json).")


def block_preset(src, arg):
    """A shipped preset's training command and test scores, as a recipe's header states them."""
    ship = src.ship(arg)
    scores = ship["scores"][ship["weights_dtype"]]
    listed = ", ".join(f"{task_name(t)} {f2(scores[t]['test_spearman'])}" for t in TASKS)
    return shell_lines(command(ship["command_trained"])) + "\n" + prose(
        f"Shipped as the preset {arg}: test Spearman {listed}; {minutes(ship['train_seconds'])} of training on "
        f"2 CPU cores (data/presets/{arg}/ship.json).")


def block_pretrained(src, arg):
    meta = src.preset_config(arg)["metadata"]
    return shell_lines(f"python {meta['command']}") + "\n" + prose(
        f"Shipped as the preset {arg} (kept: step {meta['step']}): held-out masked-token accuracy "
        f"{f2(meta['masked_accuracy'])}% (data/presets/{arg}/zoo_config.json).")


QUALITY_TASKS = ("LCQMC", "BQ", "STS-B")  # the quality columns of bench_inference.py
INFERENCE_RUNS = ("inference", "inference_avx2")  # bench_inference.py's results on an AVX-512 and an AVX2-only host
MATMUL_RUNS = ("matmul_avx512_vnni", "matmul")  # bench_matmul.py's, on an AVX-512 VNNI and an AVX2-only host


def fastest_systems(model, prefix):
    """(fastest at batch 64, fastest for one sentence) among a model's systems named ``prefix``..."""
    names = [k for k in model["sentences_per_second"] if k.startswith(prefix)]
    return (max(names, key=model["speed_vs_best_st"].get),
            min(names, key=lambda k: model["latency_batch1"][k]["median_ms"]))


SYSTEMS = """
The systems, all on the same weights (bench/bench_inference.py and bench/st_worker.py):

- `zoo_fp32`, `zoo_bf16`, `zoo_onnx-fp32`, `zoo_int8`, `zoo_openvino-int8`: `SentenceEncoder.encode(engine=...)`
  on Keras: float32 (XLA), bfloat16, zoo's fused ONNX Runtime graph in float32 or statically quantized to int8, and
  that int8 graph on OpenVINO ([fast inference](../inference.md)).
- `zoo_light_*`: the same graphs through the light runtime (`OnnxEncoder`, what `zoo encode` runs: no TensorFlow).
- `transformers_fp32`: transformers' `BertModel` on PyTorch, float32: the reference every ratio divides by.
- `st_torch_fp32`, `st_onnx_fp32`, `st_openvino_fp32`: sentence-transformers' torch, ONNX and OpenVINO backends.
- `st_onnx_o1`, `st_onnx_o2`, `st_onnx_o3`: its ONNX exports optimized by optimum's O1 (basic graph
  optimizations), O2 (+ transformer fusions) and O3 (+ GELU approximation).
- `st_onnx_int8`, `st_onnx_int8_avx2`: its dynamically quantized ONNX exports for this CPU's instruction set and
  for AVX2; `st_openvino_int8`: its OpenVINO export statically quantized by NNCF.
- `zoo_int8_onnxruntime` (the last section, an earlier zoo): int8 through a tf2onnx export on ONNX Runtime, before
  the fused graphs.
"""


def block_inference(src, arg=None):
    """Per CPU and model of the bench/results/inference*.json files: what precision fastest picks, and that path against
    transformers fp32 and the best sentence-transformers backend, in throughput (batch 64) and one-sentence latency."""
    out = []
    for run in INFERENCE_RUNS:
        data = src.bench(run)
        lines = []
        for name, m in data["models"].items():
            pick = "zoo_" + (m.get("fastest") or m["auto"])["record"]["choice"]  # "auto": measured before it was lossless
            best_st, fastest_latency = fastest_systems(m, "st_")
            latency = m["latency_batch1"][pick]["median_ms"]
            lines.append(
                f"- {model_label(name)}: `fastest` picks `{pick[4:]}`: {count(m['sentences_per_second'][pick])} "
                f"sentences/s at batch 64, {f2(m['speed_vs_transformers_fp32'][pick])}x transformers fp32 and "
                f"{f2(m['speed_vs_best_st'][pick])}x sentence-transformers' fastest backend ({best_st}); one sentence "
                f"in {latency:.2f} ms, {f2(m['latency_batch1'][fastest_latency]['median_ms'] / latency)}x the speed "
                f"of its fastest ({fastest_latency}, {m['latency_batch1'][fastest_latency]['median_ms']:.2f} ms).")
            batched, single = fastest_systems(m, "zoo_")
            single_ms = m["latency_batch1"][single]["median_ms"]
            lines.append(
                f"  zoo's fastest system in batches is {system_label(batched)} "
                f"({count(m['sentences_per_second'][batched])} sentences/s, {f2(m['speed_vs_best_st'][batched])}x "
                f"sentence-transformers' fastest), and for one sentence {system_label(single)} ({single_ms:.2f} ms, "
                f"{f2(m['latency_batch1'][fastest_latency]['median_ms'] / single_ms)}x the speed of its fastest).")
        flags = sorted({f for m in data["models"].values() for f in m["cpu_flags"]})
        out.append(f"Measured side by side on 2 CPU cores with {', '.join(flags)} (interleaved rounds, medians):\n\n"
                   + "\n".join(lines) + "\n\n" + source(f"bench/results/{run}.json"))
    return "\n".join(out)


def system_label(name):
    """A zoo system of bench_inference.py as prose: ``zoo_int8`` -> `int8`, ``zoo_light_int8`` -> `int8` on the
    light runtime."""
    precision = name[len("zoo_"):]
    return f"`{precision[6:]}` on the light runtime" if precision.startswith("light_") else f"`{precision}`"


CHART_STYLE = 2  # raise it when a drawing changes: every chart then gets a new name and is drawn again


def chart_name(prefix, drawn):
    """``PREFIX_DIGEST.png``, the digest of the figures a chart draws (and of CHART_STYLE): a changed result names
    a new chart, so ``--check`` sees the page go stale."""
    import hashlib

    return f"{prefix}_{hashlib.sha256(json.dumps([CHART_STYLE, drawn], sort_keys=True).encode()).hexdigest()[:10]}.png"


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


def speed_chart_name(data, run):
    """The speed chart of a bench_inference results file: ``speed_RUN_DIGEST.png``."""
    return chart_name(f"speed_{run}", {name: [m["sentences_per_second"], {k: v["median_ms"] for k, v in
                                                                          m["latency_batch1"].items()}]
                                       for name, m in data["models"].items()})


def draw_speed_chart(data, path):
    """Per model, a bar per system: sentences/s at batch 64 and one sentence's latency (median ms)."""
    plt = pyplot()
    models = list(data["models"])
    fig, axes = plt.subplots(len(models), 2, figsize=(12, 0.32 * 16 * len(models) + 1), squeeze=False)
    colours = {"zoo": "#2b6cb0", "transformers": "#718096", "st": "#dd6b20"}
    for row, name in zip(axes, models):
        m = data["models"][name]
        systems = list(m["sentences_per_second"])
        colour = [colours[s.split("_")[0]] for s in systems]
        row[0].barh(systems, [m["sentences_per_second"][s] for s in systems], color=colour)
        row[0].set_title(f"{model_label(name)}: sentences/s, batch 64 (higher is better)", fontsize=9)
        row[1].barh(systems, [m["latency_batch1"][s]["median_ms"] for s in systems], color=colour)
        row[1].set_title(f"{model_label(name)}: one sentence, median ms (lower is better)", fontsize=9)
        for ax in row:
            ax.invert_yaxis()
            ax.tick_params(labelsize=8)
            ax.grid(axis="x", alpha=0.3)
    flags = sorted({f for m in data["models"].values() for f in m["cpu_flags"]})
    fig.suptitle(f"2 CPU cores with {', '.join(flags)}: zoo (blue), transformers (grey), sentence-transformers "
                 f"(orange)", fontsize=10)
    save(plt, fig, path)


def index_kind(name):
    """A search index's name without its search-time settings (nprobe, ef, rescore): one line of the chart."""
    return re.sub(r" (nprobe|ef|rescore)\d+", "", name)


def recall_chart_name(data):
    return chart_name("search_recall", {n: [r["recall_at_10"], r["queries_per_second"]]
                                        for n, r in data["indexes"].items()})


def draw_recall_chart(data, path):
    """bench_million's indexes: recall@10 against queries/s, a line per index kind through its search settings."""
    plt = pyplot()
    kinds = {}
    for name, r in data["indexes"].items():
        kinds.setdefault(index_kind(name), []).append(r)
    fig, ax = plt.subplots(figsize=(9, 5))
    for kind, rows in kinds.items():
        rows = sorted(rows, key=lambda r: r["recall_at_10"])
        ax.plot([r["queries_per_second"] for r in rows], [r["recall_at_10"] for r in rows], "o-",
                label=f"{kind} ({count(rows[0]['memory_mib'])} MiB)")
    ax.set_xscale("log")
    ax.set_xlabel("queries/s, the held-out queries searched as one batch (log scale; right is faster)")
    ax.set_ylabel("recall@10 (of exact search's top 10)")
    ax.set_title(f"{count(data['corpus'])} vectors of {data['model']}, 2 CPU cores", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, title="index (memory)", title_fontsize=8)
    save(plt, fig, path)


def choice_chart_name(data):
    return chart_name("model_choice", [[r["model"], r["mean"], r["sentences_per_second"], r["kind"]]
                                       for r in data["rows"] + data.get("not_shipped", [])])


def draw_choice_chart(data, path):
    """bench_models: each model's five-task test Spearman mean against sentences/s on this CPU."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    colours = {"zoo preset": "#2b6cb0", "public (published quality)": "#dd6b20",
               "zoo student (not shipped)": "#38a169", "zoo cross-encoders (pairs/s)": "#805ad5"}
    for kind, colour in colours.items():
        rows = [r for r in data["rows"] + data.get("not_shipped", []) if r["kind"] == kind]
        if not rows:
            continue
        ax.scatter([r["sentences_per_second"] for r in rows], [r["mean"] for r in rows], color=colour, label=kind)
        below = kind in ("zoo preset", "zoo cross-encoders (pairs/s)")  # under their points, clear of the others
        for r in rows:
            ax.annotate(r["model"], (r["sentences_per_second"], r["mean"]), fontsize=7,
                        xytext=(4, -10) if below else (4, 3), textcoords="offset points")
    ax.set_xscale("log")
    speeds = [r["sentences_per_second"] for r in data["rows"] + data.get("not_shipped", [])]
    ax.set_xlim(min(speeds) / 1.3, max(speeds) * 2.2)  # room for the labels right of the fastest points
    ax.set_xlabel(f"sentences/s (cross-encoders: pairs/s) at batch {data['setting']['batch_size']}, engine fastest, "
                  f"{data['machine']['cpus']} CPU cores (log scale; right is faster)")
    ax.set_ylabel("test Spearman, mean of the five tasks")
    ax.set_title("public models: published quality, speed of their shape with random weights", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    save(plt, fig, path)


def block_model_choice(src, arg=None):
    """bench_models' chart and table."""
    data = src.bench("model_choice")
    return (f"![five-task test Spearman against sentences/s](docs/results/{choice_chart_name(data)})\n\n"
            + block_bench_table(src, "model_choice"))


def block_model_choice_chart(src, arg=None):
    """bench_models' chart alone (the pretrained-models page, whose table comes from the same file)."""
    data = src.bench("model_choice")
    return (f"![five-task test Spearman against sentences/s](docs/results/{choice_chart_name(data)})\n\n"
            + source("bench/results/model_choice.json"))


def block_pretrained_models(src, arg=None):
    """The pretrained-models table (sbert.net's and keras.io's): one row per zoo preset and public model, from
    bench_models' one results file: parameters, dimension and input length, size, speed, quality, licence, use."""
    data = src.bench("model_choice")
    if "licence" not in data["rows"][0]:
        raise SystemExit("results_pages: bench/results/model_choice.json predates its licence and size fields: "
                         "rerun `python bench/bench_models.py`")
    rows = []
    for r in data["rows"]:
        name = (f"[`{r['model']}`](docs/models/{r['model']}.md)" if r["kind"] == "zoo preset"
                else f"`{r['model']}`<br>(published quality; speed: its shape, random weights)")
        rows.append([name, f"{r['parameters'] / 1e6:.1f} M", f"{r['dim']} / {r['max_tokens']}",
                     f"{r['size_bytes'] / 2**20:.0f} MiB", count(r["sentences_per_second"]), f2(r["mean"]),
                     r["licence"], r["use"]])
    machine, setting = data["machine"], data["setting"]
    return (table(["model", "parameters", "dim / max tokens", "size", "sentences/s", "5-task mean", "licence",
                   "intended use"], rows)
            + f"\nsentences/s: batch {setting['batch_size']}, maxlen {setting['maxlen']}, engine "
              f"{setting['engine']}, median of {setting['rounds']} rounds on {machine['cpu']} ({machine['kind']}, "
              f"{machine['cpus']} CPU cores): `{data['command']}`. 5-task mean: test Spearman x100 of the cosine, "
              "mean of ATEC, BQ, LCQMC, PAWS-X and STS-B (zoo's measured, the public models' published). Max tokens: "
              "the longest input the weights were trained on (zoo's presets cut at 64 by default) or the "
              "architecture's position table. Size: the shipped weights for zoo's presets, float32 (4 bytes a "
              "parameter) for the public models. Licence and use: from each model's card. "
              + source("bench/results/model_choice.json"))


def compare_plots(run):
    """{task: {model: plot record}} of a ``zoo compare`` record (empty when its rows carry none)."""
    out = {}
    for r in run.get("rows", []):
        if "plot" in r:
            out.setdefault(r["task"], {})[r["model"]] = r["plot"]
    return out


def plots_module():
    """zoo/_plots.py loaded by path (it imports numpy only): the drawing ``zoo compare`` uses, without zoo."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("zoo_plots", ROOT / "zoo" / "_plots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compare_chart_names(name, task, plots):
    """{kind: file name} of a compare run's two pictures of ``task``: TASK_scores and TASK_threshold."""
    return {kind: chart_name(f"{name}_{task}_{kind}", plots) for kind in ("scores", "threshold")}


def charts(src):
    """{file name under docs/results/: a function drawing it to a path}: every chart a page or block names."""
    out = {}
    for run in INFERENCE_RUNS:
        data = src.bench(run)
        out[speed_chart_name(data, run)] = lambda path, data=data: draw_speed_chart(data, path)
    million = src.bench("million")
    out[recall_chart_name(million)] = lambda path: draw_recall_chart(million, path)
    choice = src.bench("model_choice")
    out[choice_chart_name(choice)] = lambda path: draw_choice_chart(choice, path)
    for name in src.runs():
        for task, plots in compare_plots(src.run(name)).items():
            names = compare_chart_names(name, task, plots)
            for kind, draw in (("scores", "draw_scores"), ("threshold", "draw_thresholds")):
                out[names[kind]] = lambda path, task=task, plots=plots, draw=draw: getattr(plots_module(), draw)(
                    pyplot(), task, plots, path, dpi=90)
    return out


REFERENCE = re.compile(r"chinese_L-(\d+)_H-(\d+)_A-\d+")


def model_label(name):
    """A benchmark's model argument as a short name: a preset's name, ``BERT L6/H384 (reference)`` for a reference
    checkpoint (chinese_L-6_H-384_A-6), else the run folder's name."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".", "..", "google", "model")]
    last = parts[-1] if parts else name
    ref = REFERENCE.fullmatch(last)
    return f"BERT L{ref[1]}/H{ref[2]} (reference)" if ref else last


def block_million(src, arg=None):
    data = src.bench("million")
    rows = data["indexes"]
    good = [n for n, r in rows.items() if r["recall_at_10"] >= 0.95]
    best = max(good, key=lambda n: rows[n]["speedup_vs_exact"])
    r = rows[best]
    return (f"Over {count(data['corpus'])} sentence vectors of {data['model']}, `{best}` reached recall@10 "
            f"{r['recall_at_10']:.3f} at {f1(r['speedup_vs_exact'])}x the queries/s of exact search, in "
            f"{count(r['memory_mib'])} MiB. " + source("bench/results/million.json"))


def block_paraphrase_retrieval(src, arg=None):
    data = src.bench("paraphrase_retrieval")
    best = max(data["rows"], key=lambda r: r["mrr@10"])
    bm25 = max((r for r in data["rows"] if r["method"].startswith("BM25")), key=lambda r: r["mrr@10"])
    return (f"On {count(data['test_queries'])} paraphrase queries over {count(data['corpus_sentences'])} sentences, "
            f"the best method ({best['method']}) reached MRR@10 {f2(best['mrr@10'])} against "
            f"{f2(bm25['mrr@10'])} for the best BM25 ({bm25['method']}). "
            + source("bench/results/paraphrase_retrieval.json"))


def block_paraphrase(src, arg=None):
    data = src.bench("paraphrase")
    m = data["metrics"]["returned (filters on)"]
    raw = data["metrics"]["raw samples (filters=False)"]
    return (f"On {m['inputs']} LCQMC and BQ test sentences, {f1(m['judged_paraphrase'])}% of the "
            f"{count(m['candidates'])} returned candidates were judged paraphrases by a cross-encoder, "
            f"{f1(m['no_repetition'])}% had no repeated character run, {f1(m['copies'])}% were copies of the input "
            f"({f1(raw['copies'])}% before the filters), distinct-2 {f1(m['distinct_2'])}%. "
            + source("bench/results/paraphrase.json"))


def block_generation(src, arg=None):
    data = src.bench("generation")
    return (f"The key/value cache generated {count(data['median_cached_tokens_per_s'])} tokens/s against "
            f"{count(data['median_uncached_tokens_per_s'])} without it (median over {len(data['rows'])} inputs, "
            f"{f1(data['median_ratio'])}x), with identical samples. " + source("bench/results/generation.json"))


def block_integrity(src, arg=None):
    data = src.bench("integrity")
    return (f"Checking the manifest costs {f2(data['check_cost_s'])} s per load of the {data['bytes'] / 1e6:.1f} MB "
            f"default preset ({f2(data['load_checked_s'])} s checked vs {f2(data['load_unchecked_s'])} s unchecked, "
            f"medians of {data['repeats']} interleaved loads). " + source("bench/results/integrity.json"))


def block_soak(src, arg=None):
    d = src.bench("soak_serving")
    bad = sum(d["bad_requests"].values())
    return (f"A {d['minutes']:.0f}-minute soak ({d['clients']} clients, {d['bad_share']:.0%} bad requests) served "
            f"{count(d['good_requests_served'])} good requests with {d['good_requests_failed']} failures "
            f"(p99 {f1(d['p99_ms'])} ms), answered {count(bad)} bad ones with 4xx, and the server's memory grew by "
            f"{d['rss_mib_growth']:.0f} MiB after the warm-up. " + source("bench/results/soak_serving.json"))


def block_serving(src, arg=None):
    d = src.bench("serving")
    rows = {(r["concurrency"], r["batch"]): r for r in d["results"]}
    one, eight = rows[(1, 1)], rows[(8, 1)]
    return (f"With one sentence per request, 8 concurrent clients got {f1(eight['requests_per_s'] / one['requests_per_s'])}x "
            f"the requests/s of one client ({f1(eight['requests_per_s'])} vs {f1(one['requests_per_s'])}; p50 "
            f"{f1(eight['p50_ms'])} vs {f1(one['p50_ms'])} ms): the batcher merges concurrent requests. "
            + source("bench/results/serving.json"))


def block_streaming(src, arg=None):
    noxla = src.bench("streaming_tf_noxla")["summary"]
    xla = src.bench("streaming")["summary"]
    return (f"Streaming {count(xla['stream-10m']['pairs'])} pairs trained at {f2(xla['stream-10m']['ratio_to_memory'])}x "
            f"the steps/s of LCQMC in memory (XLA); without XLA the streamed run peaked at "
            f"{count(noxla['stream-10m']['peak_rss_mib'])} MiB against {count(noxla['memory']['peak_rss_mib'])} MiB in "
            f"memory. " + source("bench/results/streaming.json", "bench/results/streaming_tf_noxla.json"))


def block_distribute(src, arg=None):
    return distribute_table(src) + source("bench/results/distribute.json")


def block_public_models(src, arg=None):
    """zoo's shipped presets beside public models' published test Spearman: size, the five tasks, the source."""
    rows = []
    for preset in SHIPPED:
        ship = src.ship(preset)
        dtype, scores = ship["weights_dtype"], ship["scores"][ship["weights_dtype"]]
        backbone = src.preset_config(preset)["model"]["config"]["backbone"]["config"]
        rows.append([f"`{preset}` (zoo)", f"L{backbone['num_layers']}/H{backbone['hidden_dim']}, "
                     f"{ship['sizes_bytes'][dtype] / 2**20:.1f} MiB ({dtype})"]
                    + [f2(scores[t]["test_spearman"]) for t in TASKS]
                    + [f"measured here (`data/presets/{preset}/ship.json`)"])
    public = src.bench("public_baselines")
    for m in public["models"]:
        size = f"{m['size']} params" if m["size"][:1].isdigit() else m["size"]
        rows.append([m["model"], size] + [f2(m["test_spearman"][t]) for t in TASKS] + [f"published: {m['source']}"])
    return (table(["model", "size", *map(task_name, TASKS), "source"], rows) + "\n" + prose(
        "Test Spearman x100 of the cosine on the full test splits. " + public["note"] + " zoo's presets are general "
        "models too, never trained on PAWS-X. The public figures were published, not measured here; "
        f"`bench/results/public_baselines.json` copies them from `{public['copied_from']}`, each with its source.")
        + source("bench/results/public_baselines.json", *(f"data/presets/{p}/ship.json" for p in SHIPPED)))


MATCHERS = {"cosent": "CoSENT bi-encoder", "sbert": "Sentence-BERT bi-encoder", "interact": "interaction cross-encoder"}


def block_matchers(src, arg=None):
    """zoo's own bi-encoders against its cross-encoder on one backbone and one train sample (compare_4000), with
    the DvBERT run beside when it started from the same backbone and sample."""
    run, task = src.run("compare_4000"), "LCQMC"
    cfg = run["config"]
    rows = [[MATCHERS[r["model"]], f"{f2(r['test_accuracy'])} {ci(r['test_accuracy_ci95'])}", f2(r["test_spearman"])]
            for r in run["rows"] if r["task"] == task]
    rows.append(["valid's majority class for every pair (for scale)", f2(run["baselines"][task]["test_accuracy"]), ""])
    commands = [f"- CoSENT, Sentence-BERT and the cross-encoder: `{command(run['command'])}` "
                "(bench/results/runs/compare_4000.json)\n"]
    dv = src.run("dvbert_4000")
    dv_task = dv["config"].get("task") or ",".join(dv["config"].get("tasks", []))
    same = ("checkpoint", "limit_train", "epochs", "seed")
    if [dv["config"][k] for k in same] + [dv_task] == [cfg[k] for k in same] + [task]:
        rows.insert(2, ["DvBERT bi-encoder (distilled from a cross-encoder)",
                        f"{f2(dv['test_accuracy'])} {ci(dv['test_accuracy_ci95'])}", f2(dv["test_spearman"])])
        commands.append(f"- DvBERT, taught by the cross-encoder of `cross_encoder_4000`: `{command(dv['command'])}` "
                        "(bench/results/runs/dvbert_4000.json)\n")
    return (table(["model", f"{task} test accuracy % at the valid threshold [95% CI]", f"{task} test Spearman"], rows)
            + "\n" + prose(f"{task}, every model from {model_label(cfg['checkpoint'])} trained one epoch on the first "
                           f"{count(cfg['limit_train'])} train pairs; each threshold fitted on the full valid split "
                           "and applied to the full test split (bootstrap 95% interval); Spearman x100.")
            + "\n" + "".join(commands))


def block_compare_plots(src, arg):
    """A compare run's pictures (test score histograms by label; accuracy against the threshold), drawn by this tool
    from the plot data of its record, or a note when the record has none."""
    run = src.run(arg)
    plots = compare_plots(run)
    if not plots:
        return prose(f"(No pictures yet: bench/results/runs/{arg}.json was recorded before `zoo compare` kept its plot "
                     f"data; rerunning `{command(run['command'])}` and copying its results.json there draws them.)")
    out = []
    for task, p in plots.items():
        names = compare_chart_names(arg, task, p)
        out.append(f"![{task} test scores by label, the threshold fitted on valid marked](docs/results/"
                   f"{names['scores']})\n\n![{task}: accuracy against the threshold on valid and on test]"
                   f"(docs/results/{names['threshold']})\n\n")
    return "".join(out) + source(f"bench/results/runs/{arg}.json")


def block_search_chart(src, arg=None):
    """bench_million's recall@10 against queries/s, a line per index kind."""
    return (f"![recall@10 against queries/s of each index over a million sentences](docs/results/"
            f"{recall_chart_name(src.bench('million'))})\n\n" + source("bench/results/million.json"))


NARROW = {  # results file -> per wide table of its ``table`` field, [(lead line, columns)]: one narrower table each
    "model_choice": [[
        ("Quality and speed", ["model", "timed as", "parameters", "mean", "sentences/s"]),
        ("Test Spearman x100 per task", ["model", "ATEC", "BQ", "LCQMC", "PAWSX", "STS-B", "mean"])]],
    "quality_ablation": [[
        ("The four tasks' valid mean beside WORDORDER, PAWS-X valid (transfer) and the selection metric",
         ["run", "ingredients", "4-task mean", "WORDORDER", "PAWS-X valid", "selection (mean of 5)"]),
        ("Valid Spearman x100 per task", ["run", "ATEC", "BQ", "LCQMC", "STS-B", "4-task mean"]),
        ("Time", ["run", "training (wall)", "CPU, whole run"])]],
    "quality_continue": [
        [("Per epoch: the four tasks' valid mean, its change against the shipped model, and WORDORDER",
          ["run", "word-order negatives", "in-batch weight", "epoch", "4-task mean", "vs shipped", "WORDORDER"]),
         ("Valid Spearman x100 per task and epoch", ["run", "epoch", "ATEC", "BQ", "LCQMC", "STS-B"])],
        [("Test Spearman x100 of each kept model", ["model", "kept epoch", "ATEC", "BQ", "LCQMC", "STS-B", "PAWSX",
                                                    "mean"]),
         ("Against bge-small, PAWS-X valid, time", ["model", "tasks above bge-small", "PAWS-X valid", "training (wall)",
                                                    "CPU, whole run"])]],
    "batch_independence": [[
        ("A text's vector alone and in batches (largest difference), and time per call",
         ["precision", "max diff, alone vs batch of 64", "alone vs reversed batches of 7", "min cosine to fp32",
          "batch of 64", "one text"]),
        ("Valid Spearman x100", ["precision", "BQ valid", "LCQMC valid", "STS-B valid"])]],
    "matmul": [[
        ("Speed", ["H", "rows x H x 4H", "fp32 GFLOP/s", "int8 u8s8 GFLOP/s", "int8 u8u8 GFLOP/s", "torch fp32 GFLOP/s",
                   "torch int8 GFLOP/s"]),
        ("int8 against float32", ["H", "int8 u8s8 / fp32", "int8 u8u8 / fp32", "torch int8 / fp32"])]],
    "matmul_avx512_vnni": [[
        ("Speed", ["H", "rows x H x 4H", "fp32 GFLOP/s", "int8 u8s8 GFLOP/s", "int8 u8u8 GFLOP/s", "int8 static GFLOP/s",
                   "torch fp32 GFLOP/s", "torch int8 GFLOP/s"]),
        ("int8 against float32", ["H", "int8 u8s8 / fp32", "int8 u8u8 / fp32", "int8 static / fp32",
                                  "torch int8 / fp32"])]],
    "paraphrase": [[
        ("Candidates, share of each kind (%)",
         ["candidates", "judged paraphrase %", "judged and beyond particles %", "edits beyond particles %", "copies %",
          "no repetition %", "distinct-2 %"]),
        ("Counts", ["candidates", "inputs", "returned", "inputs with none"])]],
}


def narrow(text, splits):
    """``text`` with each markdown table whose header holds every column of one of ``splits`` written as one
    narrower table per (lead line, columns) of that split."""
    def split(match):
        lines = match.group(0).rstrip("\n").split("\n")
        header, *rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[:1] + lines[2:]]
        groups = next((g for g in splits if all(c in header for _, cols in g for c in cols)), None)
        if groups is None:
            return match.group(0)
        tables = "\n".join(f"{lead}:\n\n" + table(cols, [[row[header.index(c)] for c in cols] for row in rows])
                           for lead, cols in groups)
        return tables if match.group(0).endswith("\n") else tables.rstrip("\n")

    return re.sub(r"(?:^\|.*\|[ \t]*(?:\n|$))+", split, text, flags=re.MULTILINE)


def bench_table(data, name):
    """A benchmark's own table (its ``table`` field), its wide tables narrowed (NARROW)."""
    text = data["table"] if isinstance(data["table"], str) else "\n".join(data["table"])
    return narrow(text.strip(), NARROW.get(name, [])) + "\n"


def block_bench_table(src, arg):
    """The table a benchmark wrote into its results file (its ``table`` field), with its command."""
    data = src.bench(arg)
    return f"`{command(data['command'])}`\n\n" + bench_table(data, arg) + "\n" + source(f"bench/results/{arg}.json")


BLOCKS = {"bench-table": block_bench_table, "models": block_models, "main-job": block_main_job, "run": block_run, "preset": block_preset,
          "pretrained": block_pretrained, "inference": block_inference, "million": block_million,
          "paraphrase-retrieval": block_paraphrase_retrieval, "paraphrase": block_paraphrase,
          "generation": block_generation, "integrity": block_integrity, "soak": block_soak, "serving": block_serving,
          "streaming": block_streaming, "distribute": block_distribute, "public-models": block_public_models,
          "matchers": block_matchers, "compare-plots": block_compare_plots, "search-chart": block_search_chart,
          "model-choice": block_model_choice, "model-choice-chart": block_model_choice_chart,
          "pretrained-models": block_pretrained_models}


# ------------------------------------------------------------------------------ pages (docs/results/)
def distribute_table(src):
    rows = [[r["backend"], r["devices"], f2(r["steps_per_s"]), count(r["pairs_per_s"]), f2(r["ratio_to_one_device"])]
            for r in src.bench("distribute")["summary"]]
    return table(["backend", "devices", "steps/s", "pairs/s", "x 1 device"], rows)


PAGE_TITLES = {  # the pages of the results files no page above covers: (title, what it shows)
    "cached": ("Cached in-batch negatives (GradCache)", "peak memory and step time of a large in-batch ranking batch, "
               "cached in mini-batches and not"),
    "model_choice": ("Quality against speed", "zoo's shipped encoders and the architectures of public Chinese "
                     "encoders: five-task test Spearman beside sentences/s on this CPU"),
    "techniques": ("Training techniques, measured", "the 4,000-pair LCQMC regression run with each training "
                   "technique, the in-batch run's batch sizes and hard negatives: valid and test Spearman, "
                   "WORDORDER and PAWS-X valid, training seconds"),
    "million_milvus_10k": ("Milvus Lite beside zoo's indexes", "Milvus Lite's FLAT and IVF_FLAT beside exact search "
                           "and HNSW on a small sample of the million-sentence corpus"),
    "quality_ablation": ("Word-order ablation", "word-order negatives and in-batch ranking, each and together, "
                         "compared on valid"),
    "quality_students": ("The bi-encoder taught by cross-encoders", "a cross-encoder per task (the teachers), "
                         "their silver pairs, and zoo-embed-zh-L4 students trained on them: valid for choosing, "
                         "test for reporting, and the decision on the preset"),
    "quality_continue": ("Word-order negatives on the shipped model", "zoo-embed-zh-L4 trained further with "
                         "word-order negatives at several doses"),
    "questions": ("Questions to passages", "BM25, dense and hybrid search from questions to passages"),
    "questions_ict": ("Inverse cloze task (ICT)", "zoo-embed-zh-L4 continued with and without ICT pairs: test "
                      "Spearman and question-to-passage search"),
    "ray_encode": ("Encoding with Ray", "zoo encode's local processes against Ray workers"),
    "serving_onnx": ("Serving latency of an ONNX int8 export", "the serving benchmark against an ONNX int8 export"),
    "startup": ("Start-up time", "each command's start-up beside import tensorflow, and a zoo serve of an ONNX export"),
    "train_xla": ("Training with and without XLA", "the same training run with XLA compilation (the default) and "
                  "without (--no-jit-compile), interleaved"),
    "tiny_runs": ("Every command on tiny inputs", "every zoo command once on a tiny input: seconds, exit code, quiet"),
}


def page_title(name):
    """(title, description) of the page of a results file no page above covers."""
    return PAGE_TITLES.get(name, (name.replace("_", " ").capitalize(), ""))


def recorded_commands(data):
    """The commands a results file records: its ``command``, ``bench_command``, or each model's ``command``."""
    if "command" in data or "bench_command" in data:
        return [data.get("command") or data["bench_command"]]
    return sorted({m["command"] for m in per_model(data) if "command" in m})


def per_model(data):
    """The per-model records of a results file keyed by model (bench_inference's), else none."""
    return [m for m in data["models"].values() if isinstance(m, dict)] if isinstance(data.get("models"), dict) else []


def page_index(src):
    files = sorted(p.relative_to(src.root).as_posix() for p in (src.root / "bench" / "results").rglob("*.json"))
    rows = []
    for f in files:
        data = json.loads((src.root / f).read_text(encoding="utf-8"))
        commands = "<br>".join(f"`{command(c)}`" for c in recorded_commands(data))
        if not commands:
            commands = f"copied from `{data['copied_from']}`" if "copied_from" in data else "(not recorded)"
        versions = [data.get("versions", {}).get("zoo"), data.get("zoo") if isinstance(data.get("zoo"), str) else None]
        versions += [m.get("versions", {}).get("zoo") for m in per_model(data)]
        rows.append([f"`{f}`", commands, ", ".join(sorted({v for v in versions if v}))])
    others = "".join(f"- [{page_title(n)[0]}]({n}.md)" + (f": {page_title(n)[1]}" if page_title(n)[1] else "") + "\n"
                     for n in other_results(src))
    return (HEADER + "# Benchmarks and results\n\n"
            "Every figure in this manual is generated from a file in `bench/results/` (benchmarks, and the "
            "`results.json` of training runs copied into `bench/results/runs/`) or from a shipped preset's "
            "`ship.json`, by `python tools/results_pages.py`; `python tools/results_pages.py --check` (run by the "
            "tests) fails when a page is stale. The figures were measured on a 2-core x86 CPU machine without a GPU, "
            "often while other jobs shared the cores: compare speeds within one table (they were measured side by "
            "side), not across tables.\n\n"
            "- [Shipped models](models.md): the presets' scores beside public models', paraphrase generation\n"
            "- [Training runs](runs.md): the recipes' recorded runs\n"
            "- [Speed](speed.md): encoding, training steps, generation, serving latency\n"
            "- [Search](search.md): paraphrase retrieval, a million sentences, random vectors\n"
            "- [Training at scale](training.md): data parallelism, streamed training data\n"
            "- [Reliability](reliability.md): integrity checks, fuzzing, a serving soak\n"
            + others + "\n"
            "## Files\n\n" + table(["file", "command", "zoo version"], rows))


def page_models(src):
    out = [HEADER, "# Shipped models\n\nzoo's presets beside public models:\n\n", block_public_models(src), "\n"]
    for preset in SHIPPED:
        ship = src.ship(preset)
        dtype = ship["weights_dtype"]
        scores, full = ship["scores"][dtype], ship["scores"]["float32"]
        pairs = ", ".join(f"{k} {count(v)}" for k, v in ship["train_pairs"].items()) or "see the command"
        out.append(f"## {preset}\n\n`{ship['class']}`; trained by `{command(ship['command_trained'])}` "
                   f"({minutes(ship['train_seconds'])} of training; train pairs: {pairs}), then re-scored and saved "
                   f"with {dtype} weights ({ship['sizes_bytes'][dtype] / 2**20:.1f} MiB; float32 "
                   f"{ship['sizes_bytes']['float32'] / 2**20:.1f} MiB), which moved no valid Spearman by more than "
                   f"{ship['float16_max_valid_change']:.3f}.\n\n")
        rows = [[task_name(t), f2(scores[t]["valid_spearman"]), f2(scores[t]["test_spearman"]),
                 f2(full[t]["test_spearman"]),
                 f"{f2(scores[t]['test_accuracy'])} {ci(scores[t]['test_accuracy_ci95'])}" if "test_accuracy" in
                 scores[t] else ""] for t in TASKS]
        out.append(table(["task", f"valid Spearman ({dtype})", f"test Spearman ({dtype})", "test Spearman (float32)",
                          "test accuracy % at the valid threshold [95% CI]"], rows))
        out.append("\n" + source(f"data/presets/{preset}/ship.json") + "\n")
    para = src.bench("paraphrase")
    out.append(f"## Paraphrase generation (zoo-simbert-zh-L4)\n\n`{command(para['command'])}` "
               f"({minutes(para['seconds'])}): `gen_synonyms(text, n={para['n']}, k={para['k']})` on LCQMC and BQ "
               "test sentences, judged by an LCQMC cross-encoder (P(similar) >= 0.5). Copies: equal to the input up "
               "to punctuation, spaces and case; repetition: a character repeated 3 or more times in a row.\n\n")
    out.append(bench_table(para, "paraphrase") + "\nInputs picked with a fixed seed, and their top 3:\n\n"
               + para["sample_table"]
               + "\n\n" + source("bench/results/paraphrase.json") + "\n")
    meta = src.preset_config(MLM_PRESET)["metadata"]
    out.append(f"## {MLM_PRESET}\n\n`{meta['start']}` after more masked-LM pretraining: `python {meta['command']}`. "
               f"Kept: step {meta['step']}, held-out masked-token accuracy {f2(meta['masked_accuracy'])}%.\n\n"
               + source(f"data/presets/{MLM_PRESET}/zoo_config.json"))
    return "".join(out)


def page_runs(src):
    out = [HEADER, "# Training runs\n\nThe `results.json` of training runs, copied into `bench/results/runs/`.\n\n"]
    rows = [[f"`{name}`", f"`{command(src.run(name)['command'])}`", run_scores(src.run(name)), run_time(src.run(name))]
            for name in src.runs()]
    out.append(table(["run", "command", "scores", "time (2 CPU cores)"], rows))
    for name in src.runs():
        run = src.run(name)
        epochs = run.get("epochs", [])
        metric = next((m for m in ("valid_spearman", "valid_accuracy", "valid_loss") if epochs and m in epochs[0]), None)
        if metric:
            curve = [[e["epoch"], f2(e[metric]), "" if e.get("train_loss") is None else f"{e['train_loss']:.3f}"]
                     for e in epochs]
            out.append(f"\n## {name}\n\n" + table(["epoch", metric.replace("_", " "), "train loss (epoch mean)"],
                                                    curve) + "\n" + source(f"bench/results/runs/{name}.json"))
    return "".join(out)


def md_section(src, heading, name, intro):
    """A page section: ``heading``, ``intro``, then the table a benchmark wrote to bench/results/NAME.md, sourced."""
    return (f"\n{heading}\n\n{intro}\n\n"
            + (src.root / "bench" / "results" / f"{name}.md").read_text(encoding="utf-8").strip() + "\n\n"
            + source(f"bench/results/{name}.json", f"bench/results/{name}.md"))


def page_speed(src):
    out = [HEADER, "# Speed\n\n## Encoding: zoo, transformers and sentence-transformers\n", SYSTEMS]
    for run in INFERENCE_RUNS:
        current = src.bench(run)
        flags = sorted({f for m in current["models"].values() for f in m["cpu_flags"]})
        commands = sorted({command(m["command"]) for m in current["models"].values()})
        out.append(f"\n### 2 CPU cores with {', '.join(flags)}\n\n" + "".join(f"- `{c}`\n" for c in commands) + "\n")
        out.append(f"![sentences/s and one-sentence latency of every system]({speed_chart_name(current, run)})\n\n")
        for name, m in current["models"].items():
            systems, pairs = list(m["sentences_per_second"]), m.get("quality_pairs")
            first = f" (first {count(pairs)})" if pairs else ""
            out.append(f"#### {model_label(name)}\n\n`{name}`: {m['layers']} layers, hidden {m['hidden']}, pooling "
                       f"{m['pooling']} (sentence-transformers pools with {m['st_pooling']}). Speed:\n\n" + table(
                           ["system", "sentences/s (batch 64)", "x transformers fp32 (median of per-round ratios)",
                            "x best sentence-transformers (median of per-round ratios)", "batch-1 ms (median)"],
                           [[s_, count(m["sentences_per_second"][s_]), f2(m["speed_vs_transformers_fp32"][s_]),
                             f2(m["speed_vs_best_st"][s_]), f"{m['latency_batch1'][s_]['median_ms']:.2f}"]
                            for s_ in systems])
                       + "\n" + prose("Quality: test Spearman x100 of each system's vectors" + (
                           f" on the first {count(pairs)} pairs of each test split, to show that the systems compute "
                           "the same vectors; the [shipped models' page](models.md) scores the full test splits, so "
                           "its figures differ" if pairs else "") + ":")
                       + "\n" + table(["system"] + [f"{t} test{first}" for t in QUALITY_TASKS],
                                      [[s_] + [f2(m["test_spearman"][s_][t]) if t in m["test_spearman"].get(s_, {})
                                               else "" for t in QUALITY_TASKS] for s_ in systems]) + "\n")
        out.append(source(f"bench/results/{run}.json"))
    for run in MATMUL_RUNS:
        m = src.bench(run)
        ratios = m["results"]["384"]["int8_over_fp32"]
        torch_ratio = (f", and PyTorch's (FBGEMM) at {f2(ratios['torch int8'])}x its own float32"
                       if "torch int8" in ratios else "")
        out.append(f"\n### The matrix products on 2 CPU cores with {', '.join(m['cpu_flags'])}: what bounds int8\n\n"
                   f"One feed-forward product of a layer (64 sentences of ~14 tokens) in float32 and int8. At H=384 "
                   f"here, ONNX Runtime's int8 product runs at {f2(ratios['int8 u8s8'])}x its float32 one"
                   f"{torch_ratio}: an encoder made of these products can be only that much faster in int8 on this "
                   f"CPU.\n\n"
                   + narrow((src.root / "bench" / "results" / f"{run}.md").read_text(encoding="utf-8").strip(),
                            NARROW[run]) + "\n\n"
                   + source(f"bench/results/{run}.json", f"bench/results/{run}.md"))
    ceiling = src.bench("int8_ceiling")
    out.append(md_section(src, "### How close each system comes to the product rate", "int8_ceiling",
                          f"`{ceiling['command']}`: the arithmetic of encoding the inference run's sentences (weight "
                          f"products and attention, on the padded tokens of sorted batches of 64) divided by each "
                          f"system's measured time, beside ONNX Runtime's int8 product rate on the same CPU. A system "
                          f"above 100% computes faster than ONNX Runtime's int8 product can: no ONNX Runtime graph can "
                          f"match it."))
    st = src.bench("startup")
    out.append(md_section(src, "## Start-up and the light runtime", "startup",
                          f"`python bench/bench_startup.py` ({st.get('cpu', '2 cores')}): each command a fresh process, "
                          f"beside `python -c \"import tensorflow\"` on the same machine; `zoo encode` runs the light "
                          f"runtime (ONNX Runtime, no TensorFlow) where the model's fused graph exists, `--precision "
                          f"fp32` loads Keras. The server rows start `zoo serve` of an ONNX export of zoo-embed-zh-L4 "
                          f"and read its resident memory after 20 requests of 64 texts."))
    out.append("\n## Earlier: int8 through tf2onnx, before the fused graphs\n\n")
    data = src.bench("inference_cosent_L4")
    out.append(f"`{command(data['command'])}`: {count(data['sentences'])} LCQMC test sentences, batch "
               f"{data['batch_size']}, {data['repeats']} interleaved rounds; speed is the median of each system's "
               f"per-round ratio to transformers fp32. CPU flags: {', '.join(data['cpu_flags'])}.\n\n")
    for model, m in data["models"].items():
        rows = []
        for system, sps in m["sentences_per_second"].items():
            s = m["test_spearman"][system]
            rows.append([system, count(sps), f2(m["speed_vs_transformers_fp32"][system])]
                        + [f2(s[t]) if t in s else "" for t in ("LCQMC", "BQ", "STS-B")])
        k = m["keras_int8"]
        s = m["test_spearman"].get("zoo_int8_keras", {})
        rows.append([f"zoo_int8_keras ({count(k['sentences'])} sentences; {f2(k['speed_vs_zoo_fp32'])}x zoo_fp32)",
                     count(k["sentences_per_second"]), ""] + [f2(s[t]) if t in s else "" for t in ("LCQMC", "BQ",
                                                                                               "STS-B")])
        out.append(f"Model `{model_label(model)}`:\n\n" + table(["system", "sentences/s", "x transformers fp32",
                                                   "LCQMC test Spearman", "BQ test Spearman", "STS-B test Spearman"],
                                                  rows))
    out.append("\n" + source("bench/results/inference_cosent_L4.json"))
    b = src.bench("bi_encoder")
    e, t = b["encode_sentences_per_s"], b["train_steps_per_s"]
    out.append(f"\n## zoo against transformers (torch)\n\n`{command(b['command'])}`: median of {b['repeats']} "
               f"interleaved repeats, {b['threads']} threads each, [CLS] pooling; {count(b['sentences'])} sentences, "
               f"batch {b['batch_size']}; training: {b['pairs_per_step']} pairs a step, Adam.\n\n")
    out.append(table(["measure", "zoo", "torch", "zoo / torch"], [
        ["encode, torch in input order", f"{count(e['zoo'])} sentences/s", f"{count(e['torch_input_order'])} sentences/s",
         f"{f2(e['ratio_input_order'])}x"],
        ["encode, torch given zoo's length-sorted batches", f"{count(e['zoo'])} sentences/s",
         f"{count(e['torch_sorted_batches'])} sentences/s", f"{f2(e['ratio_sorted'])}x"],
        ["CoSENT training steps, identical batches", f"{f2(t['zoo'])} steps/s", f"{f2(t['torch'])} steps/s",
         f"{f2(t['ratio'])}x"]]))
    out.append("\n" + source("bench/results/bi_encoder.json"))
    g = src.bench("generation")
    out.append(f"\n## Generation: key/value cache\n\n`{command(g['command'])}`: {g['checkpoint']}, n={g['n']} samples, "
               f"maxlen {g['maxlen']}, the same seed on both paths.\n\n")
    out.append(table(["input", "cached tokens/s", "uncached tokens/s", "speed-up", "identical samples"],
                     [[r["text"], count(r["cached"]["tokens_per_s"]), count(r["uncached"]["tokens_per_s"]),
                       f"{f1(r['ratio'])}x", "yes" if r["identical_samples"] else "no"] for r in g["rows"]]))
    out.append("\n" + block_generation(src))
    s = src.bench("serving")
    out.append(f"\n## Serving latency\n\n`{command(s['command'])}`: {s['model']}, {s['server']['transport']}, batcher "
               f"of {s['server']['max_batch_size']} rows and {s['server']['batch_timeout_ms']:g} ms; "
               f"{s['cpus']} CPU cores, load average {s['load_average_before'][0]:.1f} before and "
               f"{s['load_average_after'][0]:.1f} after.\n\n")
    out.append(table(["concurrency", "strings/request", "requests", "p50 ms", "p99 ms", "requests/s", "sentences/s"],
                     [[r["concurrency"], r["batch"], count(r["requests"]), f1(r["p50_ms"]), f1(r["p99_ms"]),
                       f1(r["requests_per_s"]), f1(r["sentences_per_s"])] for r in s["results"]]))
    out.append("\n" + block_serving(src))
    return "".join(out)


def page_search(src):
    out = [HEADER, "# Search\n\n## Paraphrase retrieval\n\n"]
    p = src.bench("paraphrase_retrieval")
    out.append(f"`{command(p['command'])}` ({minutes(p['seconds'])}): the corpus is every distinct sentence of "
               f"LCQMC, BQ and ATEC ({count(p['corpus_sentences'])}); the queries are the first sentences of "
               f"{count(p['test_queries'])} positive test pairs of LCQMC and BQ, the relevant item the second. BM25 terms "
               f"and the hybrid weight were chosen on {count(p['valid_queries'])} valid queries: "
               f"{p['choices_on_valid']['bm25_terms']['chosen']} terms; dense weight "
               + ", ".join(f"{m} {v['chosen_weight']}" for m, v in p["choices_on_valid"].items() if m != "bm25_terms")
               + ".\n\n")
    out.append(table(["method", "recall@1", "recall@10", "MRR@10"],
                     [[r["method"], f2(r["recall@1"]), f2(r["recall@10"]), f2(r["mrr@10"])] for r in p["rows"]]))
    out.append("\n" + source("bench/results/paraphrase_retrieval.json"))
    m = src.bench("million")
    e = m["encode"]
    out.append(f"\n## A million sentences\n\n`{command(m['command'])}` (and earlier runs of the same script with "
               f"`--only`/`--skip`, kept in the file): {count(m['corpus'])} vectors of {m['model']}, 1,000 held-out "
               "queries; memory is the searched structure (float vectors for rescoring stay memory-mapped); "
               "\"x exact\" is against the exact search timed in the same run.\n\n")
    out.append(table(["index", "settings", "build s", "memory MiB", "recall@10", "queries/s", "x exact"],
                     [[name, ", ".join(f"{k}={v}" for k, v in r["settings"].items()), count(r["build_seconds"]),
                       count(r["memory_mib"]), f"{r['recall_at_10']:.3f}", count(r["queries_per_second"]),
                       f1(r["speedup_vs_exact"])] for name, r in m["indexes"].items()]))
    out.append(f"\n{block_million(src)}\n![recall@10 against queries/s of each index kind]({recall_chart_name(m)})\n\n"
               f"Each line is one index kind through its search-time settings (nprobe, ef, rescore); up and right is "
               f"better.\n\nBulk encoding of the corpus: `{e['command']}`, resumed from chunk "
               f"{e['resumed_from_chunk']}: {count(e['lines_encoded'])} lines at {count(e['sentences_per_second'])} "
               f"sentences/s, peak RSS {count(e['peak_rss_mib'])} MiB ({e['note']}).\n")
    r = src.bench("retrieval")
    out.append(f"\n## Random vectors (the worst case for IVF)\n\n`{command(r['command'])}`: {count(r['n'])} random "
               f"{r['dim']}-d Gaussian vectors, {r['queries']} queries, top 10; the IVF index took "
               f"{f1(r['faiss_build_seconds'])} s to build.\n\n")
    out.append(table(["method", "recall@10", "queries/s"],
                     [[x["method"], f"{x['recall@10']:.3f}", count(x["queries_per_s"])] for x in r["rows"]]))
    out.append("\n" + source("bench/results/retrieval.json"))
    return "".join(out)


def page_training(src):
    d = src.bench("distribute")
    s = d["settings"]
    intro = (f"# Training at scale\n\n## Data parallelism on CPU\n\n`{command(d['command'])}`: CoSENT, global "
             f"batch {s['batch_size']}, {s['steps']} steps after {s['warmup']} of warm-up, {s['rounds']} "
             "interleaved rounds, each run its own process; 2 \"devices\" are the same CPU cores split in two, "
             "so this shows the cost of the distributed path, not a speed-up.\n\n")
    out = [HEADER, intro, distribute_table(src),
           "\n", source("bench/results/distribute.json"), "\n## Streamed training data\n\n"]
    for name in ("streaming", "streaming_tf_noxla", "streaming_jax"):
        data = src.bench(name)
        summary = data["summary"]
        rss = {k: label for k, label in (("rss_after_imports_mib", "after imports"), ("rss_after_setup_mib",
                                                                                     "after set-up"))
               if any(k in r for r in summary.values())}  # recorded by the later runs only
        out.append(f"`{command(data['command'])}`:\n\n" + table(
            ["input", "pairs", "steps/s", "x in memory", "mean padded length", "set-up s"],
            [[kind, count(r["pairs"]), f2(r["steps_per_s"]), f2(r["ratio_to_memory"]), f1(r["mean_padded_length"]),
              count(r["setup_seconds"])] for kind, r in summary.items()]) + "\nResident memory, MiB:\n\n" + table(
            ["input", *rss.values(), "peak"],
            [[kind] + [count(r[k]) if k in r else "" for k in rss] + [count(r["peak_rss_mib"])]
             for kind, r in summary.items()]) + "\n" + source(f"bench/results/{name}.json") + "\n")
    return "".join(out)


def page_reliability(src):
    out = [HEADER, "# Reliability\n\n## Integrity checks\n\n", block_integrity(src)]
    f = src.bench("fuzz")
    out.append("\n## Property-based tests at 10,000 examples\n\n`python bench/fuzz.py` runs each property of the test "
               "suite with more examples and records the counts (`--only` reruns some targets and keeps the others).\n\n")
    out.append(table(["target", "passed", "failed", "rejected as invalid", "run"],
                     [[name, count(t["passing"]), t["failing"], count(t["invalid"]),
                       f"`{command(t['run']['command'])}` ({t['run']['finished']})"] for name, t in f["targets"].items()]))
    out.append("\n" + source("bench/results/fuzz.json"))
    d = src.bench("soak_serving")
    out.append(f"\n## Serving soak\n\n`{command(d['command'])}`: {d['clients']} clients on 127.0.0.1 for "
               f"{d['minutes']:.0f} minutes after {d['warmup_minutes']:.0f} minute of warm-up, {d['bad_share']:.0%} bad "
               f"requests (malformed JSON, oversized bodies, slow senders), server request timeout "
               f"{d['server_request_timeout_s']:g} s; {d['cpus']} CPU cores, load average "
               f"{d['load_average_end'][0]:.1f} at the end.\n\n")
    out.append(table(["good served", "good failed", "p50 ms", "p99 ms", "good requests/s", "bad requests",
                      "RSS MiB cold / after warm-up -> end", "exit code after SIGTERM"],
                     [[count(d["good_requests_served"]), d["good_requests_failed"], f1(d["p50_ms"]), f1(d["p99_ms"]),
                       f1(d["requests_per_s"]), ", ".join(f"{k}: {count(v)}" for k, v in d["bad_requests"].items()),
                       f"{count(d['rss_mib_cold'])} / {count(d['rss_mib_start'])} -> {count(d['rss_mib_end'])}",
                       d["server_exit_code"]]]))
    out.append("\n" + block_soak(src))
    return "".join(out)


def flat_rows(data, prefix=""):
    """[key, value] rows of a JSON object's scalars, nested keys joined by dots."""
    rows = []
    for key, value in data.items():
        if isinstance(value, dict):
            rows += flat_rows(value, f"{prefix}{key}.")
        elif not isinstance(value, list):
            rows.append([f"{prefix}{key}", f"{value:.4g}" if isinstance(value, float) else str(value)])
    return rows


def body_ray_encode(data):
    rows = [[label] + [f1(data[kind][k]) for k in ("wall_seconds", "encode_seconds", "lines_per_second")]
            for kind, label in (("local", "local processes"), ("ray", "Ray workers"))]
    return prose(f"{count(data['lines'])} lines encoded with {data['model']} by {data['processes']} workers in chunks "
                 f"of {data['chunk_size']} lines on {data['cpus']} CPU cores, medians of {len(data['runs']['local'])} "
                 f"repeats: Ray's rate is {f2(data['ray_vs_local_rate'])}x that of local processes.") + "\n" + table(
        ["workers", "wall s (whole command)", "encoding s", "lines/s (encoding)"], rows)


def body_questions_ict(data):
    runs = data["runs"]
    tasks = list(next(iter(runs.values()))["test"])
    out = [prose(data["what"][:1].upper() + data["what"][1:] + "."),
           "\nTest Spearman x100 of each run's kept model:\n\n",
           table(["run", "kept epoch", "training", *tasks],
                 [[name, r["best_epoch"], minutes(r["train_seconds"])] + [f2(r["test"][t]) for t in tasks]
                  for name, r in runs.items()]),
           "\nCommands:\n\n", "".join(f"- {name}: `{command(r['command'])}`\n" for name, r in runs.items())]
    for name, s in data["sets"].items():
        bm25, by_model, columns = [], {}, {}
        for r in (r for r in data["rows"] if r["set"] == name):
            if r["method"].startswith("BM25"):
                bm25.append(f"{r['method'][6:]} {f2(r['mrr@10'])}")
                continue
            kind, model = r["method"].rsplit(", ", 1)
            varying = re.fullmatch(r"(.*) \((.*weight.*)\)", kind)  # calibrated: its choice goes into the cell
            column = varying[1] if varying else kind
            columns[column] = None
            cell = f2(r["mrr@10"]) + (f" ({varying[2]})" if varying else "")
            by_model.setdefault(model_label(model), {})[column] = cell
        out.append(f"\n{name.capitalize()}: MRR@10 x100 of {count(s['test'])} test queries against "
                   f"{count(s['passages'])} passages ({count(s['dev'])} dev queries calibrate the hybrid); BM25 "
                   f"alone: {', '.join(bm25)}.\n\n")
        out.append(table(["model", *columns], [[m] + [cells.get(c, "") for c in columns]
                                               for m, cells in by_model.items()]))
    return "".join(out) + "\nRecall@1 and recall@10 of every row are in the file.\n"


BODIES = {"questions_ict": body_questions_ict, "ray_encode": body_ray_encode}  # results files read best as tables


def page_other(src, name):
    """A results file no page above covers: a table of its own (BODIES), else the table its benchmark wrote (NAME.md,
    or its ``table`` field), else its scalar fields."""
    data = src.bench(name)
    title, what = page_title(name)
    if what and not what.startswith("zoo"):  # a sentence, unless it starts with a name
        what = what[:1].upper() + what[1:]
    out = [HEADER, f"# {title}\n\n"] + ([what + ".\n\n"] if what else [])
    out += [f"`{command(c)}`\n\n" for c in recorded_commands(data)]
    written = src.root / "bench" / "results" / f"{name}.md"
    if name in BODIES:
        out.append(BODIES[name](data) + "\n")
    elif written.is_file():
        out.append(narrow(written.read_text(encoding="utf-8").strip(), NARROW.get(name, [])) + "\n\n")
    elif isinstance(data.get("table"), (str, list)):
        out.append(bench_table(data, name) + "\n")
    else:
        out.append(table(["field", "value"], flat_rows({k: v for k, v in data.items()
                                                        if k not in ("command", "versions")})) + "\n")
    out.append(source(f"bench/results/{name}.json"))
    return "".join(out)


COVERED = {"batch_independence", "bi_encoder", "distribute", "fuzz", "generation", *INFERENCE_RUNS,
           "inference_cosent_L4", "int8_ceiling", "integrity", *MATMUL_RUNS, "million", "paraphrase", "paraphrase_retrieval",
           "public_baselines", "retrieval", "serving", "soak_serving", "streaming", "streaming_jax",
           "streaming_tf_noxla"}  # rendered by the pages above


def other_results(src):
    return sorted(p.stem for p in (src.root / "bench" / "results").glob("*.json") if p.stem not in COVERED)


PAGES = {"docs/results/index.md": page_index, "docs/results/models.md": page_models, "docs/results/runs.md": page_runs,
         "docs/results/speed.md": page_speed, "docs/results/search.md": page_search,
         "docs/results/training.md": page_training, "docs/results/reliability.md": page_reliability}


# ------------------------------------------------------------------------------ driver
def block_files(root):
    root = Path(root)
    files = [root / "README.md"] + sorted((root / "docs").rglob("*.md")) + sorted((root / "tasks").glob("*.py"))
    generated = set(PAGES) | {f"docs/results/{name}.md" for name in other_results(Sources(root))}
    return [f for f in files if f.is_file() and f.relative_to(root).as_posix() not in generated]


def fill_blocks(text, src, where):
    def replace(match):
        name, arg = match.group(2), match.group(3)
        if name not in BLOCKS:
            line = text.count("\n", 0, match.start()) + 1
            raise SystemExit(f"results_pages: {where}:{line}: unknown generated block {name!r} "
                             f"(known: {', '.join(sorted(BLOCKS))})")
        body = re.sub(r"\]\((docs/[^)]+)\)", lambda m: f"]({posixpath.relpath(m[1], posixpath.dirname(where) or '.')})",
                      BLOCKS[name](src, arg))  # a block's links to docs/..., relative to the file it is in
        if where.endswith(".py"):  # inside a docstring: a line-continuing backslash must stay a character
            body = body.replace("\\\n", "\\\\\n")
        return match.group(1) + body + match.group(5)

    return BLOCK.sub(replace, text)


def expected(root):
    """{path relative to root: the text it should have}."""
    src, out = Sources(root), {}
    for page, render in PAGES.items():
        out[page] = render(src)
    for name in other_results(src):
        out.setdefault(f"docs/results/{name}.md", page_other(src, name))
    for path in block_files(root):
        rel = path.relative_to(root).as_posix()
        out[rel] = fill_blocks(path.read_text(encoding="utf-8"), src, rel)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page or block is stale")
    parser.add_argument("--root", default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    stale = []
    for rel, text in expected(root).items():
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(rel)
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(path)
    for name, draw in charts(Sources(root)).items():  # the charts the pages name, drawn from their results files
        chart = root / "docs" / "results" / name
        if not chart.is_file():
            stale.append(chart.relative_to(root).as_posix())
            if not args.check:
                prefix = name.rsplit("_", 1)[0]
                for old in chart.parent.glob(f"{prefix}_*.png"):  # this chart's older versions, not another's
                    if re.fullmatch(rf"{re.escape(prefix)}_[0-9a-f]{{10}}\.png", old.name):
                        old.unlink()
                draw(chart)
    if args.check and stale:
        print("stale (run python tools/results_pages.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    print(("stale" if args.check else "written") + f": {len(stale)} file(s)" + (": " + ", ".join(stale) if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
