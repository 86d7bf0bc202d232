"""The bi-encoder taught by the interaction model (issue 58; DvBERT's soft labels, AugSBERT's silver pairs): the
teachers (a cross-encoder per task), the students (zoo-embed-zh-L4 trained further on the teachers' labels) and the
decision on the preset, from the runs that bench/quality_students.sh makes.

    bash bench/quality_students.sh RUNS                  # teachers, silver pairs, students (hours on 2 cores)
    python bench/quality_students.py data --silver RUNS/silver --gold 8000 --new 8000 --output RUNS/st_gold8k_new8k/data
    python bench/quality_students.py report RUNS         # writes bench/results/quality_students.json and .md

``data`` builds a student's data folder: per binary task the first GOLD gold pairs (labelled by the teacher) and the
first NEW recombined pairs of its silver file, shuffled together (seed 42), as the task's train split on one 0-5
scale; valid and test are the task's own files (linked), STS-B's train split stays its own 0-5 gold labels (its
teacher has a graded head, no P(similar)), PAWS-X is linked for transfer. ``report`` chooses a student on valid only
(the four tasks' valid mean at the kept epoch, WORDORDER second) and reports the test table beside the shipped model
and bge-small-zh-v1.5's published figures; the preset is replaced only when the chosen student beats bge-small on
at least 3 of 5 test tasks with a five-task mean above the shipped model's.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from quality_ablation import cpu_seconds, typed  # noqa: E402
from quality_continue import BGE_SMALL  # noqa: E402

from zoo.paths import write_json_atomic  # noqa: E402

TASKS = ("ATEC", "BQ", "LCQMC", "STS-B")
TEST_TASKS = (*TASKS, "PAWSX")
SILVER_TASKS = ("ATEC", "BQ", "LCQMC")  # binary tasks: their teachers give P(similar)
OUT = os.path.join(HERE, "results", "quality_students.json")
MAX_DROP = 0.3  # valid points: students this close to the best four-task mean are told apart by WORDORDER


def build_data(silver, gold, new, output, data_dir, seed=42):
    """A student's data folder under ``output`` (see the module docstring); returns {task: train pairs}."""
    from zoo.data.tasks import task_file

    counts = {}
    for task in (*TASKS, "PAWSX"):
        folder = os.path.join(output, task, "senteval_cn")
        os.makedirs(folder, exist_ok=True)
        for split in ("valid", "test"):
            link = os.path.join(folder, f"{task}.{split}.data")
            if not os.path.lexists(link):
                os.symlink(os.path.abspath(task_file(task, split, data_dir)), link)
        if task == "PAWSX":
            continue
        train = os.path.join(folder, f"{task}.train.data")
        if task not in SILVER_TASKS:
            if not os.path.lexists(train):
                os.symlink(os.path.abspath(task_file(task, "train", data_dir)), train)
            continue
        with open(os.path.join(silver, task, "silver.json"), encoding="utf-8") as f:
            record = json.load(f)
        with open(os.path.join(silver, task, "pairs.tsv"), encoding="utf-8") as f:
            lines = f.readlines()
        gold_lines = lines[:record["gold_pairs"]][:gold]
        new_lines = lines[record["gold_pairs"]:][:new]
        if len(new_lines) < new:
            raise SystemExit(f"{silver}/{task}: {len(new_lines)} recombined pairs, fewer than --new {new}")
        rows = gold_lines + new_lines
        random.Random(seed).shuffle(rows)
        with open(train + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(rows)
        os.replace(train + ".tmp", train)
        counts[task] = {"gold": len(gold_lines), "new": len(new_lines)}
    with open(os.path.join(output, "data.json"), "w", encoding="utf-8") as f:
        json.dump({"silver": silver, "gold": gold, "new": new, "seed": seed, "train": counts}, f, indent=1)
    return counts


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def shipped_scores():
    """The shipped zoo-embed-zh-L4's per-task float32 scores (data/presets/zoo-embed-zh-L4/ship.json)."""
    return read_json(os.path.join(os.path.dirname(HERE), "data", "presets", "zoo-embed-zh-L4", "ship.json"))[
        "scores"]["float32"]


def relative_paths(record, runs):
    """``record`` with the absolute paths of the runs folder (and of the folders its teachers link to) written as
    ``runs``, the folder as the command line named it."""
    prefixes = {os.path.abspath(runs), os.path.realpath(runs)}
    prefixes |= {os.path.dirname(os.path.realpath(p)) for p in glob.glob(os.path.join(runs, "teacher_*"))}
    text = json.dumps(record, ensure_ascii=False)
    for prefix in sorted(prefixes, key=len, reverse=True):
        text = text.replace(prefix + "/", runs.rstrip("/") + "/")
    return json.loads(text)


def read_teacher(runs, task):
    folder = os.path.join(runs, f"teacher_{task}")
    run = read_json(os.path.join(folder, "results.json"))
    config = run["config"]
    return {"task": task, "head": config["head"], "command": typed(run["command"]),
            "train_seconds": run["train_seconds"], "cpu_seconds": cpu_seconds(folder),
            **{k: run.get(k) for k in ("valid_spearman", "test_spearman", "valid_accuracy", "test_accuracy")}}


def read_student(folder):
    run = read_json(os.path.join(folder, "run", "results.json"))
    data = read_json(os.path.join(folder, "data", "data.json"))
    kept = next(e for e in run["epochs"] if e["epoch"] == run["best_epoch"])
    valid = {t: kept[f"valid_{t}_spearman"] for t in TASKS}
    last = run["epochs"][-1]  # the trained model, kept or not
    name = os.path.basename(os.path.normpath(folder))
    return {"student": name, "gold": data["gold"], "new": data["new"], "train": data["train"],
            "command": typed(run["command"]),
            "kept_epoch": run["best_epoch"], "valid": valid, "mean4": sum(valid.values()) / 4,
            "WORDORDER": kept["valid_WORDORDER_spearman"], "last_epoch": last["epoch"],
            "last_valid": {t: last[f"valid_{t}_spearman"] for t in TASKS},
            "last_WORDORDER": last["valid_WORDORDER_spearman"],
            "shipped_valid": {t: run["epochs"][0][f"valid_{t}_spearman"] for t in TASKS},
            "shipped_WORDORDER": run["epochs"][0]["valid_WORDORDER_spearman"],
            "valid_PAWSX": run["tasks"]["PAWSX"]["valid_spearman"],
            "test": {t: run["tasks"][t]["test_spearman"] for t in TEST_TASKS},
            "test_accuracy": {t: run["tasks"][t].get("test_accuracy") for t in TEST_TASKS},
            "train_seconds": run["train_seconds"], "cpu_seconds": cpu_seconds(os.path.join(folder, "run"))}


def choose(students):
    """The student chosen on valid only: among those within MAX_DROP of the best four-task valid mean, the best
    WORDORDER."""
    best = max(s["mean4"] for s in students)
    return max((s for s in students if s["mean4"] >= best - MAX_DROP), key=lambda s: s["WORDORDER"])


def f2(x):
    return "-" if x is None else f"{x:.2f}"


def minutes(seconds):
    return "-" if seconds is None else f"{seconds / 60:.0f} min"


def markdown(teachers, silver, students, chosen, shipped, decision):
    t = ["Test split, x100. Cross-encoder: one per task, its whole train split, from the L4 reference "
         "(chinese_L-4_H-256_A-4); bi-encoder: the shipped zoo-embed-zh-L4 (one model, at most 80,000 pairs of each "
         "task) and the chosen student. PAWS-X: transfer (the LCQMC cross-encoder; no PAWS-X train). ATEC's train "
         "split is the 38,467-pair substitute, not the original 62,477 pairs: its figures are not comparable with "
         "published ATEC numbers.", "",
         "| task | cross-encoder Spearman | cross-encoder accuracy | zoo-embed-zh-L4 Spearman | zoo-embed-zh-L4 "
         "accuracy | student Spearman | student accuracy |", "|---|---|---|---|---|---|---|"]
    for task in TEST_TASKS:
        ce = teachers.get(task, {})
        t.append(f"| {task} | {f2(ce.get('test_spearman'))} | {f2(ce.get('test_accuracy'))} | "
                 f"{f2(shipped[task]['test_spearman'])} | {f2(shipped[task].get('test_accuracy'))} | "
                 f"{f2(chosen['test'][task])} | {f2(chosen['test_accuracy'][task])} |")
    t += ["", "The teachers (valid chose nothing but the kept epoch):", "",
          "| teacher | head | training (wall) | CPU, whole run | valid Spearman | valid accuracy |",
          "|---|---|---|---|---|---|"]
    for task in TASKS:
        ce = teachers[task]
        t.append(f"| {task} | {ce['head']} | {minutes(ce['train_seconds'])} | {minutes(ce['cpu_seconds'])} | "
                 f"{f2(ce['valid_spearman'])} | {f2(ce['valid_accuracy'])} |")
    t += ["", "Silver pairs (labels 0-5: 5 x the teacher's P(similar); recombined pairs: each sampled train sentence "
          "with its BM25 nearest train sentences):", "",
          "| task | gold pairs scored | recombined pairs | teacher agrees with gold | recombined labels 0-1, ..., 4-5 "
          "| scoring (s) |", "|---|---|---|---|---|---|"]
    for task, r in silver.items():
        t.append(f"| {task} | {r['gold_pairs']:,} | {r['new_pairs']:,} | {100 * r['teacher_agrees_with_gold']:.1f}% "
                 f"| {', '.join(map(str, r['new_label_histogram']))} | {r['seconds']['scoring']:.0f} |")
    first = students[0]
    t += ["", "Students on valid (x100) after their epoch of training; the job keeps the epoch (0: the shipped model "
          "itself) with the best mean of the four tasks and WORDORDER, and the student is chosen by its kept model: "
          f"the best WORDORDER within {MAX_DROP} of the best four-task mean:", "",
          "| student: pairs per binary task (gold + new), kept epoch | ATEC | BQ | LCQMC | STS-B | 4-task mean | "
          "WORDORDER |", "|---|---|---|---|---|---|---|",
          "| shipped zoo-embed-zh-L4 (epoch 0) | " + " | ".join(f2(first["shipped_valid"][k]) for k in TASKS)
          + f" | {f2(sum(first['shipped_valid'].values()) / 4)} | {f2(first['shipped_WORDORDER'])} |"]
    for s in students:
        mark = ", chosen" if s is chosen else ""
        t.append(f"| {s['student']}: {s['gold']:,} + {s['new']:,}, kept {s['kept_epoch']}{mark} | "
                 + " | ".join(f2(s["last_valid"][k]) for k in TASKS)
                 + f" | {f2(sum(s['last_valid'].values()) / 4)} | {f2(s['last_WORDORDER'])} |")
    t += ["", "Students on test (x100, reported; nothing chosen on it), beside bge-small-zh-v1.5's published figures "
          "(public-baselines.md):", "",
          "| model | " + " | ".join(TEST_TASKS) + " | mean | above bge-small |", "|---|---|---|---|---|---|---|---|",
          "| bge-small-zh-v1.5 | " + " | ".join(f2(BGE_SMALL[k]) for k in TEST_TASKS)
          + f" | {f2(sum(BGE_SMALL.values()) / 5)} | - |"]
    rows = [("shipped zoo-embed-zh-L4", {k: shipped[k]["test_spearman"] for k in TEST_TASKS})]
    rows += [(s["student"] + ("" if s["kept_epoch"] else " (kept epoch 0: the shipped model)"), s["test"])
             for s in students]
    for name, test in rows:
        above = sum(test[k] > BGE_SMALL[k] for k in TEST_TASKS)
        t.append(f"| {name} | " + " | ".join(f2(test[k]) for k in TEST_TASKS)
                 + f" | {f2(sum(test.values()) / 5)} | {above} of 5 |")
    t += ["", "| student | PAWS-X valid | training (wall) | CPU, whole run |", "|---|---|---|---|"]
    for s in students:
        t.append(f"| {s['student']} | {f2(s['valid_PAWSX'])} | {minutes(s['train_seconds'])} | "
                 f"{minutes(s['cpu_seconds'])} |")
    return "\n".join(t + ["", decision]) + "\n"


def write_report(runs, output):
    teachers = {task: read_teacher(runs, task) for task in TASKS}
    pawsx = read_json(os.path.join(runs, "teacher_LCQMC_on_PAWSX", "results.json"))["tasks"]["PAWSX"]
    teachers["PAWSX"] = {"task": "PAWSX", "transfer_from": "LCQMC", **{k: pawsx.get(k) for k in (
        "valid_spearman", "test_spearman", "valid_accuracy", "test_accuracy")}}
    silver = {task: read_json(os.path.join(runs, "silver", task, "silver.json")) for task in SILVER_TASKS}
    students = [read_student(folder) for folder in sorted(glob.glob(os.path.join(runs, "st_*")))
                if os.path.exists(os.path.join(folder, "run", "results.json"))]
    students.sort(key=lambda s: (s["gold"], s["new"]))
    if not students:
        raise SystemExit(f"{runs}: no finished student (st_*/run/results.json)")
    chosen = choose(students)
    shipped = shipped_scores()
    shipped_mean = sum(shipped[k]["test_spearman"] for k in TEST_TASKS) / 5
    above = sum(chosen["test"][k] > BGE_SMALL[k] for k in TEST_TASKS)
    mean = sum(chosen["test"].values()) / 5
    ship = above >= 3 and mean > shipped_mean
    decision = (f"Decision: the chosen student ({chosen['student']}) beats bge-small-zh-v1.5 on {above} of 5 test "
                f"tasks with a five-task mean of {mean:.2f} against the shipped {shipped_mean:.2f}: "
                + ("it replaces zoo-embed-zh-L4." if ship else
                   "the rule (at least 3 of 5 and a higher mean) is not met, so zoo-embed-zh-L4 stays as it is."))
    teachers, silver, students = relative_paths([teachers, silver, students], runs)
    chosen = next(s for s in students if s["student"] == chosen["student"])
    table = markdown(teachers, silver, students, chosen, shipped, decision)
    write_json_atomic(output, {
        "command": f"python bench/quality_students.py report {runs}",
        "what": "cross-encoder teachers per task, silver pairs, and zoo-embed-zh-L4 students trained on them; the "
                "student chosen on valid, the preset replaced only by the stated rule",
        "teachers": teachers, "silver": silver, "students": students, "chosen": chosen["student"],
        "shipped_test": {k: shipped[k]["test_spearman"] for k in TEST_TASKS}, "shipped_test_mean": shipped_mean,
        "bge_small_zh_v1_5_test": BGE_SMALL, "chosen_above_bge_small": above, "chosen_test_mean": mean,
        "replace_preset": ship, "decision": decision, "table": table})
    with open(os.path.splitext(output)[0] + ".md", "w", encoding="utf-8") as f:
        f.write(table)
    print(table)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    data = commands.add_parser("data", help="a student's data folder from the silver files")
    data.add_argument("--silver", required=True, help="folder of bench/silver_pairs.py outputs, one per task")
    data.add_argument("--gold", type=int, required=True, help="gold pairs per binary task (teacher-labelled)")
    data.add_argument("--new", type=int, required=True, help="recombined pairs per binary task")
    data.add_argument("--data-dir", default="../shared/data", help="the tasks' own files (valid, test, STS-B)")
    data.add_argument("--output", required=True)
    report = commands.add_parser("report", help="the tables and the decision")
    report.add_argument("runs", help="the folder bench/quality_students.sh wrote")
    report.add_argument("--output", default=OUT)
    args = parser.parse_args()
    if args.command == "data":
        print(build_data(args.silver, args.gold, args.new, args.output, args.data_dir))
    else:
        write_report(args.runs, args.output)


if __name__ == "__main__":
    main()
