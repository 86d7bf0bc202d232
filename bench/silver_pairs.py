"""Silver pairs for a bi-encoder student (issue 58; AugSBERT, Thakur et al. 2021; DvBERT's soft labels): a trained
cross-encoder (softmax head) scores a task's gold train pairs and new pairs made by recombining the same train
split's sentences (each sampled sentence with its BM25 nearest neighbours among the train sentences only: nothing
from valid or test), written as one pair file with graded labels.

    python bench/silver_pairs.py --task BQ --teacher runs/teacher_BQ/model --data-dir ../shared/data \
        --sentences 20000 --neighbours 2 --output runs/silver/BQ

The label scale is STS-B's, 0-5: 5 x the teacher's P(similar) for every pair (``--gold labels`` keeps the gold
pairs' own 0/1 labels as 0 and 5 instead). zoo reads a file of 0-5 labels as graded and divides by 5 where a loss
wants 0-1 (cosine_mse), so gold and silver stay on one scale. Writes OUTPUT/pairs.tsv (text_a, text_b, label),
OUTPUT/silver.json and silver.md (counts, label histogram, seconds), and the run resumes nothing: it is minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

SCALE = 5.0  # labels are written on STS-B's 0-5 scale


def recombined(sentences, gold, count, neighbours, seed):
    """Pairs of train sentences that are not gold pairs: ``count`` sentences sampled (``seed``) with their
    ``neighbours`` BM25 nearest other sentences each, skipping itself, its gold partners and pairs already taken."""
    from zoo.retrieval.lexical import BM25

    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(sentences), size=min(count, len(sentences)), replace=False)
    index = BM25(sentences)
    pairs, seen = [], set(gold)
    # a few more hits than needed: the sentence itself and its gold partners come first and are skipped
    hits = index.top([sentences[i] for i in chosen], neighbours + 4, hidden=())
    for i, row in zip(chosen.tolist(), hits):
        taken = 0
        for j, _ in row:
            key = (sentences[i], sentences[j])
            if taken == neighbours or j == i or key in seen or key[::-1] in seen:
                continue
            seen.add(key)
            pairs.append(key)
            taken += 1
    return pairs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", required=True, help="the task whose train split is read (LCQMC, BQ, ATEC ...)")
    parser.add_argument("--teacher", required=True, help="a trained cross-encoder with a softmax head")
    parser.add_argument("--data-dir", default=None, help="the tasks' folder (default: zoo's)")
    parser.add_argument("--sentences", type=int, default=20000, help="train sentences sampled for new pairs")
    parser.add_argument("--neighbours", type=int, default=2, help="BM25 neighbours paired with each sampled one")
    parser.add_argument("--gold", choices=("teacher", "labels"), default="teacher",
                        help="the gold pairs' labels: the teacher's scores (DvBERT) or their own 0/1 (AugSBERT)")
    parser.add_argument("--limit-train", type=int, default=None, help="read the first N gold pairs only")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    import zoo
    from zoo.data import load_task
    from zoo.hardware import cpu_kind, cpu_model, usable_cpus

    t0 = time.time()
    train = load_task(args.task, "train", args.data_dir)
    n = len(train) if args.limit_train is None else min(args.limit_train, len(train))
    gold = list(zip(train.texts_a[:n], train.texts_b[:n]))
    if train.label_kind != "binary":
        raise SystemExit(f"{args.task}: graded gold labels; this script writes silver labels for binary tasks")
    sentences = list(dict.fromkeys(t for pair in gold for t in pair))
    new = recombined(sentences, gold, args.sentences, args.neighbours, args.seed)
    teacher = zoo.CrossEncoder.from_preset(args.teacher)
    if teacher.head_spec().head != "softmax":
        raise SystemExit(f"{args.teacher}: a {teacher.head_spec().head} head; silver labels need P(similar)")
    t1 = time.time()
    new_scores = teacher.score(new, show_progress_bar=True)
    gold_scores = teacher.score(gold, show_progress_bar=True) if args.gold == "teacher" else \
        np.asarray(train.labels[:n], "float32")
    t2 = time.time()
    os.makedirs(args.output, exist_ok=True)
    path = os.path.join(args.output, "pairs.tsv")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for (a, b), p in zip(gold + new, np.concatenate([gold_scores, new_scores])):
            f.write(f"{a}\t{b}\t{SCALE * float(p):.4f}\n")
    os.replace(path + ".tmp", path)
    agree = float(np.mean((gold_scores >= 0.5) == (np.asarray(train.labels[:n]) >= 0.5))) if args.gold == "teacher" \
        else 1.0
    record = {"command": " ".join(["python", "bench/silver_pairs.py", *sys.argv[1:]]), "task": args.task,
              "teacher": args.teacher, "label_scale": "0-5 (5 x P(similar))", "gold_labels": args.gold,
              "gold_pairs": len(gold), "new_pairs": len(new), "sentences": len(sentences),
              "teacher_agrees_with_gold": agree,
              "new_label_histogram": np.histogram(SCALE * new_scores, bins=5, range=(0, SCALE))[0].tolist(),
              "seconds": {"pairs": round(t1 - t0, 1), "scoring": round(t2 - t1, 1)},
              "machine": {"cpu": cpu_model(), "kind": cpu_kind(), "cpus": usable_cpus()}, "file": path}
    with open(os.path.join(args.output, "silver.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    table = ["| task | gold pairs | new pairs | teacher agrees with gold | new labels 0-1, 1-2, ..., 4-5 | scoring s |",
             "|---|---|---|---|---|---|",
             f"| {args.task} | {len(gold):,} | {len(new):,} | {100 * agree:.1f}% | "
             f"{', '.join(map(str, record['new_label_histogram']))} | {record['seconds']['scoring']:.0f} |"]
    with open(os.path.join(args.output, "silver.md"), "w", encoding="utf-8") as f:
        f.write(f"`{record['command']}` on {cpu_model()}\n\n" + "\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
