"""What ``precision="auto"`` and ``"fastest"`` run (the rules: ``zoo.inference``'s docstring). auto reads the
parity recorded with the model's fused graph; fastest measures which precision is fastest for a model on this
machine among those whose quality loss was measured small, recorded in zoo's cache."""

from __future__ import annotations

import hashlib
import itertools
import os
import platform
import time

import numpy as np

from ..data.pair_files import iter_pairs
from ..data.tasks import task_file
from ..hardware import accelerator, cpu_model, instruction_sets, usable_cpus
from ..logs import log
from ..paths import DATA_DIR, cache_dir, read_json_file, sha256_of, write_json_atomic
from .graphs import ONNX_PRECISIONS, PARITY_TEXTS, PARITY_TOLERANCE, cached_graphs, graph_path, onnx_session
from .openvino_engine import OPENVINO_INT8, openvino_available
from .sessions import require_onnx

# fastest's bounds. MAX_SPEARMAN_LOSS: the largest Spearman loss (x100) accepted from a faster path, the bound the
# inference benchmark holds every system to (bench/bench_inference.py). PROBE_PAIRS: 1,000 probe texts.
MAX_SPEARMAN_LOSS = 0.3
PROBE_PAIRS = 500
PROBE_ROUNDS = 3  # timed rounds of the probe workload per candidate, interleaved
PROBE_TIMED_ROWS = 320
PROBE_SINGLE_ROWS = 64  # of those, also run one at a time in each round (reported; bulk work decides)
DECISION_RULE = "bulk-batches-of-64"  # in the record's cache key: records decided by another rule are measured anew


def decide(model, mode="auto"):
    """(precision, reason) of ``mode`` ("auto" or "fastest") for ``model``: Keras fp32 on an accelerator or
    without a fused graph; else auto's onnx-fp32 when the graph's recorded parity holds, or fastest's measured
    choice for this machine (``measure``, run once and recorded in zoo's cache)."""
    device = accelerator()
    if device:
        return "fp32", f"Keras on the {device}"
    try:
        require_onnx()
        from .fused_onnx import describe

        describe(model)
    except (ImportError, TypeError) as e:
        return "fp32", str(e)
    _, info = cached_graphs(model)
    diff = info.get("parity_max_abs_diff")
    if diff is None or not diff <= PARITY_TOLERANCE:
        return "fp32", f"the fused graph differs from Keras by {diff} (> {PARITY_TOLERANCE:g}) on probe texts"
    if mode == "auto":
        return "onnx-fp32", f"lossless: the fused fp32 graph, {diff:.1g} from Keras on probe texts"
    machine = machine_id()
    path = record_path(model, machine)
    record = None
    if os.path.exists(path):
        try:
            record = read_json_file(path, "precision fastest's measurement")
        except Exception:  # noqa: BLE001 -- a damaged record is measured again
            record = None
    if record is None:
        record = dict(measure(model), machine=machine)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_json_atomic(path, record)
        except OSError as e:
            log.warning("cannot record fastest's measurement in %s: %s", path, e)
    return record["choice"], record["reason"]


def record_path(model, machine=None):
    """Where fastest's measurement for ``model`` on this machine is recorded (zoo's cache, onnx/fastest/)."""
    key = sha256_of(graph_path(model, "onnx-fp32")) + (machine or machine_id()) + DECISION_RULE
    return cache_dir("onnx", "fastest", hashlib.sha256(key.encode()).hexdigest()[:40] + ".json")


def forget_record(model):
    """Delete fastest's recorded measurement for ``model`` on this machine (``zoo.inference.precisions.remeasure``)."""
    try:
        os.remove(record_path(model))
    except (OSError, TypeError, ImportError):  # no record, or no fused graph (then nothing is measured)
        pass


def machine_id():
    """What fastest's speed measurement depends on: the CPU (its name and the instruction sets that change which
    kernels run: AVX2 and AVX-512 VNNI machines may share a name), the cores this process may use, ONNX Runtime
    and OpenVINO (where installed)."""
    import onnxruntime

    engines = f"onnxruntime {onnxruntime.__version__}"
    if openvino_available():
        import openvino

        engines += f", openvino {openvino.__version__}"
    return (f"{platform.machine()} {cpu_model() or platform.processor()} ({' '.join(instruction_sets()) or 'baseline'}),"
            f" {usable_cpus()} cpus, {engines}")


def probe_pairs(limit=PROBE_PAIRS):
    """(texts_a, texts_b, labels) of the first ``limit`` LCQMC valid pairs in zoo's data folder, or None."""
    try:
        path = task_file("LCQMC", "valid", DATA_DIR)
    except FileNotFoundError:
        return None
    rows = list(itertools.islice(iter_pairs(path, skip_bad_lines=True), limit))
    if not rows:
        return None
    return [a for a, _, _ in rows], [b for _, b, _ in rows], np.asarray([y for _, _, y in rows])


def probe_rows(model, a, b):
    """Rows of the probe: one per pair for a pair model; one per distinct text otherwise (+ the text index)."""
    if model.head_spec().pairs:
        return model.encode_pairs(a, b), None
    texts = list(dict.fromkeys(a + b))
    tok = model.tokenizer
    return [tok.assemble(p, None, model.maxlen) for p in tok.piece_ids(texts)], {t: i for i, t in enumerate(texts)}


def pair_scores(model, outputs, index, a, b):
    """Similarity of each probe pair from the model's outputs on ``probe_rows``."""
    served = model.head_spec().serve_numpy(outputs)  # scores, or L2-normalised vectors
    if index is None:
        return served
    return np.sum(served[[index[t] for t in a]] * served[[index[t] for t in b]], axis=1)


def measure(model):
    """fastest's measurement for ``model`` on this machine -> {"choice", "reason", and the numbers}."""
    import keras
    from scipy.stats import spearmanr

    pairs = probe_pairs()
    texts = list(pairs[0][:len(PARITY_TEXTS)]) if pairs else list(PARITY_TEXTS)
    rows, _ = probe_rows(model, texts, texts[::-1])
    batch = model.tokenizer.pad(rows)
    keras_out = np.asarray(keras.ops.convert_to_numpy(model(batch, training=False)), "float32")
    diff = float(np.max(np.abs(keras_out - onnx_session(model, "onnx-fp32")(batch))))
    record = {"parity_max_abs_diff": diff, "parity_rows": len(rows)}
    if not diff <= PARITY_TOLERANCE:
        return dict(record, choice="fp32", reason=f"the fused graph differs from Keras by {diff:.2g} "
                                                  f"> {PARITY_TOLERANCE:g} on probe texts")
    if pairs is None:  # no labelled pairs: int8's quality cannot be measured; the float paths are timed
        timed = (rows * (PROBE_TIMED_ROWS // len(rows) + 1))[:PROBE_TIMED_ROWS]
        candidates, quality = ("fp32", "onnx-fp32"), "int8 not measured: no probe pairs (LCQMC valid in zoo's data folder)"
    else:
        a, b, labels = pairs
        rows, index = probe_rows(model, a, b)
        lossy = [p for p in ONNX_PRECISIONS if p != "onnx-fp32" and (p != OPENVINO_INT8 or openvino_available())]
        spearman = {}
        for p in ("onnx-fp32", *lossy):
            out = model.predict_rows(rows, show_progress_bar=False, precision=p)
            spearman[p] = 100 * float(spearmanr(labels, pair_scores(model, out, index, a, b)).statistic)
        loss = {p: spearman["onnx-fp32"] - spearman[p] for p in lossy}
        candidates = ("fp32", "onnx-fp32") + tuple(p for p in lossy if loss[p] <= MAX_SPEARMAN_LOSS)
        quality = "; ".join(f"{p} Spearman {spearman[p]:.2f} vs {spearman['onnx-fp32']:.2f} fp32" if p in candidates
                            else f"{p} loses {loss[p]:.2f} Spearman on the probe (> {MAX_SPEARMAN_LOSS})"
                            for p in lossy)
        timed = rows[:PROBE_TIMED_ROWS]
        record.update(probe=f"first {len(a)} pairs of LCQMC valid", spearman=spearman)
    singles = timed[:PROBE_SINGLE_ROWS]

    def workload(precision):  # -> (seconds in batches of 64, seconds one row at a time)
        start = time.perf_counter()
        model.predict_rows(timed, show_progress_bar=False, precision=precision)
        middle = time.perf_counter()
        for row in singles:
            model.predict_rows([row], batch_size=1, show_progress_bar=False, precision=precision)
        return middle - start, time.perf_counter() - middle

    workload("fp32")  # XLA compiles the probe's shapes
    batched, single = {p: [] for p in candidates}, {p: [] for p in candidates}
    for r in range(PROBE_ROUNDS):
        for p in candidates[r % len(candidates):] + candidates[:r % len(candidates)]:
            b, o = workload(p)
            batched[p].append(b)
            single[p].append(o)
    median = {p: float(np.median(v)) for p, v in batched.items()}  # bulk work decides (encode, indexes, Ray)
    record.update(timed_rows=len(timed), single_rows=len(singles), rule=DECISION_RULE, seconds_batched=median,
                  seconds_single={p: float(np.median(v)) for p, v in single.items()})
    choice = min(candidates, key=median.get)

    def speeds(seconds):
        return ", ".join(f"{p} {seconds['fp32'] / seconds[p]:.2f}x" for p in candidates if p != "fp32")

    return dict(record, choice=choice, reason=f"fastest in batches of 64 (Keras fp32 = 1: {speeds(median)}; one row "
                                              f"at a time, reported only: {speeds(record['seconds_single'])}); "
                                              f"{quality}; parity {diff:.1g}")
