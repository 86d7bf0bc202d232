"""The ``zoo`` command (also ``python -m zoo``): one parser, whose subcommands' flags come from the jobs' config
dataclasses (``zoo.config``).

    zoo train {bi-encoder,cross-encoder,dvbert,simbert} ...     zoo pretrain ...     zoo mirror-bert ...
    zoo compare ...     zoo evaluate ...     zoo encode ...     zoo index build ...     zoo search ...
    zoo export ...     zoo serve ...

Flags are parsed first: ``zoo --help`` and ``zoo COMMAND --help`` load no backend; TensorFlow (or JAX) loads only
to run a job. A command's result (a table, a path, the serving address) goes to stdout; progress and messages to
stderr. Ctrl-C during training saves the step and exits with status 130 (``zoo.errors.TrainingInterrupted``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import shlex
import sys

from . import __version__
from .config import add_flags, command_line_error, make_config, parse
from .errors import TrainingInterrupted, ZooError
from .logs import invoked_as, log, setup_cli

# (command words, module with the config class and run(config), config class name, one-line help)
COMMANDS = [
    (("train", "bi-encoder"), "zoo.jobs.bi_encoder", "BiEncoderConfig",
     "a SentenceEncoder on sentence pairs (CoSENT, Sentence-BERT, cosine MSE)"),
    (("train", "cross-encoder"), "zoo.jobs.cross_encoder", "CrossEncoderConfig",
     "a cross-encoder (interaction-based matcher)"),
    (("train", "dvbert"), "zoo.jobs.dvbert", "DvBERTConfig", "distil cross-encoder teachers into a bi-encoder"),
    (("train", "simbert"), "zoo.jobs.simbert", "SimBERTConfig", "SimBERT: retrieval + generation in one model"),
    (("pretrain",), "zoo.jobs.pretrain", "PretrainConfig", "MLM / TaCL / TACO pretraining of a backbone"),
    (("mirror-bert",), "zoo.jobs.mirror_bert", "MirrorBertConfig", "Mirror-BERT / SimCSE, no labels"),
    (("compare",), "zoo.jobs.compare", "CompareConfig",
     "representation vs interaction: accuracy at the valid-fitted threshold"),
    (("evaluate",), "zoo.jobs.evaluate", "EvaluateConfig", "any saved model on any task's valid and test splits"),
    (("encode",), "zoo.jobs.encode", "EncodeConfig", "a text file -> an .npy file of embeddings"),
    (("index", "build"), "zoo.jobs.search", "IndexBuildConfig", "a text file -> a search index (vectors, texts, BM25)"),
    (("mine-negatives",), "zoo.jobs.mine", "MineNegativesConfig",
     "pairs -> (anchor, positive, negative) triplets with mined hard negatives"),
    (("search",), "zoo.jobs.search", "SearchConfig", "query a search index: dense, BM25 or hybrid"),
    (("export",), "zoo.jobs.export", "ExportConfig", "a SavedModel (tokenizer inside) or ONNX for serving"),
    (("serve",), "zoo.serving", "ServeConfig", "serve exports over REST (TF Serving, OpenAI) and gRPC"),
]


@dataclasses.dataclass(frozen=True)
class Job:
    """The job behind a ``zoo`` command: its config class (the command's flags), ``run(config)``, and, for the
    training jobs, ``report(...)`` (results.json and results.md). The recipes in ``tasks/`` use it to take the
    job's flags and run its steps; the job's module is imported on first use.

    ```python
    job = zoo.job("train bi-encoder")
    config = job.parse(["--tasks", "LCQMC", "--limit-train", "4000"])
    job.run(config)
    ```

    :param command: the command's words.
    :param module_name: the job's module.
    :param config_name: its config class' name.
    """

    command: str
    module_name: str
    config_name: str

    @property
    def module(self):
        return importlib.import_module(self.module_name)

    @property
    def config_class(self):
        return getattr(self.module, self.config_name)

    def parse(self, argv=None, honours=None, description=None):
        """The config from command-line flags.

        :param argv: the flags (None: ``sys.argv``).
        :param honours: for a recipe that acts on some of the job's settings only: their field names, or
            ``zoo.config.TrainOptions`` and the like for all their fields; the job's other flags are then refused
            when set (``zoo.config.parse``).
        :param description: the ``--help`` text (None: the config's docstring).
        """
        return parse(self.config_class, argv, description, honours, elsewhere=f"zoo {self.command}")

    def run(self, config):
        """Run the job, as ``zoo COMMAND`` does.

        :param config: its config (``parse``).
        """
        return self.steps.run(config)

    @property
    def steps(self):
        """The job's steps, the functions its ``run`` calls in order (``STEPS`` of its module), for a recipe to call
        in the same order (``Steps``)."""
        return Steps(self)

    @property
    def report(self):
        return self.steps.report


class Steps:
    """A job's steps as a recipe calls them: ``steps.data(config)``, ``steps.model(config, checkpoint)`` ... (the
    names in ``STEPS`` of the job's module, and ``run``). Each is the job's own function; an error it raises that
    names a parameter names the job's flag instead (``zoo.config.command_line_error``), as on the command line."""

    def __init__(self, job):
        self._job = job

    def __getattr__(self, name):
        module = self._job.module
        if name != "run" and name not in getattr(module, "STEPS", ("report",)):
            raise AttributeError(f"zoo {self._job.command} has no step {name!r}; its steps: "
                                 f"{', '.join(getattr(module, 'STEPS', ()))}")
        function = getattr(module, name)

        @functools.wraps(function)
        def step(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except ZooError as e:
                spelled = command_line_error(e, self._job.config_class)
                if spelled is e:
                    raise
                raise spelled from None

        return step

    def __dir__(self):
        return [*getattr(self._job.module, "STEPS", ()), "run"]


def job(command):
    """The ``Job`` of ``zoo COMMAND``: a recipe's way to run a command's steps (``zoo.job("train bi-encoder")``).

    :param command: the command's words, e.g. "train bi-encoder".
    """
    for words, module, config_name, _ in COMMANDS:
        if " ".join(words) == command:
            return Job(command, module, config_name)
    raise ValueError(f"no zoo command {command!r}; commands: {', '.join(' '.join(w) for w, *_ in COMMANDS)}")


def named_command(argv):
    """The command words ``argv`` starts with (("train", "bi-encoder"), ("encode",) ...), or None."""
    words = []
    for token in argv[:2]:
        if token.startswith("-"):
            break
        words.append(token)
    for length in (2, 1):
        if tuple(words[:length]) in {w for w, *_ in COMMANDS}:
            return tuple(words[:length])
    return None


def build_parser(argv=None):
    """The ``zoo`` parser. Every command is listed; the flags are built (and the job's module imported) for the
    command ``argv`` names only, or for every command when ``argv`` is None."""
    parser = argparse.ArgumentParser(prog="zoo", description="zoo: Keras 3 models for Chinese sentence similarity. "
                                     "Each command's --help lists its flags and their defaults.")
    parser.add_argument("--version", action="version", version=f"zoo {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    selected = named_command(argv) if argv is not None else None
    groups = {}
    for words, module, config_name, help_text in COMMANDS:
        container = commands
        if len(words) == 2:
            if words[0] not in groups:
                jobs = ", ".join(w[1] for w, *_ in COMMANDS if w[0] == words[0])
                group = commands.add_parser(words[0], help=f"{words[0]}: {jobs}", description=f"zoo {words[0]} {{{jobs}}}")
                groups[words[0]] = group.add_subparsers(dest="subcommand", required=True, metavar="JOB")
            container = groups[words[0]]
        sub = container.add_parser(words[-1], help=help_text, description=help_text)
        the_job = Job(" ".join(words), module, config_name)
        sub.set_defaults(zoo_job=the_job, parser=sub, config_class=None)
        if argv is None or words == selected:
            sub.description = (the_job.config_class.__doc__ or help_text).strip()
            sub.set_defaults(config_class=the_job.config_class)
            add_flags(sub, the_job.config_class)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    the_job = args.zoo_job
    config = make_config(the_job.config_class, args, args.parser)
    setup_cli()
    command = the_job.command
    try:
        with invoked_as(argv):
            result = the_job.run(config)
    except TrainingInterrupted as e:
        log.warning("zoo %s: %s", command, e)
        print(f"interrupted at epoch {e.epoch}, step {e.step}; resume with: zoo {shlex.join(argv)}", file=sys.stderr)
        return 130
    except (ZooError, FileNotFoundError, FileExistsError, ValueError, TypeError, ImportError) as e:
        print(f"zoo {command}: error: {command_line_error(e, the_job.config_class)}", file=sys.stderr)
        return 2
    if command == "evaluate":
        print(the_job.module.markdown(result))
    elif command == "export":
        print(f"exported to {result}")
    elif command == "encode":
        print(f"wrote {result['output']} {tuple(result['shape'])}")
    elif command == "mine-negatives":
        print(f"wrote {result['output']}: {result['triplets']} triplets for {result['pairs']} pairs")
    elif command == "index build":
        print(f"wrote {result['output']}: {result['texts']} texts, {result['dim']}-d")
    elif command == "search":
        for query, hits in zip(config.query, result):
            print(f"{query}\n" + "\n".join(f"  {score:.4f}  {text}" for text, score in hits))
    log.debug("done: zoo %s", command)
    return 0 if not isinstance(result, int) else result

