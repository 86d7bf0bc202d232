"""Quality against speed, for choosing a Chinese sentence encoder: the five-task test Spearman (mean of ATEC, BQ,
LCQMC, PAWS-X, STS-B) beside sentences/s on this CPU, for zoo's shipped encoders and the architectures of public
ones.

    python bench/bench_models.py                       # 3 rounds of 1,024 sentences (minutes on 2 cores)
    python bench/bench_models.py --rounds 1 --sentences 128

Speed: the first --sentences LCQMC test sentences at batch 64 (maxlen 64) through zoo's fastest path
(``encode(engine="fastest")``), after one warm-up pass; --rounds rounds, each timing every model once in a rotated
order; the median sentences/s. Public models cannot be downloaded here: their architectures are timed with random
weights of the published shape (speed does not depend on the weights), beside their published quality
(bench/results/public_baselines.json). zoo's quality is its presets' (data/presets/NAME/ship.json). With
``--students RUNS`` (bench/quality_students.sh's folder, default runs/students, when it and
bench/results/quality_students.json are there) the chart also shows models trained here but not shipped: the student
chosen on valid (sentences/s) and the per-task cross-encoders (pairs/s: one pair is one model call, where a
bi-encoder encodes two sentences; their quality is the four teachers' test scores, PAWS-X by the LCQMC one). Writes
bench/results/model_choice.json and .md (``markdown``: a section for the model card, ``tools/ship_preset.py
--extra``); the manual draws the chart.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

TASKS = ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B")
SHIPPED = ("zoo-embed-zh-L4", "zoo-simbert-zh-L4")
SHAPES = {  # an architecture's name: ((layers, hidden, heads, intermediate), the public models of that shape)
    "L4/H512/I2048": ((4, 512, 8, 2048), ("BAAI/bge-small-zh-v1.5",)),
    "L12/H768/I3072": ((12, 768, 12, 3072), ("BAAI/bge-base-zh-v1.5", "moka-ai/m3e-base",
                                             "shibing624/text2vec-base-chinese (MacBERT + CoSENT)",
                                             "BERT-base + CoSENT, one model per task")),
}
MAXLEN, BATCH = 64, 64
# what a chooser reads beside quality and speed: licence and intended use, from each model's own card (zoo's: the
# preset's data terms, data/presets/NAME/README.md); public models cannot be downloaded here, so these are copied,
# with where from
CARDS = {
    "zoo-embed-zh-L4": ("weights: research use only (trained on LCQMC and BQ)",
                        "general Chinese sentence similarity and search", "data/presets/zoo-embed-zh-L4/README.md"),
    "zoo-simbert-zh-L4": ("weights: research use only (trained on LCQMC)",
                          "paraphrase generation, and retrieval with the same model",
                          "data/presets/zoo-simbert-zh-L4/README.md"),
    "BAAI/bge-small-zh-v1.5": ("MIT", "general Chinese embeddings: similarity, retrieval with a query instruction",
                               "huggingface.co/BAAI/bge-small-zh-v1.5"),
    "BAAI/bge-base-zh-v1.5": ("MIT", "general Chinese embeddings: similarity, retrieval with a query instruction",
                              "huggingface.co/BAAI/bge-base-zh-v1.5"),
    "moka-ai/m3e-base": ("research use only (its card: trained on non-commercial data)",
                         "Chinese similarity and retrieval", "huggingface.co/moka-ai/m3e-base"),
    "shibing624/text2vec-base-chinese (MacBERT + CoSENT)": ("Apache-2.0", "Chinese sentence similarity",
                                                            "huggingface.co/shibing624/text2vec-base-chinese"),
    "BERT-base + CoSENT, one model per task": ("no weights published (a recipe on Google's BERT, Apache-2.0)",
                                               "a model per task, trained on its own train split",
                                               "kexue.fm/archives/8847"),
}


def sentences(n):
    return [a for a, _ in pairs(n)]


def random_encoder(shape, tokenizer, seed=0):
    """A SentenceEncoder of ``shape`` with random weights ([CLS] pooling), on bert-base-chinese's vocabulary."""
    import keras

    import zoo

    layers, hidden, heads, intermediate = shape
    keras.utils.set_random_seed(seed)
    backbone = zoo.BertBackbone(tokenizer.vocab_size, layers, heads, hidden, intermediate, max_sequence_length=512,
                                dropout=0.0)
    return zoo.SentenceEncoder(backbone, tokenizer, pooling="cls", maxlen=MAXLEN)


def pairs(n):
    """The first ``n`` LCQMC test pairs (text_a, text_b): the cross-encoders' input; ``sentences`` takes text_a."""
    with gzip.open(os.path.join(ROOT, "data", "LCQMC", "LCQMC.test.data.gz"), "rt", encoding="utf-8") as f:
        rows = [line.split("\t")[:2] for line in f]
    return [tuple(r) for r in rows[:n]]


def trained_here(runs):
    """{name: (model, maxlen, kind, quality record)} of the chosen student and the LCQMC cross-encoder (the
    teachers' architecture), from bench/results/quality_students.json and the runs folder; {} without them."""
    import zoo

    path = os.path.join(HERE, "results", "quality_students.json")
    if not runs or not os.path.exists(path) or not os.path.isdir(runs):
        return {}
    with open(path, encoding="utf-8") as f:
        students = json.load(f)
    chosen = next(s for s in students["students"] if s["student"] == students["chosen"])
    teachers = students["teachers"]
    student = zoo.from_preset(os.path.join(runs, chosen["student"], "run", "model"))
    cross = zoo.CrossEncoder.from_preset(os.path.join(runs, "teacher_LCQMC", "model"), maxlen=MAXLEN)
    return {
        f"student {chosen['student']} (not shipped)": (student, student.maxlen, "zoo student (not shipped)",
                                                       {"test_spearman": {t: round(chosen["test"][t], 2)
                                                                          for t in TASKS}}),
        "cross-encoder per task (L4, not shipped)": (cross, MAXLEN, "zoo cross-encoders (pairs/s)",
                                                     {"test_spearman": {t: round(teachers[t]["test_spearman"], 2)
                                                                        for t in TASKS}})}


def run_once(model, texts, pair_list, maxlen):
    if hasattr(model, "encode"):
        model.encode(texts, batch_size=BATCH, maxlen=maxlen, engine="fastest", show_progress_bar=False)
    else:
        model.score(pair_list, batch_size=BATCH, engine="fastest", show_progress_bar=False)


def card_markdown(rows):
    """The model card's section: every measured model's five-task mean and speed, and where the chart is."""
    lines = ["## Beside other Chinese encoders", "",
             "Five-task test Spearman mean against speed on 2 CPU cores (batch 64, engine fastest; public models: "
             "published quality, speed of their architecture with random weights). The chart: the manual's "
             "pages Pretrained models and Choosing a loss and a model (docs/pretrained-models.md, docs/choosing.md); "
             "from `bench/results/model_choice.json`.", "",
             "| model | 5-task mean | per second |", "|---|---|---|"]
    lines += [f"| {r['model']} | {r['mean']:.2f} | {r['sentences_per_second']:,.0f} "
              f"{'pairs' if 'pairs' in r['kind'] else 'sentences'} |" for r in rows]
    return "\n".join(lines) + "\n"


def mean_quality(scores):
    return round(statistics.mean(scores[t] for t in TASKS), 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=1024)
    parser.add_argument("--output", default=os.path.join(HERE, "results", "model_choice"))
    parser.add_argument("--students", default=os.path.join(ROOT, "runs", "students"),
                        help="bench/quality_students.sh's runs folder ('' to leave its models out)")
    args = parser.parse_args()

    import zoo
    from zoo.hardware import cpu_kind, cpu_model, usable_cpus

    texts, pair_list = sentences(args.sentences), pairs(args.sentences)
    shipped = {name: zoo.from_preset(name) for name in SHIPPED}
    models = {name: (model, model.maxlen) for name, model in shipped.items()}
    extra = trained_here(args.students)
    models.update({name: (model, maxlen) for name, (model, maxlen, _, _) in extra.items()})
    tokenizer = shipped[SHIPPED[0]].tokenizer
    models.update({f"{name}, random weights": (random_encoder(shape, tokenizer), MAXLEN)
                   for name, (shape, _) in SHAPES.items()})
    engines, seconds = {}, {name: [] for name in models}
    for name, (model, maxlen) in models.items():  # warm-up: graphs written, fastest's choice measured
        run_once(model, texts, pair_list, maxlen)
        engines[name] = model.vector_source("fastest") if hasattr(model, "vector_source") else None
    names = list(models)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            model, maxlen = models[name]
            t0 = time.perf_counter()
            run_once(model, texts, pair_list, maxlen)
            seconds[name].append(time.perf_counter() - t0)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {len(texts) / seconds[n][-1]:.0f}/s" for n in names),
              flush=True)
    with open(os.path.join(HERE, "results", "public_baselines.json"), encoding="utf-8") as f:
        public = {m["model"]: m for m in json.load(f)["models"]}
    rows = []
    for name in SHIPPED:
        with open(os.path.join(ROOT, "data", "presets", name, "ship.json"), encoding="utf-8") as f:
            ship = json.load(f)
        scores = {t: round(ship["scores"]["float32"][t]["test_spearman"], 2) for t in TASKS}
        model = shipped[name]
        rows.append({"model": name, "kind": "zoo preset", "timed": name, "test_spearman": scores,
                     "mean": mean_quality(scores), "parameters": model.count_params(), "dim": model.dim,
                     "max_tokens": model.max_input_tokens, "maxlen": model.maxlen,
                     "size_bytes": ship["sizes_bytes"][ship["weights_dtype"]],
                     "size_is": f"the shipped {ship['weights_dtype']} weights"})
    for shape_name, (shape, public_models) in SHAPES.items():
        timed = f"{shape_name}, random weights"
        for model in public_models:
            scores = public[model]["test_spearman"]
            encoder = models[timed][0]
            rows.append({"model": model, "kind": "public (published quality)", "timed": timed,
                         "test_spearman": scores, "mean": mean_quality(scores), "source": public[model]["source"],
                         "parameters": encoder.count_params(), "dim": encoder.dim,
                         "max_tokens": encoder.backbone.max_sequence_length, "maxlen": MAXLEN,
                         "size_bytes": 4 * encoder.count_params(), "size_is": "float32 weights, 4 bytes a parameter"})
    for row in rows:
        row["licence"], row["use"], row["card"] = CARDS[row["model"]]
    not_shipped = [{"model": name, "kind": kind, "timed": name, "test_spearman": quality["test_spearman"],
                    "mean": mean_quality(quality["test_spearman"]), "parameters": model.count_params(),
                    "maxlen": maxlen, "source": "bench/results/quality_students.json"}
                   for name, (model, maxlen, kind, quality) in extra.items()]
    speed = {name: round(len(texts) / statistics.median(s), 1) for name, s in seconds.items()}
    for row in rows + not_shipped:
        row["sentences_per_second"] = speed[row["timed"]]  # pairs/s for a cross-encoder (one pair a text)
    record = {"command": " ".join(["python", "bench/bench_models.py", *sys.argv[1:]]),
              "machine": {"cpu": cpu_model(), "kind": cpu_kind(), "cpus": usable_cpus()},
              "setting": {"sentences": len(texts), "batch_size": BATCH, "maxlen": MAXLEN, "rounds": args.rounds,
                          "engine": "fastest"},
              "engines": engines, "sentences_per_second": speed, "rows": rows, "not_shipped": not_shipped,
              "note": "public models are timed with random weights of their published shape; their quality is the "
                      "published figure (bench/results/public_baselines.json)"}
    record["markdown"] = card_markdown(rows + not_shipped)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    lines = [f"Five-task test Spearman against sentences/s at batch {BATCH} (maxlen {MAXLEN}, engine fastest) on "
             f"{cpu_model()} ({cpu_kind()}, {usable_cpus()} CPUs), median of {args.rounds} rounds; "
             f"`{record['command']}`", "",
             "| model | timed as | parameters | mean | " + " | ".join(TASKS) + " | sentences/s |",
             "|---|---|---|---|" + "---|" * len(TASKS) + "---|"]
    lines += [f"| {r['model']} | {r['timed']} | {r['parameters'] / 1e6:.1f} M | {r['mean']:.2f} | "
              + " | ".join(f"{r['test_spearman'][t]:.2f}" for t in TASKS) + f" | {r['sentences_per_second']:.0f} |"
              for r in rows + not_shipped]
    if not_shipped:
        lines += ["", "Not shipped (trained here, issue 58): the student and the per-task cross-encoders; a "
                  "cross-encoder's figure is pairs/s (one call per pair; a bi-encoder encodes two sentences a pair)."]
    record["table"] = lines  # the manual shows it (tools/results_pages.py: bench-table)
    with open(args.output + ".json", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
    with open(args.output + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
