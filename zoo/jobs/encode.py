"""Encode job: a file of texts (one per line, plain or .gz, any size) -> an .npy array of L2-normalised
embeddings in line order, streamed chunk by chunk into place. ``zoo encode``.

The lines are read lazily; each chunk of ``--chunk-size`` lines is embedded and written straight to its rows of
``OUT.npy.partial/vectors.npy`` (file writes, not a mapping: memory stays flat however many lines), then
recorded as done. A killed run resumes at the first chunk not done; ``--processes N`` runs N local workers,
worker p taking every chunk c with c % N == p (each with its share of the cores). When every chunk is done the
array moves to OUT.npy in one rename, with OUT.npy.json beside it (model, rows, storage dtype, the int8/uint8
``ranges``, and ``vector_source``: the runtime, engine and ONNX graph sha256 that made the vectors). Where the model's fused
graph exists the lines are embedded by the light runtime (``zoo.inference.light``: ONNX Runtime, no TensorFlow).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import shutil
import time

import numpy as np

from ..choices import DEPRECATED_IN, ENGINES, POOLINGS, REMOVED_IN
from ..config import option
from ..data.tasks import count_lines, iter_chunks, iter_lines
from ..errors import ConfigError, DataError, MissingFileError, ZooError
from ..hardware import usable_cpus
from ..logs import log, progress
from ..paths import DEFAULT_ENCODER, write_json_atomic
from ..vectors import EMBEDDING_DTYPES, STORED_DTYPES, quantize_embeddings, stored_width
from .encode_rows import ChunkRows, done_chunks



@dataclasses.dataclass
class EncodeConfig:
    """Embed the lines of a text file with any model zoo loads."""

    model: str = option(DEFAULT_ENCODER, "a run folder, zoo preset (folder or name), .keras file or checkpoint "
                                         "folder (default: the shipped general sentence-embedding model)")
    input: str = option(None, "text file, one text per line (UTF-8; .gz allowed)", required=True)
    column: int | None = option(None, "embed the N-th TAB-separated field of each line (1-based), e.g. 1 for the "
                                      "first text of a pair file (default: the whole line)")
    output: str = option(None, "the .npy file to write ([lines, dim]; binary and ubinary: [lines, ceil(dim / 8)])",
                         required=True)
    batch_size: int = option(64, "texts per model call")
    maxlen: int | None = option(None, "tokens per text (default: the model's)")
    pooling: str | None = option(None, "pooling when MODEL is a checkpoint, not a saved encoder (default: cls)",
                                 choices=POOLINGS)
    long_text: str = option("truncate", "texts over maxlen tokens: cut, or averaged over overlapping windows",
                            choices=("truncate", "chunk"))
    truncate_dim: int | None = option(None, "keep the first D dimensions of each vector (then L2-normalise)")
    dtype: str = option("float32", "how vectors are stored, with sentence-transformers' names (encode(precision=)): "
                                   "float32, float16, uint8 or int8 (256 buckets per dimension over the model's "
                                   "ranges, written to OUT.npy.json), ubinary (signs, 8 per byte) or binary (ubinary "
                                   "minus 128, int8)", choices=EMBEDDING_DTYPES)
    precision: str = option("auto", "the runtime (Python: encode(engine=)): auto (lossless: the fused fp32 ONNX graph where its "
                                    "parity with Keras was shown, else Keras fp32), fastest (the fastest path "
                                    "measured close to fp32 here; may be int8), fp32 (Keras), bf16 (CPUs with "
                                    "AVX512-BF16/AMX, else fp32 with a warning), onnx-fp32 or int8 (a fused ONNX "
                                    "Runtime graph; zoo.inference). Where the model's fused graph exists, auto, "
                                    "onnx-fp32 and int8 run without TensorFlow (zoo.inference.light)",
                            choices=ENGINES)
    remeasure: bool = option(False, "with --precision fastest: measure this machine's choice again (replacing a "
                                    "record taken, say, while the machine was busy)")
    processes: int = option(1, "local worker processes, worker p encoding every chunk c with c % N == p (with "
                               "--engine ray: the number of Ray actors, one model copy each)")
    engine: str = option("local", "local: this machine's processes; ray: a Ray cluster (Ray Data, an actor pool)",
                         choices=("local", "ray"))
    address: str | None = option(None, "--engine ray: the cluster to join (e.g. ray://HOST:10001, or auto); "
                                       "default: a new local cluster")
    chunk_size: int = option(8192, "lines per chunk, the unit of work saved for resume")
    progress: bool = option(True, "no progress bar")

    def __post_init__(self):
        if not str(self.output).endswith(".npy"):
            raise ConfigError(f"--output must end in .npy, got {self.output!r}")
        for name in ("batch_size", "processes", "chunk_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.address is not None and self.engine != "ray":
            raise ConfigError("--address is for --engine ray")
        if self.column is not None and self.column < 1:
            raise ConfigError(f"--column counts from 1, got {self.column}")
        if self.dtype == "binary":
            log.warning("--dtype binary is sentence-transformers' binary since zoo %s (int8: the packed bits minus "
                        "128); the uint8 bits it wrote before are --dtype ubinary (this note goes in zoo %s)",
                        DEPRECATED_IN, REMOVED_IN)


def load_light(config):
    """The light runtime's ``OnnxEncoder`` where the model's fused graph exists (no TensorFlow is imported), else
    None."""
    from ..inference.light import light_encoder

    if config.pooling is None and config.engine == "local":
        light = light_encoder(config.model, config.precision)
        if light is not None:
            light.maxlen = config.maxlen or light.maxlen
            log.info("encoding with ONNX Runtime (%s, %s)", light.precision, light.graph)
            return light
    return None


def load_encoder(config):
    """``load_light``'s encoder, else the model loaded with Keras."""
    light = load_light(config)
    if light is not None:
        return light
    from ..models import from_preset

    model = from_preset(config.model, pooling=config.pooling, maxlen=config.maxlen)
    if not hasattr(model, "encode"):
        raise ConfigError(f"{config.model} holds a {type(model).__name__}, which has no sentence vectors to encode")
    return model


def inputs_over(model, config):
    """How many inputs have more tokens than the model's maxlen (cut by --long-text truncate, windowed by chunk):
    only lines longer than maxlen - 2 characters are tokenized (a character gives at least one piece)."""
    encoder = getattr(model, "encoder", model)
    maxlen = config.maxlen or encoder.maxlen
    long = [t for _, t in iter_lines(config.input, config.column) if len(t) > maxlen - 2]
    return sum(len(p) + 2 > maxlen for p in encoder.tokenizer.piece_ids(long)) if long else 0, maxlen


def embed(model, texts, config):
    return model.encode(texts, batch_size=config.batch_size, show_progress_bar=False, long_text=config.long_text,
                        truncate_dim=config.truncate_dim, engine=config.precision)


# ------------------------------------------------------------------------------ the work folder
SETTINGS = ("model", "input", "input_bytes", "lines", "column", "dtype", "truncate_dim", "long_text", "maxlen",
            "pooling", "precision", "chunk_size")


def _settings(config, lines):
    return {"model": config.model, "input": os.path.abspath(config.input), "input_bytes":
            os.path.getsize(config.input), "lines": lines, "column": config.column, "dtype": config.dtype, "truncate_dim": config.truncate_dim,
            "long_text": config.long_text, "maxlen": config.maxlen, "pooling": config.pooling,
            "precision": config.precision, "chunk_size": config.chunk_size}


def _start_work(work, settings, model, config):
    """Create the work folder (in one rename): meta.json and a zero-filled vectors.npy of the final shape."""
    dim = config.truncate_dim or model.dim
    meta = dict(settings, dim=dim, shape=[settings["lines"], stored_width(dim, config.dtype)],
                stored_dtype=STORED_DTYPES[config.dtype])
    if config.dtype in ("int8", "uint8"):  # the model's own, from zoo's calibration texts: not from this file
        meta["ranges"] = model.quantization_ranges(config.precision, None, config.truncate_dim).tolist()
    tmp = work + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    np.lib.format.open_memmap(os.path.join(tmp, "vectors.npy"), mode="w+", dtype=meta["stored_dtype"],
                              shape=tuple(meta["shape"])).flush()
    write_json_atomic(os.path.join(tmp, "meta.json"), meta)
    os.rename(tmp, work)
    return meta


def encode_shard(config, work, shard=0, shards=1, model=None, on_chunk=None):
    """Encode the chunks of worker ``shard`` of ``shards`` not yet done, writing rows in place."""
    if model is None:
        threads = max(1, usable_cpus() // shards)
        os.environ["ZOO_ORT_THREADS"] = str(threads)  # the light runtime's share of the cores
        model = load_light(config)
        if model is None:  # Keras: TensorFlow's share, set before the backend starts
            import tensorflow as tf

            tf.config.threading.set_intra_op_parallelism_threads(threads)
            model = load_encoder(config)
    with open(os.path.join(work, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    ranges = np.asarray(meta["ranges"], dtype="float32") if "ranges" in meta else None
    done = done_chunks(work)
    with ChunkRows(work, meta, str(shard)) as rows:
        for index, start, texts in iter_chunks(config.input, config.chunk_size, config.column):
            if index % shards != shard or index in done:
                continue
            embedded = quantize_embeddings(embed(model, texts, config), config.dtype, ranges)
            rows.write(index, start, np.ascontiguousarray(embedded).tobytes())
            if on_chunk is not None:
                on_chunk(len(texts))


def _finish(work, output, meta):
    """Move the array into place, then its description; remove the work folder."""
    vectors = os.path.join(work, "vectors.npy")
    if os.path.exists(vectors):
        os.replace(vectors, output)
    write_json_atomic(output + ".json", {k: v for k, v in meta.items() if k != "chunk_size"})
    shutil.rmtree(work)


def run(config: EncodeConfig):
    if not os.path.exists(config.input):
        raise MissingFileError(f"{config.input}: no such input file")
    lines = count_lines(config.input)
    if not lines:
        raise DataError(f"{config.input}: no lines to encode")
    first = next(iter_lines(config.input))[1]
    if config.column is None and "\t" in first:
        log.warning("%s: line 1 holds TABs; each whole line is embedded, TABs included (--column N embeds the N-th "
                    "field only)", config.input)
    os.makedirs(os.path.dirname(os.path.abspath(config.output)), exist_ok=True)
    work, settings = config.output + ".partial", _settings(config, lines)
    if config.remeasure and config.precision != "fastest":
        raise ConfigError(f"remeasure is for precision 'fastest', not {config.precision!r}", param="remeasure")
    model = load_encoder(config)
    if config.remeasure:
        from ..inference.precisions import remeasure

        remeasure(model)  # logs the new choice and why
    source = model.vector_source(config.precision) if hasattr(model, "vector_source") else None  # decided here,
    # graphs cached, before any worker process starts
    if os.path.exists(os.path.join(work, "meta.json")):
        with open(os.path.join(work, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        changed = [k for k in SETTINGS if meta.get(k) != settings[k]]
        if changed:
            k = changed[0]
            raise ConfigError(f"{work} holds an unfinished run with {k} {meta.get(k)!r}, now {settings[k]!r}: "
                              f"rerun with the same settings to resume it, or delete {work} to start over")
        if not os.path.exists(os.path.join(work, "vectors.npy")):  # killed while finishing
            _finish(work, config.output, meta)
            return {"output": config.output, "shape": meta["shape"], "resumed_chunks": "all"}
    else:
        shutil.rmtree(work, ignore_errors=True)
        meta = _start_work(work, settings, model, config)
    over, maxlen = inputs_over(model, config)
    if over:
        log.info("%d of %d inputs were longer than %d tokens and were %s", over, lines, maxlen,
                 "cut (--long-text chunk embeds them whole, as overlapping windows)" if config.long_text == "truncate"
                 else "embedded as overlapping windows (--long-text chunk)")
    meta["inputs_over_maxlen"] = over
    meta["vector_source"] = source
    chunks = -(-lines // config.chunk_size)
    done = done_chunks(work)
    if done:
        log.info("resuming %s: %d of %d chunks done", work, len(done), chunks)
    remaining = sum(min(config.chunk_size, lines - c * config.chunk_size) for c in range(chunks) if c not in done)
    bar = progress(None, "encode", config.progress, total=remaining, unit="sent")
    started = time.time()
    if config.engine == "ray":
        from .ray_encode import encode_chunks

        encode_chunks(config, work, meta, done, load_encoder, embed, on_chunk=bar.update if bar is not None else None)
    elif config.processes == 1:
        encode_shard(config, work, model=model, on_chunk=bar.update if bar is not None else None)
    else:
        _run_workers(config, work, bar)
    if bar is not None:
        bar.close()
    missing = chunks - len(done_chunks(work))
    if missing:
        raise ZooError(f"{work}: {missing} chunks not encoded; rerun the same command to resume")
    _finish(work, config.output, meta)
    seconds = time.time() - started
    log.info("wrote %s: %s %s (%s), %d lines in %.1f s (%.0f lines/s)", config.output, "x".join(map(str, meta["shape"])),
             meta["stored_dtype"], config.model, remaining, seconds, remaining / max(seconds, 1e-9))
    return {"output": config.output, "shape": meta["shape"], "lines_encoded": remaining, "seconds": seconds,
            "inputs_over_maxlen": over}


def _run_workers(config, work, bar):
    """Workers in fresh processes (spawn: no TensorFlow state is forked); the bar follows their done files."""
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=encode_shard, args=(config, work, p, config.processes), daemon=True)
               for p in range(config.processes)]
    for w in workers:
        w.start()
    seen = len(done_chunks(work))
    while any(w.is_alive() for w in workers):
        time.sleep(0.5)
        now = len(done_chunks(work))
        if bar is not None and now > seen:
            bar.update(min((now - seen) * config.chunk_size, bar.total - bar.n))  # the last chunk may be short
        seen = now
    failed = [p for p, w in enumerate(workers) if w.exitcode != 0]
    if failed:
        raise ZooError(f"encode worker(s) {failed} of {config.processes} failed (exit codes "
                       f"{[workers[p].exitcode for p in failed]}); finished chunks are kept in {work}: "
                       f"rerun the same command to resume")
