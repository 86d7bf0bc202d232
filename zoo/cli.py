"""The ``zoo`` command (also ``python -m zoo``): one parser, whose subcommands' flags come from the jobs' config
dataclasses (``zoo.config``).

    zoo train {bi-encoder,cross-encoder,dvbert,simbert} ...     zoo pretrain ...     zoo mirror-bert ...
    zoo compare ...     zoo evaluate ...     zoo encode ...     zoo index build ...     zoo search ...
    zoo export ...     zoo serve ...

A command's result (a table, a path, the serving address) goes to stdout; progress and messages to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .config import add_flags, make_config
from .errors import ZooError
from .logs import log, setup_cli

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
    (("search",), "zoo.jobs.search", "SearchConfig", "query a search index: dense, BM25 or hybrid"),
    (("export",), "zoo.export", "ExportConfig", "a SavedModel (tokenizer inside) or ONNX for serving"),
    (("serve",), "zoo.serving", "ServeConfig", "serve an export with TF Serving's REST and gRPC APIs"),
]


def build_parser():
    parser = argparse.ArgumentParser(prog="zoo", description="zoo: Keras 3 models for Chinese sentence similarity. "
                                     "Each command's --help lists its flags.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups = {}
    for words, module, config_name, help_text in COMMANDS:
        container = commands
        if len(words) == 2:
            if words[0] not in groups:
                jobs = ", ".join(w[1] for w, *_ in COMMANDS if w[0] == words[0])
                group = commands.add_parser(words[0], help=f"{words[0]}: {jobs}", description=f"zoo {words[0]} {{{jobs}}}")
                groups[words[0]] = group.add_subparsers(dest="job", required=True, metavar="JOB")
            container = groups[words[0]]
        config_class = getattr(importlib.import_module(module), config_name)
        doc = (config_class.__doc__ or help_text).strip()
        sub = container.add_parser(words[-1], help=help_text, description=doc)
        add_flags(sub, config_class)
        sub.set_defaults(module=module, config_class=config_class, parser=sub, words=" ".join(words))
    return parser


def main(argv=None):
    setup_cli()
    parser = build_parser()
    args = parser.parse_args(argv)
    config = make_config(args.config_class, args, args.parser)
    try:
        result = importlib.import_module(args.module).run(config)
    except (ZooError, FileNotFoundError, FileExistsError, ValueError, TypeError, ImportError) as e:
        print(f"zoo {args.words}: error: {e}", file=sys.stderr)
        return 2
    if args.words == "evaluate":
        from .jobs.evaluate import markdown

        print(markdown(result))
    elif args.words == "export":
        print(f"exported to {result}")
    elif args.words == "encode":
        print(f"wrote {result['output']} {tuple(result['shape'])}")
    elif args.words == "index build":
        print(f"wrote {result['output']}: {result['texts']} texts, {result['dim']}-d")
    elif args.words == "search":
        for query, hits in zip(config.query, result):
            print(f"{query}\n" + "\n".join(f"  {score:.4f}  {text}" for text, score in hits))
    log.debug("done: zoo %s", args.words)
    return 0 if not isinstance(result, int) else result
