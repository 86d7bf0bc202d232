"""Ship a training run as a preset of ``data/presets``: weights stored as float16 when that costs nothing measurable,
the five-task table, and a model card written from the run's own records.

    python tools/ship_preset.py --run runs/general_L4 --name zoo-embed-zh-L4 --data-dir ../shared/data \
        --weaknesses "..."

Loads the run's best model with the loading verb (``SentenceEncoder.from_preset`` / ``SimBERT.from_preset``),
saves it as float32 and as float16, and scores both on the valid and test splits of ATEC, BQ, LCQMC, PAWSX and
STS-B (Spearman x100 of the cosine). The float16 copy ships unless a valid Spearman moves by more than
``--max-drop``; test scores are reported, never used for the choice. Writes ``data/presets/NAME/`` (weights,
tokenizer, ``zoo_config.json``), its ``README.md`` (model card), ``ship.json`` (every figure of the card) and
``onnx/``: the fused fp32 ONNX graph the light runtime encodes with (``--graphs-only`` writes it again).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import zoo
from zoo.data.tasks import load_splits
from zoo.evaluation import evaluate_task
from zoo.inference.graphs import write_preset_graphs
from zoo.paths import PRESETS_DIR, write_json_atomic
from zoo.train.results import table, versions

TASKS = ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B")
TERMS = {"LCQMC": "research only (HIT; handed out on application, redistribution terms not public)",
         "BQ": "research only (HIT / WeBank; handed out on application)",
         "ATEC": "none stated (the substitute train built in ../shared/data)",
         "STS-B": "none stated (CNSD, a machine translation of STS-B)"}


def folder_size(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def read_run(folder, command=None):
    """The run's results.json; for a run stopped early, what its training state records (seconds, history, best
    epoch), with the settings read from ``command``'s flags."""
    results = os.path.join(folder, "results.json")
    if os.path.exists(results):
        return json.load(open(results, encoding="utf-8"))
    if not command:
        raise SystemExit(f"{folder} has no results.json (stopped early?): give the training --command")
    state = json.load(open(os.path.join(folder, "checkpoint", "state.json"), encoding="utf-8"))
    progress = state.get("progress", state)
    words = command.split()
    config = {w[2:].replace("-", "_"): v for w, v in zip(words, words[1:] + [""]) if w.startswith("--")}
    return {"command": command, "config": config, "train_seconds": progress["train_seconds"],
            "best_epoch": (progress.get("best") or {}).get("epoch"), "epochs": progress.get("history"),
            "stopped_at": {"epoch": progress["epoch"] + 1, "step": progress["step"]}}



def typed_command(recorded):
    """A recorded training argv as a user types it today: ``python tasks/`` before a bare recipe name, and the
    flags renamed since (``--task`` -> ``--tasks``, ``--from`` -> ``--checkpoint``, ``--out`` -> ``--output``)."""
    words = recorded.split(" ")
    if words[0].endswith(".py") and "/" not in words[0]:
        words = ["python", f"tasks/{words[0]}"] + words[1:]
    renamed = {"--task": "--tasks", "--from": "--checkpoint", "--out": "--output"}
    return " ".join(renamed.get(w, w) for w in words)


def write_card(folder, record, extra_json=None, weaknesses=""):
    """FOLDER/README.md, the model card, from the figures of ``record`` (ship.json)."""
    config, dtype, sizes = record["config"], record["weights_dtype"], record["sizes_bytes"]
    scores, pairs, stop = record["scores"], record["train_pairs"], record.get("stopped_at")
    tasks = config.get("tasks") or config.get("task") or ""  # a list (this release), or "A,B" (older runs)
    trained = [t.strip() for t in (tasks if isinstance(tasks, list) else str(tasks).split(",")) if t.strip()]
    rows = [[t if t in trained else f"{t} (not trained on)", scores[dtype][t]["valid_spearman"],
             scores[dtype][t]["test_spearman"], scores["float32"][t]["test_spearman"]] for t in TASKS]
    score_table = table(["task", f"valid Spearman ({dtype})", f"test Spearman ({dtype})", "test Spearman (float32)"],
                        rows)
    terms = "; ".join(f"{t}: {TERMS[t]}" for t in trained if t in TERMS) or "see the data's README"
    extra = json.load(open(extra_json, encoding="utf-8")).get("markdown", "") if extra_json else ""
    stopped = f" planned, stopped in epoch {stop['epoch']} at step {stop['step']}" if stop else ""
    objective = config.get("objective") or "SimBERT: joint retrieval (in-batch softmax) + UniLM generation loss"
    objective += f", pooling {config['pooling']}" if config.get("pooling") else ""
    objective += f", batching {config['batching']} (each batch from one task)" if config.get("batching") else ""
    data = ", ".join(f"{k} {v:,} pairs" for k, v in pairs.items()) or ", ".join(trained)
    card = f"""# {record['name']}

A zoo preset: `{record['class']}.from_preset("{record['name']}")` (shipped in `data/presets`, and in the wheel).

| | |
|---|---|
| base checkpoint | `{config.get('checkpoint')}` |
| training data | train splits only: {data} |
| objective | {objective} |
| schedule | {config.get('epochs')} epoch(s){stopped}, batch {config.get('batch_size')}, lr {config.get('lr')}, maxlen {config.get('maxlen')}; shipped: the best epoch by valid, {record['best_epoch']} |
| wall time | {(record['train_seconds'] or 0) / 60:.0f} min of training (CPU, 2 cores, shared with other work) |
| weights | {dtype}: {sizes[dtype] / 2**20:.1f} MiB (float32: {sizes['float32'] / 2**20:.1f} MiB); float16 moves no valid Spearman by more than {record['float16_max_valid_change']:.3f} |
| data terms | {terms}: use this model for research only |

Reproduce the training: `{typed_command(record['command_trained'])}`

Reproduce the scores and this card: `{record['command']}`{f"; then `{record['card_command']}`" if record.get('card_command') else ''}

## Scores (Spearman x100 of the cosine; PAWSX is transfer when not trained on)

{score_table}

{extra}

## Known weaknesses

{weaknesses or 'None recorded.'}
"""
    zoo.paths.write_text_atomic(os.path.join(folder, "README.md"), card)
    print(card)


def description(args, target):
    """``--description``, else the one the preset already shipped has (ValueError for a new preset without one)."""
    if args.description:
        return args.description
    if os.path.exists(os.path.join(target, "zoo_config.json")):
        shipped = zoo.presets.read_preset_config(target).get("metadata", {}).get("description")
        if shipped:
            return shipped
    raise ValueError(f"{args.name}: a new preset needs --description (one line, listed by Class.presets)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default=None, help="a training run folder (RUN/model, RUN/results.json)")
    p.add_argument("--name", required=True, help="the preset's name in data/presets")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--max-drop", type=float, default=0.05, help="largest valid Spearman change float16 may cause")
    p.add_argument("--description", default=None, help="one line for Class.presets (default: the description the "
                   "preset already shipped has)")
    p.add_argument("--weaknesses", default="", help="known weaknesses, for the model card")
    p.add_argument("--command", default=None, help="the training command, for a run without results.json (a run "
                                                   "stopped before its last epoch: its best model so far ships)")
    p.add_argument("--card-only", action="store_true", help="rewrite the card of an already shipped preset from its "
                                                            "ship.json (with --extra / --weaknesses)")
    p.add_argument("--graphs-only", action="store_true", help="write (again) the fused fp32 ONNX graph an already "
                                                              "shipped preset carries in NAME/onnx/ (the light runtime)")
    p.add_argument("--extra", default=None, help="a JSON file whose 'markdown' goes into the card (e.g. a "
                                                 "paraphrase benchmark's tables)")
    args = p.parse_args()

    target = os.path.join(PRESETS_DIR, args.name)
    if args.graphs_only:
        print(f"wrote {write_preset_graphs(zoo.from_preset(target), target)}")
        return
    if args.card_only:  # the figures stay; the card is written again (e.g. with a new --extra)
        record = json.load(open(os.path.join(target, "ship.json"), encoding="utf-8"))
        record["card_command"] = "python tools/ship_preset.py " + " ".join(a if " " not in a else repr(a)
                                                                          for a in sys.argv[1:])
        write_json_atomic(os.path.join(target, "ship.json"), record)
        write_card(target, record, args.extra, args.weaknesses)
        return
    run = read_run(args.run, args.command)
    kind = zoo.presets.preset_class_name(os.path.join(args.run, "model"))
    cls = zoo.SimBERT if kind == "SimBERT" else zoo.SentenceEncoder
    model = cls.from_preset(args.run)
    data = {t: load_splits(t, args.data_dir, splits=("valid", "test")) for t in TASKS}
    work = tempfile.mkdtemp()
    scores, sizes = {}, {}
    for dtype in ("float32", "float16"):
        path = os.path.join(work, dtype)
        model.save_to_preset(path, metadata={"source_run": os.path.abspath(args.run),
                                             "description": description(args, target)}, weights_dtype=dtype)
        loaded = cls.from_preset(path)
        sizes[dtype] = folder_size(path)
        scores[dtype] = {t: evaluate_task(loaded, data[t]) for t in TASKS}
    drop = max(abs(scores["float16"][t]["valid_spearman"] - scores["float32"][t]["valid_spearman"]) for t in TASKS)
    dtype = "float16" if drop <= args.max_drop else "float32"
    tmp = target + ".new"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(os.path.join(work, dtype), tmp)

    config = run.get("config", {})
    record = {"name": args.name, "class": cls.__name__, "weights_dtype": dtype, "run": os.path.abspath(args.run),
              "command_trained": run.get("command"), "train_seconds": run.get("train_seconds"),
              "best_epoch": run.get("best_epoch"), "stopped_at": run.get("stopped_at"),
              "train_pairs": {k: v["pairs"] for k, v in run.get("data_files", {}).items() if k.endswith("train")},
              "config": config, "float16_max_valid_change": drop, "sizes_bytes": sizes, "scores": scores,
              "versions": versions(), "command": "python tools/ship_preset.py " + " ".join(
                  a if " " not in a else repr(a) for a in sys.argv[1:])}
    write_json_atomic(os.path.join(tmp, "ship.json"), record)
    write_card(tmp, record, args.extra, args.weaknesses)
    write_preset_graphs(cls.from_preset(tmp), tmp)
    zoo.paths.replace_dir(tmp, target)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {target} ({dtype}, {sizes[dtype] / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
