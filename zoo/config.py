"""Job settings as dataclasses, and their command-line flags (generated here with argparse, one parser for all).

A job's config is a dataclass whose fields are declared with ``option(default, help, ...)``; ``add_flags`` turns
each field into a flag (``batch_size`` -> ``--batch-size``; a bool that defaults to True -> ``--no-NAME``; a
tuple -> comma-separated values, or a repeated flag with ``append=True``; ``aliases`` are old spellings still
accepted, with a deprecation message). Checks that need no data live in the dataclass's ``__post_init__`` and raise
``ConfigError``, so a bad flag fails before anything is loaded or written.

The flag vocabulary shared by every job lives here too: ``DistributeOptions``, ``TrainOptions`` and
``StreamOptions`` (one name per concept: ``--tasks``, ``--checkpoint``, ``--output``, ``--limit-train``,
``--limit-eval``, ``--data-dir``, ...). This module imports nothing heavy: ``zoo --help`` builds every job's flags
without loading TensorFlow.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing

from .choices import (DISTRIBUTE_MODES, DVBERT_OBJECTIVES, POOLINGS, PRETRAINING_OBJECTIVES,  # noqa: F401 -- kept
                      SCORE_HEADS, check_warmup)  # importable from here through the move to zoo.choices
from .choices import MIXED_PRECISIONS, PAIR_FILE_FORMATS, REMOVED_IN, TASKS
from .errors import ConfigError
from .logs import log, show_bars
from .paths import DEFAULT_PRESET

CROSS_ENCODER_HEADS = SCORE_HEADS  # the name this module gave them before zoo.choices

# keras.distribution.initialize reads these too
ENV_COORDINATOR = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
ENV_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
ENV_PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"


def option(default=None, help="", *, flag=None, choices=None, append=False, required=False, aliases=()):
    """A config field with what its flag needs: help text, an optional flag name (``flag="--loss"``),
    choices, ``append=True`` for a repeated flag collecting a tuple, ``required=True``, and ``aliases``: old
    spellings (``("--task",)``) still accepted with a deprecation message."""
    return dataclasses.field(default=default, metadata={"help": help, "flag": flag, "choices": choices,
                                                        "append": append, "required": required,
                                                        "aliases": tuple(aliases)})


class DeprecatedFlag(argparse.Action):
    """An old spelling of a flag: stores like the new one (``nargs=0`` for a switch, storing ``const``) and says
    which flag replaces it."""

    def __init__(self, option_strings, dest, replacement, append=False, **kwargs):
        self.replacement, self.append = replacement, append
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        log.warning("%s is deprecated and will be removed in zoo %s: use %s", option_string, REMOVED_IN,
                    self.replacement)
        value = self.const if self.nargs == 0 else values
        if self.append:
            value = list(getattr(namespace, self.dest, None) or []) + [value]
        setattr(namespace, self.dest, value)


def _base_type(annotation):
    """int / float / str / bool / tuple of an annotation such as ``int | None``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return typing.get_origin(annotation) or annotation


def add_flags(parser, config_class):
    """Add a flag to ``parser`` for every field of ``config_class`` (fields without help text get none)."""
    hints = typing.get_type_hints(config_class)
    for f in dataclasses.fields(config_class):
        if not f.metadata.get("help"):
            continue
        meta, kind = f.metadata, _base_type(hints[f.name])
        name = flag_name(f)
        kwargs = {"dest": f.name, "help": meta["help"].replace("%", "%%")}  # argparse formats help
        aliases = meta.get("aliases", ())
        if kind is bool:
            if f.default is True:
                parser.add_argument(name, action="store_false", **kwargs)
            else:
                parser.add_argument(name, action="store_true", **kwargs)
            for alias in aliases:
                parser.add_argument(alias, action=DeprecatedFlag, replacement=name, nargs=0,
                                    const=f.default is not True, dest=f.name, help=argparse.SUPPRESS)
            continue
        if meta["choices"]:
            kwargs["choices"] = meta["choices"]
        if kind is tuple:
            if meta["append"]:
                parser.add_argument(name, action="append", required=meta["required"], **kwargs)
            else:
                kwargs["help"] += (" (comma-separated)" if "default:" in kwargs["help"] else
                                   f" (comma-separated; default: {','.join(map(str, f.default)) or 'none'})")
                parser.add_argument(name, type=_comma_list, default=f.default, **kwargs)
            for alias in aliases:
                parser.add_argument(alias, action=DeprecatedFlag, replacement=name, append=meta["append"],
                                    type=None if meta["append"] else _comma_list, dest=f.name, help=argparse.SUPPRESS)
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        if "default:" not in kwargs["help"] and not meta["required"]:
            kwargs["help"] += " (default: %(default)s)" if default is not None else " (default: none)"
        if not meta["choices"]:
            kwargs["metavar"] = f.name.upper()
        parser.add_argument(name, type=kind, default=default, required=meta["required"] and not aliases, **kwargs)
        for alias in aliases:
            parser.add_argument(alias, action=DeprecatedFlag, replacement=name, type=kind, dest=f.name,
                                choices=meta["choices"], help=argparse.SUPPRESS)


def _comma_list(text):
    return tuple(t.strip() for t in text.split(",") if t.strip())


def flag_name(field):
    """The command-line flag of a config field (``batch_size`` -> ``--batch-size``; a bool defaulting to True ->
    ``--no-NAME``)."""
    if field.metadata.get("flag"):
        return field.metadata["flag"]
    prefix = "--no-" if field.default is True else "--"
    return prefix + field.name.replace("_", "-")


def not_honoured(config_class, honours):
    """The fields of ``config_class`` outside ``honours`` (field names, or dataclasses standing for all their
    fields; None: every field is honoured)."""
    if honours is None:
        return set()
    names = set()
    for entry in honours:
        names |= {f.name for f in dataclasses.fields(entry)} if dataclasses.is_dataclass(entry) else {entry}
    fields = {f.name for f in dataclasses.fields(config_class)}
    if names - fields:
        raise ValueError(f"honours names no field of {config_class.__name__}: {sorted(names - fields)}")
    return fields - names


def refuse_set(config_class, values, refused, elsewhere=None):
    """ConfigError naming every flag of ``refused`` whose value in ``values`` is not its field's default."""
    flags = [flag_name(f) for f in dataclasses.fields(config_class)
             if f.name in refused and f.name in values and values[f.name] != f.default]
    if flags:
        raise ConfigError(f"{', '.join(flags)}: not honoured by this script, which runs the default"
                          + (f"; {elsewhere} does" if elsewhere else ""))


def command_line_error(error, config_class):
    """``error`` as the command line says it: a ZooError naming a parameter (``error.param``) that is a field of
    ``config_class`` names that field's flag instead (``columns`` -> ``--columns``); any other error as it is."""
    param = getattr(error, "param", None)
    field = next((f for f in dataclasses.fields(config_class) if f.name == param), None) if param else None
    if field is None:
        return error
    spelled = type(error)(error.naming(flag_name(field)), param=param)
    spelled.__traceback__ = error.__traceback__
    return spelled


def make_config(config_class, args, parser=None, refused=(), elsewhere=None):
    """The config from parsed ``args``; flags of ``refused`` fields set to anything but their default are
    refused (``refuse_set``). A ConfigError becomes a usage error of ``parser`` (exit status 2) when there is one."""
    names = {f.name for f in dataclasses.fields(config_class)}
    values = {k: v for k, v in vars(args).items() if k in names}
    for key, value in values.items():
        if isinstance(value, list):
            values[key] = tuple(value)
    try:
        refuse_set(config_class, values, refused, elsewhere)
        for f in dataclasses.fields(config_class):
            if f.metadata.get("required") and values.get(f.name) is None:
                raise ConfigError(f"{flag_name(f)} is required")
        config = config_class(**values)
    except ConfigError as e:
        e = command_line_error(e, config_class)
        if parser is None:
            raise e from None
        parser.exit(2, f"{parser.prog}: error: {e}\n")  # one line: the usage is for flags argparse itself refuses
    if getattr(config, "progress", True) is False:  # --no-progress: the evaluations' bars too, not only training's
        show_bars(False)
    return config


def parse(config_class, argv=None, description=None, honours=None, elsewhere=None):
    """Parse ``argv`` into a ``config_class`` (the recipes' entry point). ``honours``: the fields the caller acts
    on (names, or dataclasses such as ``TrainOptions`` for all their fields; default every field); the others'
    flags are hidden from --help and refused when set (ConfigError naming them, exit status 2; ``elsewhere``
    names what runs them, e.g. "zoo train bi-encoder")."""
    refused = not_honoured(config_class, honours)
    parser = argparse.ArgumentParser(description=description or (config_class.__doc__ or "").strip().split("\n")[0])
    add_flags(parser, config_class)
    for action in parser._actions:
        if action.dest in refused:
            action.help = argparse.SUPPRESS
    if refused:
        flags = ", ".join(flag_name(f) for f in dataclasses.fields(config_class) if f.name in refused)
        parser.epilog = f"Not honoured here, refused when set ({elsewhere or 'the job'} runs them): {flags}"
    return make_config(config_class, parser.parse_args(argv), parser, refused, elsewhere)


# ---------------------------------------------------------------------------------- the shared vocabulary
@dataclasses.dataclass
class DistributeOptions:
    """Data-parallel training (``zoo.distribute``): every training job has these flags."""

    distribute: str = option("none", "data-parallel: split each (global) batch over every device (JAX: "
                                     "keras.distribution; TensorFlow: MirroredStrategy)", choices=DISTRIBUTE_MODES)
    coordinator: str | None = option(None, "HOST:PORT of process 0, to train in several processes/hosts (JAX; or "
                                           f"{ENV_COORDINATOR})")
    num_processes: int | None = option(None, f"processes in the run (or {ENV_PROCESSES})")
    process_id: int | None = option(None, f"this process, 0..N-1; 0 writes the files (or {ENV_PROCESS_ID})")


@dataclasses.dataclass
class DataOptions:
    """Where a job's pairs come from: benchmarks or task folders of yours (``--tasks``, ``--data-dir``), or files of
    yours (``--train``, ``--valid``, ``--test``) in any format ``zoo.data.pair_files`` reads (docs/your-data.md).

    ``--valid`` and ``--test`` make a data set of yours, named after the files ("mydata" for mydata.valid.csv, the
    folder's name for afq/dev.json) or by ``--tasks NAME`` (a name that is no benchmark): it replaces ``--tasks``, and results and reports carry its name. ``--train`` alone replaces the train split of
    one task (its valid and test still score the model). A job calls ``check_data`` in its ``__post_init__`` and
    reads through ``load_splits(task, config.data_dir, ..., **config.reading(task))``."""

    data_dir: str | None = option(None, "folder with the tasks' files: TASK/senteval_cn/TASK.SPLIT.data of a "
                                        "benchmark, or a folder NAME/ of yours with NAME.train.csv, NAME.valid.csv, "
                                        "... (any format of --train; default: the embedded data/ folder, which holds "
                                        "LCQMC, then ../shared/data)")
    train: str | None = option(None, "your train pairs: a file or a folder of shards (TSV/CSV/JSONL/Parquet, "
                                     "plain or .gz); replaces the task's train split (--stream reads it lazily)")
    valid: str | None = option(None, "your valid pairs (they choose the kept epoch and the threshold); with --test, "
                                     "a data set of yours, named after its files, instead of --tasks")
    test: str | None = option(None, "your test pairs (reported, never used to choose anything); goes with --valid")
    columns: tuple = option((), "your files' columns as ROLE=COLUMN: text_a, text_b, label for pairs, anchor, "
                                "positive, negative for triplets (a header name, or a 1-based position in a "
                                "headerless TAB file; default: common names such as sentence1/sentence2/label, "
                                "q1/q2, query/positive/negative, score are recognised)")
    labels: str = option("auto", "label kind: auto (detected and logged), binary (0/1, anything else is a bad row) "
                                 "or graded (e.g. STS-B's 0-5)", choices=("auto", "binary", "graded"))
    skip_bad_lines: bool = option(False, "skip bad rows of the data files (counted in the log and in results.json) "
                                         "instead of stopping at the first")

    def check_data(self, trains=True):
        """ConfigError for flags that do not go together; with ``--valid``/``--test``, ``tasks`` becomes the name
        of the data set. ``trains``: the job trains (``--train`` needed with ``--valid``/``--test``). The
        ``--columns`` entries are checked by ``zoo.jobs.common.check_tasks``."""
        if getattr(self, "train_files", ()):
            if self.train:
                raise ConfigError("--train-files is the old spelling of --train: give one of them")
            log.warning("--train-files is deprecated and will be removed in zoo %s: use --train FILE --stream",
                        REMOVED_IN)
        if self.train and not trains:
            raise ConfigError("--train: this job trains nothing; give --valid and --test")
        if not (self.valid or self.test):
            if (self.train or getattr(self, "train_files", ())) and len(self.tasks) != 1:
                raise ConfigError(f"--train replaces the train split of one task, got --tasks {','.join(self.tasks)}")
            return
        if trains and not self.valid:
            raise ConfigError("--test without --valid: training needs valid pairs of yours, which choose the kept "
                              "epoch and the threshold (test is only reported)")
        if trains and not self.test and not self.reports_without_test:
            raise ConfigError("--valid and --test go together in this job: valid chooses the epoch and the "
                              "threshold, test is reported (the same file for both is allowed, and said so in the "
                              "results)")
        if trains and not (self.train or getattr(self, "train_files", ())):
            raise ConfigError("--valid/--test name a data set of yours: give its --train too")
        name = data_set_name(self.train or self.valid or self.test)
        default = next(f.default for f in dataclasses.fields(self) if f.name == "tasks")
        if tuple(self.tasks) not in (tuple(default), (name,)) and len(self.tasks) == 1 and self.tasks[0] not in TASKS:
            name = self.tasks[0]  # --tasks NAME names a data set of yours (NAME is no benchmark)
        elif tuple(self.tasks) not in (tuple(default), (name,)):
            raise ConfigError(f"--tasks {','.join(self.tasks)} and --valid/--test: give one or the other (to train "
                              f"on your data beside a benchmark, put it in a folder {name}/ under --data-dir and "
                              f"name it in --tasks)")
        self.tasks = (name,)

    # Whether the job trains and reports with --valid alone (bi-encoder, cross-encoder; ``zoo evaluate`` takes
    # either split alone); the other jobs keep --valid and --test together.
    reports_without_test = False

    def present(self, splits):
        """``splits`` less the valid or test split a data set of yours (``--valid`` / ``--test``) does not have."""
        if not (self.valid or self.test):
            return tuple(splits)
        return tuple(s for s in splits if s == "train" or self.split_files.get(s))

    @property
    def split_files(self):
        """{split: your file} of the splits given on the command line."""
        return {split: path for split, path in (("train", self.train), ("valid", self.valid), ("test", self.test))
                if path}

    def reading(self, task):
        """``load_splits`` / ``load_task`` keywords for ``task``: your files (when ``task`` is the one they belong
        to), columns, label kind and bad-row policy."""
        files = self.split_files if task == self.tasks[0] else {}
        if getattr(self, "train_files", ()) and task == self.tasks[0]:
            files["train"] = list(self.train_files)  # the deprecated --train-files: streamed
        return {"files": files, "columns": self.columns, "labels": self.labels, "skip_bad_lines": self.skip_bad_lines}


def data_set_name(path):
    """The name of a data set of yours from one of its files: ``mydata`` for ``mydata.valid.csv`` (or
    ``mydata_train.jsonl.gz``), the folder's name for ``mydata/train.csv`` or a folder of shards."""
    import os
    import re

    path = os.path.abspath(os.fspath(path))  # "train.json" given inside afq/ is named "afq"
    base = os.path.basename(path)
    base = base[:-3] if base.endswith(".gz") else base
    stem, ext = os.path.splitext(base)
    stem = stem if ext.lower() in PAIR_FILE_FORMATS else base
    stem = re.sub(r"[._-]?(train|valid|dev|test)$", "", stem, flags=re.IGNORECASE)
    return stem or os.path.basename(os.path.dirname(path)) or "data"


@dataclasses.dataclass
class TrainOptions(DistributeOptions):
    """Settings every training job has (the jobs that read pairs add ``DataOptions``)."""

    checkpoint: str | None = option(None, "starting checkpoint: a Google TF1 or transformers folder, a zoo preset "
                                          "(folder or name), a run folder or a .keras file (default: "
                                          f"{DEFAULT_PRESET})", aliases=("--from",))
    epochs: int = option(1, "passes over the training data")
    batch_size: int = option(32, "pairs per step")
    maxlen: int = option(64, "tokens per text")
    lr: float = option(1e-4, "peak learning rate")
    limit_train: int | None = option(None, "train on the first N pairs only (per task)")
    limit_eval: int | None = option(None, "score the first N pairs of each valid and test split only, the test "
                                          "scores of the final model included (quick trials; not for reported "
                                          "numbers)")
    output: str | None = option(None, "run folder: best model, checkpoint, results (rerun to resume; default: "
                                      "runs/ plus a name made of the settings)")
    seed: int = option(42, "random seed (batch order, dropout, new heads)")
    save_every: int = option(500, "steps between mid-epoch checkpoints")
    jit_compile: bool = option(True, "train without XLA compilation (also: $ZOO_JIT_COMPILE=0 on TensorFlow)")
    progress: bool = option(True, "no progress bars")
    ema_momentum: float | None = option(None, "keep an exponential moving average of the weights with this decay "
                                              "(e.g. 0.999; Keras' use_ema): every evaluation and the kept model "
                                              "use the average, training goes on from the raw weights, a resumed "
                                              "run restores both")
    gradient_accumulation_steps: int = option(1, "average the gradients of N batches per optimizer step (Keras' "
                                                 "gradient_accumulation_steps): one N-times larger batch for "
                                                 "per-pair losses; CoSENT still ranks within each batch")
    layer_decay: float | None = option(None, "layer-wise learning-rate decay: the top transformer layer at the "
                                             "learning rate, each layer below at this factor times the one above, "
                                             "the embeddings below the lowest (e.g. 0.9)")
    adversarial_epsilon: float | None = option(None, "adversarial training on the word embeddings (FGM): each step "
                                                     "also trains on the token-embedding table moved this far along "
                                                     "its loss gradient (e.g. 1.0, bert4keras' example); about twice "
                                                     "a step's time")
    mixed_precision: str | None = option(None, "train in mixed precision: bf16 (bfloat16 arithmetic on float32 "
                                               "weights; GPUs, and CPUs with AMX or AVX512-BF16) or fp16 (float16 "
                                               "with loss scaling; GPUs only); the kept model is saved in float32",
                                         choices=tuple(MIXED_PRECISIONS))
    lr_schedule: tuple = option((), "a piecewise-linear learning rate as STEP:FACTOR points of the peak rate "
                                    "(bert4keras' lr_schedule; from 0 at step 0 unless given, the last factor kept "
                                    "after it), e.g. 1000:1,2000:0.1; replaces the job's own schedule and --warmup")

    def __post_init__(self):
        check_positive(self, "epochs", "batch_size", "save_every", "gradient_accumulation_steps")
        if os.environ.get("ZOO_JIT_COMPILE") == "0" and self.jit_compile and \
                os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow":  # JAX runs compiled: its step needs it
            self.jit_compile = False  # as --no-jit-compile: CPUs train faster without XLA (bench/bench_train_xla.py)
            log.info("ZOO_JIT_COMPILE=0: training without XLA (as --no-jit-compile)")
        check_positive(self, "limit_train", "limit_eval", optional=True)
        if self.ema_momentum is not None and not 0 < self.ema_momentum < 1:
            raise ConfigError(f"--ema-momentum must be in (0, 1), e.g. 0.999, got {self.ema_momentum}")
        if self.adversarial_epsilon is not None and not self.adversarial_epsilon > 0:
            raise ConfigError(f"--adversarial-epsilon must be > 0, e.g. 1.0, got {self.adversarial_epsilon}")
        if self.adversarial_epsilon is not None and self.distribute != "none":
            raise ConfigError("--adversarial-epsilon with --distribute: not supported (FGM's step follows the whole "
                              "batch's gradient; under MirroredStrategy each device would see only its part's); "
                              "train on one device")
        if self.mixed_precision is not None:
            self._check_mixed_precision()
        if self.layer_decay is not None and not 0 < self.layer_decay <= 1:
            raise ConfigError(f"--layer-decay must be in (0, 1], e.g. 0.9, got {self.layer_decay}")
        self._schedule_points()  # a bad --lr-schedule entry stops here, before any data is read
        if self.ema_momentum is not None and self.distribute != "none":
            raise ConfigError("--ema-momentum with --distribute: not supported yet (the averages would have to be "
                              "swapped in on every device); train on one device")
        if self.maxlen < 3:
            raise ConfigError(f"--maxlen must be >= 3, got {self.maxlen}")
        if self.lr <= 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}")

    def _check_mixed_precision(self):
        """--mixed-precision where it runs: a known value; fp16 on an accelerator only (a CPU has no fast float16
        and Keras' loss scaling is for GPUs); bf16 on an accelerator or a CPU with bfloat16 instructions (elsewhere
        bfloat16 arithmetic is emulated: slower than float32); not with the train steps of its own (FGM)."""
        from .hardware import accelerator, bf16_supported

        if self.mixed_precision not in MIXED_PRECISIONS:
            raise ConfigError(f"--mixed-precision must be one of {sorted(MIXED_PRECISIONS)}, got "
                              f"{self.mixed_precision!r}")
        if self.adversarial_epsilon is not None:
            raise ConfigError("--mixed-precision with --adversarial-epsilon: not supported (FGM's train step moves the "
                              "float32 embedding table itself); train one of them in float32")
        if self.mixed_precision == "fp16" and self.ema_momentum is not None:
            raise ConfigError("--mixed-precision fp16 with --ema-momentum: not supported (the loss-scaling optimizer "
                              "wraps the one that keeps the average); use bf16, or train in float32")
        device = accelerator()
        if self.mixed_precision == "fp16" and device is None:
            raise ConfigError("--mixed-precision fp16 needs a GPU (float16 with loss scaling); on this CPU use bf16 "
                              "where it has bfloat16 instructions, or train in float32")
        if self.mixed_precision == "bf16" and device is None and not bf16_supported():
            raise ConfigError("--mixed-precision bf16: this CPU has no bfloat16 instructions (avx512_bf16 or "
                              "amx_bf16), where bfloat16 is slower than float32; train in float32")

    def _schedule_points(self):
        """``--lr-schedule`` entries -> {step: factor}; ConfigError naming a bad entry."""
        points = {}
        for entry in ",".join(self.lr_schedule).split(","):
            if not entry.strip():
                continue
            step, sep, factor = entry.partition(":")
            try:
                if not sep or int(step) < 0 or float(factor) < 0:
                    raise ValueError
                points[int(step)] = float(factor)
            except ValueError:
                raise ConfigError(f"--lr-schedule: {entry!r} is not STEP:FACTOR (e.g. 1000:1,2000:0.1)") from None
        return points

    def optimizer_options(self):
        """The keywords of ``zoo.train.optimizers.training_optimizer`` these flags set (every training job builds its
        optimizer with them): ``--ema-momentum``, ``--gradient-accumulation-steps``, ``--layer-decay``,
        ``--lr-schedule``, and loss scaling for ``--mixed-precision fp16``."""
        return {"ema_momentum": self.ema_momentum, "gradient_accumulation_steps": self.gradient_accumulation_steps,
                "layer_decay": self.layer_decay, "lr_schedule": self._schedule_points() or None,
                "loss_scale": self.mixed_precision == "fp16"}


@dataclasses.dataclass
class StreamOptions:
    """Training pairs read lazily from files (``zoo.train.StreamingPairBatches``): the pair-training jobs' flags."""

    train_files: tuple = option((), f"deprecated (removed in zoo {REMOVED_IN}): --train FILE --stream; streams "
                                    "the training pairs from these files or folders instead of the task's train split")
    stream: bool = option(False, "read the train split (the task's, or --train) lazily: memory holds one shuffle "
                                 "buffer, not the split; for train files larger than memory")

    @property
    def streamed(self):
        return bool(self.stream or self.train_files)

    @property
    def kept_splits(self):
        """The splits to load into memory: train too unless it is streamed."""
        return self.present(("valid", "test") if self.streamed else ("train", "valid", "test"))


def output_option(default):
    """The ``--output`` flag of a training job whose default run folder is named after its settings."""
    return option(None, f"run folder: best model, checkpoint, results (rerun to resume; default: {default})")


def check_positive(config, *names, optional=False):
    """ConfigError naming the flag when one of ``names`` is below 1 (None allowed when ``optional``)."""
    for name in names:
        value = getattr(config, name)
        if (value is None and optional) or (value is not None and value >= 1):
            continue
        raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
