"""The ``zoo`` command (also ``python -m zoo``): ``zoo export`` and ``zoo serve``.

Each command is a sub-parser with a ``run(args)`` function; add one with ``add_command`` in ``build_parser``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading


def add_export(commands):
    p = commands.add_parser(
        "export", help="export a model for serving (SavedModel with the tokenizer inside, or ONNX)",
        description="Write MODEL as <OUT>/<NAME>/<VERSION>/ (TF Serving's layout): a SavedModel that takes "
                    "raw strings, or with --format onnx a model.onnx that takes token ids (plus vocab.txt).")
    p.add_argument("--model", required=True, help="a checkpoint folder (Google, transformers), a zoo preset "
                   "(folder or name) or a .keras file of a SentenceEncoder, SimBERT or CrossEncoder")
    p.add_argument("--out", required=True, help="base folder; the export goes to OUT/NAME/VERSION")
    p.add_argument("--format", choices=("saved_model", "onnx"), default="saved_model")
    p.add_argument("--name", default="default", help="model name (default: %(default)s)")
    p.add_argument("--version", type=int, help="version number (default: the next free one)")
    p.add_argument("--signature", choices=("text", "ids"), default="text",
                   help="text: strings in, tokenizer in the graph (signatures text, ids, tokenize); ids: token "
                        "ids in, no tf-text ops (default: %(default)s)")
    p.add_argument("--pooling", default="cls", help="pooling when MODEL is a checkpoint (default: %(default)s)")
    p.add_argument("--maxlen", type=int, help="tokens per text (default: the model's maxlen)")
    p.set_defaults(run=run_export)


def run_export(args):
    from . import export

    model = export.load_exportable(args.model, pooling=args.pooling, maxlen=args.maxlen)
    path = export.version_path(args.out, args.name, args.version)
    if os.path.exists(path):
        raise FileExistsError(f"{path} exists; choose another --version")
    if args.format == "onnx":
        export.export_onnx(model, os.path.join(path, "model.onnx"))
        model.tokenizer.save(path)
    else:
        export.export_saved_model(model, path, signature=args.signature)
    print(f"exported {type(model).__name__} (maxlen {model.maxlen}) to {path}")
    return 0


def add_serve(commands):
    p = commands.add_parser(
        "serve", help="serve an exported SavedModel (TF Serving REST and gRPC APIs)",
        description="Serve MODEL (a SavedModel folder, or NAME folder with numeric versions: the highest is "
                    "served) at http://HOST:PORT/v1/models/NAME[:predict], and with --grpc-port over gRPC.")
    p.add_argument("--model", required=True, help="the exported folder (OUT/NAME or OUT/NAME/VERSION)")
    p.add_argument("--port", type=int, default=8501, help="REST port (default: %(default)s)")
    p.add_argument("--grpc-port", type=int, help="gRPC port (default: no gRPC; TF Serving uses 8500)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--name", default="default", help="model name in the URLs (default: %(default)s)")
    p.add_argument("--max-batch-size", type=int, default=64, help="rows merged into one model call")
    p.add_argument("--batch-timeout-ms", type=float, default=2.0, help="how long a batch waits for more requests")
    p.add_argument("--max-request-batch", type=int, default=256, help="instances allowed in one request")
    p.add_argument("--max-chars", type=int, default=4096, help="characters allowed in one text")
    p.add_argument("--verbose", action="store_true", help="log every request")
    p.set_defaults(run=run_serve)


def run_serve(args):
    from .serving import ModelServer

    server = ModelServer(args.model, name=args.name, host=args.host, port=args.port, grpc_port=args.grpc_port,
                         max_batch_size=args.max_batch_size, batch_timeout_ms=args.batch_timeout_ms,
                         max_request_batch=args.max_request_batch, max_chars=args.max_chars,
                         verbose=args.verbose).start()
    grpc = f", gRPC {args.host}:{server.grpc_port}" if server.grpc_port else ""
    print(f"serving {server.name} version {server.version} ({server.path}): REST {server.url}{grpc}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="zoo", description="zoo: Keras 3 models for Chinese sentence similarity")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (add_export, add_serve):
        add_command(commands)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    logger = logging.getLogger("zoo")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        return args.run(args)
    except (FileNotFoundError, FileExistsError, ValueError, TypeError, ImportError) as e:
        print(f"zoo {args.command}: error: {e}", file=sys.stderr)
        return 2
