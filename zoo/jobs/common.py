"""What the training jobs share: the start of a run, task and checkpoint checks (the shared flags are ``zoo.config``'s ``TrainOptions``, ``StreamOptions`` and ``DistributeOptions``). Light at import, as every job
module: the backend loads when a job runs."""

from __future__ import annotations

import contextlib
import os

from ..choices import MIXED_PRECISIONS
from ..data.tasks import TASKS, is_task
from ..errors import ConfigError
from ..logs import log
from ..paths import DEFAULT_PRESET


def check_tasks(tasks, flag="--tasks", config=None):
    """ConfigError naming the tasks of ``tasks`` that are neither a benchmark nor a folder of yours under
    ``config.data_dir`` (nor the data set of ``config``'s ``--valid``/``--test`` files), or a bad ``--columns``."""
    from ..data.pair_files import parse_columns

    try:
        parse_columns(getattr(config, "columns", ()))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    data_dir = getattr(config, "data_dir", None)
    own = (config.tasks[0],) if getattr(config, "valid", None) or getattr(config, "test", None) else ()
    unknown = [t for t in tasks if not (t in own or is_task(t, data_dir))]
    if unknown or not tasks:
        raise ConfigError(f"{flag}: unknown task(s) {unknown or list(tasks)}; known: {', '.join(TASKS)}, or a folder "
                          f"of yours under --data-dir ({data_dir or 'the embedded data/'}) holding NAME.train.csv, "
                          "NAME.valid.csv, ... (docs/your-data.md)")


def check_checkpoint(checkpoint, flag="--checkpoint"):
    """ConfigError when ``checkpoint`` (a preset name, folder, ckpt prefix or .keras file) cannot be found: checked
    before any data is read or any run folder made."""
    from ..errors import MissingFileError
    from ..paths import resolve

    if checkpoint is None:
        return
    try:
        path = resolve(checkpoint)
    except MissingFileError as e:
        raise ConfigError(f"{flag} {e}") from None
    if not (os.path.exists(path) or os.path.isfile(str(path) + ".index")):
        raise ConfigError(f"{flag} {checkpoint}: no such checkpoint, preset or file")


def setup_distribution(config):
    """``zoo.distribute.setup`` from a job's ``DistributeOptions`` and batch size, before any model is built;
    turns ``config.jit_compile`` off where the distribution cannot compile (``Distribution.jit_compile``).
    Returns the ``Distribution``."""
    from ..distribute import setup

    dist = setup(config.distribute, config.coordinator, config.num_processes, config.process_id,
                 batch_size=config.batch_size)
    config.jit_compile = dist.jit_compile(config.jit_compile)
    return dist


def resolve_pooling(config, checkpoint, default):
    """``--pooling`` when given, else the pooling of the SentenceEncoder ``checkpoint`` holds (a zoo preset, run
    folder, ``.keras`` file or sentence-transformers folder: continuing a trained encoder keeps its sentence vector;
    the log says so), else ``default`` (a new encoder on a backbone)."""
    from ..checkpoints.sentence_transformers import is_sentence_transformers_folder, read_folder
    from ..presets import saved_setting

    if config.pooling is None:
        saved = read_folder(checkpoint).pooling if is_sentence_transformers_folder(checkpoint) else \
            saved_setting(checkpoint, "pooling")
        config.pooling = saved or default
        log.info("pooling %s: %s", config.pooling, f"the one {checkpoint} was trained with" if saved else
                 "the default for a new encoder (--pooling to choose)")
    return config.pooling


def start(config, default_output):
    """Set the distribution, seed everything, make the run folder; returns (checkpoint, output) with defaults
    filled in."""
    import keras

    setup_distribution(config)
    checkpoint = config.checkpoint or DEFAULT_PRESET
    output = config.output or os.path.join("runs", default_output)
    os.makedirs(output, exist_ok=True)
    log.info("run folder %s, starting from %s", output, checkpoint)
    keras.utils.set_random_seed(config.seed)
    return checkpoint, output


@contextlib.contextmanager
def training_precision(config):
    """Layers built inside compute as ``--mixed-precision`` says (Keras' mixed dtype policy: float32 weights, bfloat16
    or float16 arithmetic); the global policy is restored after. Each job builds its model in it; the kept model is
    saved in float32 (``zoo.presets.save_preset``)."""
    import keras

    policy = MIXED_PRECISIONS.get(getattr(config, "mixed_precision", None))
    if policy is None:
        yield
        return
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def streamed_files(batches):
    """The ``data_files["train"]`` record of a streamed run (None for batches held in memory)."""
    if not hasattr(batches, "paths"):
        return None
    return {"paths": [os.path.abspath(p) for p in batches.paths], "pairs": batches.n, "streamed": True}
