"""Does a SimBERT model paraphrase? ``gen_synonyms`` on sentences of LCQMC and BQ **test** (never trained on).

For each input (``--sentences`` in all, half from each test split, distinct text_a, picked with ``--seed``):
``gen_synonyms(text, n=100, k=5)``; then over all returned candidates:

* judged paraphrase: the share an LCQMC cross-encoder (``--judge``) gives P(similar) >= 0.5;
* no repetition: the share with no character repeated 3+ times in a row;
* distinct-2: distinct character bigrams / all character bigrams (diversity);
* copies: the share equal to the input once punctuation, spaces and case are ignored;
* edits beyond particles: the share that changes at least one character beyond particles and punctuation
  (``zoo.models.simbert.content_edits``), and the share that does so and is judged a paraphrase.

Rows, all from the same samples: the returned candidates (filters on, ranked with edits beyond particles that keep
the meaning first: ``rank="edits"`` at the model's ``paraphrase_cosine``, fitted on LCQMC **valid** when the model
has none); the ranking before it (filters without the stutter check, ranked by cosine); and the raw samples
(``filters=False``, by cosine). Also writes a sample of ``--show`` inputs (picked with the seed, not by hand) with
their top 3 paraphrases. Writes JSON and a Markdown table.

    python bench/bench_paraphrase.py --model simbert-chinese-L4 --judge runs/judge_lcqmc
"""

import argparse
import os
import random
import time

import numpy as np

import zoo
from zoo.data.tasks import load_task
from zoo.logs import progress
from zoo.models.simbert import content_edits, filter_candidates, has_repeat, normalized, rank_candidates
from zoo.paths import write_json_atomic
from zoo.train.results import table, versions

HERE = os.path.dirname(os.path.abspath(__file__))


def pick_inputs(data_dir, count, seed):
    """``count`` distinct text_a, half from LCQMC test and half from BQ test, in a seeded random order."""
    rng, picked = random.Random(seed), []
    for task, n in (("LCQMC", count // 2), ("BQ", count - count // 2)):
        texts = sorted(set(load_task(task, "test", data_dir).texts_a))
        picked += [(task, t) for t in rng.sample(texts, n)]
    return picked


def metrics(inputs, candidates, judge_scores):
    """Shares (x100) over all candidates; ``candidates[i]`` are the texts returned for ``inputs[i]``."""
    flat = [(text, c) for text, cs in zip(inputs, candidates) for c in cs]
    edits = np.array([content_edits(t, c) >= 1 for t, c in flat], dtype=bool)
    bigrams = [c[j:j + 2] for _, c in flat for j in range(len(c) - 1)]
    return {
        "inputs": len(inputs), "candidates": len(flat),
        "inputs_with_no_candidate": sum(not cs for cs in candidates),
        "judged_paraphrase": 100 * float(np.mean(judge_scores >= 0.5)) if flat else 0.0,
        "no_repetition": 100 * float(np.mean([not has_repeat(c) for _, c in flat])) if flat else 0.0,
        "distinct_2": 100 * len(set(bigrams)) / max(len(bigrams), 1),
        "copies": 100 * float(np.mean([normalized(c) == normalized(t) for t, c in flat])) if flat else 0.0,
        "beyond_particles": 100 * float(np.mean(edits)) if flat else 0.0,
        "judged_beyond_particles": 100 * float(np.mean(edits & (judge_scores >= 0.5))) if flat else 0.0,
    }


def card_markdown(result):
    """The section a model card shows (tools/ship_preset.py --extra): what was measured, how, and the tables."""
    return (f"## Paraphrasing (`{result['command']}`)\n\n"
            f"`gen_synonyms(text, n={result['n']}, k={result['k']})` on {result['metrics']['returned (filters on)']['inputs']}"
            f" sentences of LCQMC and BQ **test** (never trained on); judge: the LCQMC cross-encoder `{result['judge']}` "
            "(P(similar) >= 0.5). Targets: >= 50% judged paraphrases, >= 95% without a character repeated 3+ times "
            "in a row, < 20% copies (equal to the input up to punctuation, spaces and case).\n\n"
            f"{result['table']}\n\nSample (inputs picked with a fixed seed):\n\n{result['sample_table']}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a SimBERT preset (name or folder) or run folder")
    p.add_argument("--judge", required=True, help="an LCQMC cross-encoder (preset or run folder)")
    p.add_argument("--data-dir", default=None, help="folder with LCQMC/ and BQ/ (default: ../shared/data)")
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--show", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-similarity", type=float, default=None,
                   help="cosine that keeps the meaning (default: the model's paraphrase_cosine, else fitted on "
                        "LCQMC valid)")
    p.add_argument("--min-edits", type=int, default=1, help="characters changed beyond particles and punctuation")
    p.add_argument("--out", default=os.path.join(HERE, "results", "paraphrase.json"))
    args = p.parse_args()

    model = zoo.SimBERT.from_preset(args.model)
    judge = zoo.CrossEncoder.from_preset(args.judge)
    fitted = None
    if args.min_similarity is None and model.paraphrase_cosine is None:  # the retrieval head's valid threshold
        fitted = model.fit_paraphrase_cosine(load_task("LCQMC", "valid", args.data_dir))
    threshold = args.min_similarity if args.min_similarity is not None else model.paraphrase_cosine
    picked = pick_inputs(args.data_dir, args.sentences, args.seed)
    inputs = [t for _, t in picked]
    t0 = time.time()
    returned, before, raw = [], [], []
    for i, text in enumerate(progress(inputs, "gen_synonyms", unit="sent")):
        # one sampling serves every row: all distinct samples by cosine, then filtered and ranked each row's way
        ranked = model.gen_synonyms(text, n=args.n, k=args.n, seed=args.seed + i, filters=False, rank="cosine")
        kept = filter_candidates(text, [c for c, _ in ranked])
        score = dict(ranked)
        order = rank_candidates(text, kept, np.array([score[c] for c in kept]), threshold, args.min_edits)
        returned.append([(kept[j], score[kept[j]]) for j in order[:args.k]])
        old = set(filter_candidates(text, [c for c, _ in ranked], stutter=False))
        before.append([c for c, _ in ranked if c in old][:args.k])
        raw.append([c for c, _ in ranked[:args.k]])
    seconds = time.time() - t0

    def judged(cands):
        pairs = [(t, c) for t, cs in zip(inputs, cands) for c in cs]
        return judge.score(pairs) if pairs else np.zeros(0)

    texts = [[c for c, _ in cs] for cs in returned]
    rows = {"returned (filters on)": metrics(inputs, texts, judged(texts)),
            "before: by cosine, without the stutter filter": metrics(inputs, before, judged(before)),
            "raw samples (filters=False)": metrics(inputs, raw, judged(raw))}
    show = random.Random(args.seed + 1).sample(range(len(inputs)), min(args.show, len(inputs)))
    sample = [{"task": picked[i][0], "input": inputs[i], "top3": [c for c, _ in returned[i][:3]]} for i in show]
    result = {"command": "python bench/bench_paraphrase.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None and k != "out"),
              "model": args.model, "judge": args.judge, "n": args.n, "k": args.k, "seed": args.seed,
              "seconds": seconds, "metrics": rows, "sample": sample, "versions": versions(),
              "min_similarity": threshold, "min_edits": args.min_edits,
              "paraphrase_cosine_fitted_on_lcqmc_valid": fitted,
              "targets": {"judged_paraphrase": ">= 50", "no_repetition": ">= 95", "copies": "< 20"}}
    header = ["candidates", "judged paraphrase %", "no repetition %", "distinct-2 %", "copies %",
              "edits beyond particles %", "judged and beyond particles %", "inputs", "returned", "inputs with none"]
    result["table"] = table(header, [[name, f"{m['judged_paraphrase']:.1f}", f"{m['no_repetition']:.1f}",
                                      f"{m['distinct_2']:.1f}", f"{m['copies']:.1f}", f"{m['beyond_particles']:.1f}",
                                      f"{m['judged_beyond_particles']:.1f}", m["inputs"], m["candidates"],
                                      m["inputs_with_no_candidate"]] for name, m in rows.items()])
    result["sample_table"] = table(["test split", "input", "top 3 gen_synonyms"],
                                   [[s["task"], s["input"], " / ".join(s["top3"])] for s in sample])
    result["markdown"] = card_markdown(result)
    print(result["table"] + "\n\n" + result["sample_table"])
    write_json_atomic(args.out, result)
    print(f"wrote {args.out} ({seconds:.0f} s of generation)")


if __name__ == "__main__":
    main()
