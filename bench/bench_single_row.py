"""One text at a time through the int8 graph sessions: ONNX Runtime (``int8``) against OpenVINO
(``openvino-int8``), with each text's own length, with one repeated shape, and with lengths padded to a multiple of
8 or 16 tokens: where OpenVINO's single-row time goes (``zoo.inference.sessions.pad_length``).

    python bench/bench_single_row.py --model zoo-embed-zh-L4

The first ``--texts`` distinct LCQMC test texts, 20 warm-up calls, then ``--rounds`` interleaved rounds; reported:
the median milliseconds per call of the median round, and the number of distinct input shapes. Writes
OUTPUT.json and OUTPUT.md.
"""

import argparse
import itertools
import os
import statistics
import time

import numpy as np

import zoo
from zoo.data.pair_files import iter_pairs
from zoo.data.tasks import task_file
from zoo.hardware import cpu_kind, cpu_model, usable_cpus
from zoo.inference.graphs import onnx_session
from zoo.paths import write_json_atomic, write_text_atomic
from zoo.train.results import table

HERE = os.path.dirname(os.path.abspath(__file__))
PRECISIONS = ("int8", "openvino-int8")
LAYOUTS = (("own length", 1, False), ("one shape", 1, True), ("multiple of 8", 8, False), ("multiple of 16", 16, False))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="zoo-embed-zh-L4")
    parser.add_argument("--data-dir", default=os.path.join(HERE, "..", "..", "shared", "data"))
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default=os.path.join(HERE, "results", "single_row"))
    args = parser.parse_args()
    encoder = zoo.SentenceEncoder.from_preset(args.model)
    pairs = iter_pairs(task_file("LCQMC", "test", args.data_dir))
    texts = list(dict.fromkeys(t for a, b, _ in itertools.islice(pairs, args.texts) for t in (a, b)))[:args.texts]
    tok = encoder.tokenizer
    rows = [tok.assemble(p, None, encoder.maxlen) for p in tok.piece_ids(texts)]
    sessions = {p: onnx_session(encoder, p) for p in PRECISIONS}

    def feeds(row, multiple):
        batch = tok.pad([row])
        width = -(-batch["token_ids"].shape[1] // multiple) * multiple
        return {k: np.pad(np.asarray(v, "int32"), ((0, 0), (0, width - v.shape[1]))) for k, v in batch.items()}

    cases = {(label, p): [feeds(rows[0] if same else r, multiple) for r in rows]
             for label, multiple, same in LAYOUTS for p in PRECISIONS}
    for (_, p), calls in cases.items():
        for f in calls[:20]:
            sessions[p](f)
    medians = {key: [] for key in cases}
    for r in range(args.rounds):
        keys = list(cases)
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            seconds = []
            for f in cases[key]:
                start = time.perf_counter()
                sessions[key[1]](f)
                seconds.append(time.perf_counter() - start)
            medians[key].append(1000 * statistics.median(seconds))
    results = [{"inputs": label, "precision": p, "ms_per_text": round(statistics.median(medians[(label, p)]), 3),
                "shapes": len({f["token_ids"].shape for f in cases[(label, p)]})} for label, _, _ in LAYOUTS
               for p in PRECISIONS]
    machine = f"{cpu_model()} ({cpu_kind()}), {usable_cpus()} cpus"
    record = {"model": args.model, "texts": len(texts), "rounds": args.rounds, "machine": machine,
              "command": "python bench/bench_single_row.py " + f"--model {args.model} --texts {args.texts} "
                                                              f"--rounds {args.rounds}", "results": results}
    write_json_atomic(args.output + ".json", record)
    rows_md = [[r["inputs"], r["precision"], f"{r['ms_per_text']:.3f}", str(r["shapes"])] for r in results]
    text = (f"One text at a time, {len(texts)} LCQMC test texts, {args.model}, {machine}; medians of "
            f"{args.rounds} interleaved rounds.\n\n" + table(["inputs", "precision", "ms per text", "shapes"], rows_md)
            + f"\n\ncommand: `{record['command']}`\n")
    write_text_atomic(args.output + ".md", text)
    print(text)


if __name__ == "__main__":
    main()
