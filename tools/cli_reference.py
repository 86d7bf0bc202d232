"""Write docs/cli.md, the command-line reference, from the ``zoo`` parser itself: every command's usage and flags
with their help text, values and defaults, and the recipes of ``tasks/`` that take the same flags.

    python tools/cli_reference.py            # rewrite docs/cli.md
    python tools/cli_reference.py --check    # exit 1 when docs/cli.md is stale

The parsers are built as ``zoo --help`` builds them (``zoo.cli.build_parser``): no backend is loaded. A flag's
help, choices and default live in its config dataclass (``zoo.config.option``); edit them there, not on the page.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's zoo

from zoo.cli import build_parser  # noqa: E402
from zoo.config import REMOVED_IN  # noqa: E402

PAGE = ROOT / "docs" / "cli.md"
WIDTH = 100  # of the usage lines, whatever the terminal
HEADER = ("<!-- Written by `python tools/cli_reference.py` from the `zoo` parser; edit the config dataclasses "
          "(zoo/jobs/*.py, zoo/config.py, zoo/serving), not this page. -->\n\n")


def escape(text):
    """Help text as Markdown table cell text: ``|`` and ``<`` (``query<TAB>...``) would be read as Markdown/HTML."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def commands(parser, words=(), help_text=""):
    """(words, parser, one-line help) of ``parser`` and of every subcommand under it, depth first."""
    yield words, parser, help_text
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield from commands(sub, (*words, name), helps[name])


# The flags of every command in groups, in this order; a flag named in none is under "Other". Deprecated flags (help
# starting "deprecated") come last.
GROUPS = {
    "Data": ("tasks", "data_dir", "train", "valid", "test", "columns", "column", "labels", "format", "skip_bad_lines",
             "limit_train", "stream", "batching", "length_buckets", "input", "corpus", "sentences", "groups",
             "task_texts", "ict_corpus", "ict_limit", "ict_maxlen", "limit_docs", "min_chars", "query", "chunk_size"),
    "Model": ("checkpoint", "model", "teachers", "cross_encoder", "pooling", "head", "maxlen", "dropout",
              "zero_segments", "query_prefix", "config", "simplified_vocab", "matryoshka_dims", "truncate_dim", "name",
              "signature", "quantize", "precision", "engine", "dtype", "calibrate", "remeasure", "index_model"),
    "Training": ("epochs", "batch_size", "lr", "bi_lr", "cross_lr", "warmup", "weight_decay", "seed", "objective",
                 "in_batch_weight", "word_order_negatives", "temperature", "steps", "nsp", "wwm", "ema_momentum",
                 "gradient_accumulation_steps", "layer_decay", "lr_schedule", "adversarial_epsilon",
                 "cached_mini_batch_size", "mixed_precision", "jit_compile"),
    "Evaluation": ("eval_tasks", "eval_batch_size", "eval_every", "limit_eval", "select", "word_order_valid",
                   "samples", "threshold"),
    "Search and mining": ("index", "backend", "uri", "collection", "mode", "topk", "k", "weight", "lexical", "filter",
                          "negatives", "range_min", "range_max", "margin", "max_score", "cross_encoder_max_score"),
    "Serving": ("host", "port", "grpc_port", "api_key", "ui", "long_text", "max_batch_size", "batch_timeout_ms",
                "max_chars", "max_request_batch", "request_timeout_s", "poll_seconds"),
    "Output": ("output", "save_every", "progress", "verbose", "version"),
    "Distributed": ("distribute", "coordinator", "num_processes", "process_id", "address", "processes"),
}
# One example per command (its flags are checked by the manual's tests; the guides run such commands).
EXAMPLES = {
    "train bi-encoder": "zoo train bi-encoder --tasks LCQMC,BQ --loss cosent --epochs 1 --output runs/cosent",
    "train cross-encoder": "zoo train cross-encoder --tasks LCQMC --head softmax --output runs/cross",
    "train dvbert": "zoo train dvbert --tasks LCQMC --teacher runs/cross --output runs/dvbert",
    "train simbert": "zoo train simbert --tasks LCQMC,BQ --epochs 2 --output runs/simbert",
    "pretrain": "zoo pretrain --corpus corpus.txt --objective tacl --steps 2000 --output runs/tacl",
    "mirror-bert": "zoo mirror-bert --sentences sentences.txt --output runs/mirror",
    "compare": "zoo compare --tasks LCQMC --output runs/compare",
    "evaluate": "zoo evaluate --model runs/cosent --tasks LCQMC,BQ",
    "encode": "zoo encode --model zoo-embed-zh-L4 --input texts.txt --output vectors.npy",
    "index build": "zoo index build --input faq.txt --output faq-index",
    "mine-negatives": "zoo mine-negatives --input pairs.csv --model zoo-embed-zh-L4 --range-min 3 --output triplets.tsv",
    "search": "zoo search --index faq-index --query 怎么开通花呗 --topk 5 --mode hybrid",
    "export": "zoo export --model runs/cosent --output exports/cosent",
    "serve": "zoo serve --model embed=zoo-embed-zh-L4 --port 8501",
}
GROUP_OF = {dest: group for group, dests in GROUPS.items() for dest in dests}


def help_of(parser, action):
    """The help text as ``--help`` prints it (``%(default)s`` filled in), unwrapped."""
    return argparse.HelpFormatter(parser.prog)._expand_help(action)


def described(parser, action):
    """The help text as the page shows it: without the "(default: ...)" the parser adds when it repeats the Default
    column (a default the help words itself stays)."""
    text, shown = help_of(parser, action), default_of(action).strip("`")
    for suffix in (f" (default: {shown})", f" (default: {action.default})", f" (comma-separated; default: {shown})",
                   " (comma-separated)"):
        if text.endswith(suffix):
            return text[:-len(suffix)]
    return text


def value_of(action):
    """What the flag takes: a switch, one of its choices, a number, a list ..."""
    if action.nargs == 0:
        return "switch"
    if action.choices:
        return "one of " + ", ".join(f"`{c}`" for c in action.choices)
    if isinstance(action, argparse._AppendAction):
        return "text, repeatable"
    if isinstance(action.default, tuple):
        return "comma-separated list"
    return {int: "integer", float: "number"}.get(action.type, "text")


def default_of(action):
    """The default as the user would type it: ``LCQMC,BQ`` for a list, ``none``, ``off`` for a switch."""
    if action.required:
        return "required"
    if action.nargs == 0:
        return "" if action.default == argparse.SUPPRESS else "off"
    default = action.default
    if default is None or default == ():
        return "none"
    if isinstance(default, tuple):
        default = ",".join(map(str, default))
    return f"`{default}`" if default != "" else '`""`'


def group_of(parser, action):
    """The group a flag is listed under (``GROUPS``; deprecated flags last)."""
    if described(parser, action).startswith("deprecated"):
        return "Deprecated"
    return GROUP_OF.get(action.dest, "Other")


def flag_table(parser, skip_help=True, grouped=True):
    """The Markdown tables of a parser's flags, one per group (``GROUPS``); old spellings (``DeprecatedFlag``) beside
    the flag they name."""
    actions = [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    old = {}
    for action in actions:
        if getattr(action, "replacement", None):
            old.setdefault(action.replacement, []).extend(action.option_strings)
    shown = [a for a in actions
             if not (a.help == argparse.SUPPRESS or (skip_help and isinstance(a, argparse._HelpAction)))]
    order = [*GROUPS, "Other", "Deprecated"]
    groups = sorted({group_of(parser, a) for a in shown}, key=order.index) if grouped else [None]
    tables = []
    for group in groups:
        rows = ["| Flag | Takes | Default | Description |", "|---|---|---|---|"]
        for action in shown:
            if group is not None and group_of(parser, action) != group:
                continue
            flags = ", ".join(f"`{s}`" for s in action.option_strings)
            spellings = old.get(action.option_strings[0], [])
            if spellings:
                flags += f" (old: {', '.join(f'`{s}`' for s in spellings)})"
            rows.append(f"| {flags} | {value_of(action)} | {default_of(action)} | "
                        f"{escape(described(parser, action))} |")
        tables.append((f"**{group}**\n\n" if group else "") + "\n".join(rows) + "\n")
    return "\n".join(tables)


def usage(parser):
    """The usage lines as ``--help`` prints them, at a fixed width."""
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def recipes():
    """{command: [(recipe path, takes every flag)]} from the ``zoo.job("COMMAND")`` line of each ``tasks/*.py``
    (a recipe that passes ``honours=`` acts on part of the flags and refuses the others)."""
    found = {}
    for path in sorted((ROOT / "tasks").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        match = re.search(r'zoo\.job\("([^"]+)"\)', text)
        if match:
            found.setdefault(match[1], []).append((path.relative_to(ROOT).as_posix(), "honours=" not in text))
    return found


def api_pages():
    """{object path: API page} from the ``::: path`` lines of docs/api/*.md."""
    pages = {}
    for path in sorted((ROOT / "docs" / "api").glob("*.md")):
        for name in re.findall(r"^::: ([\w.]+)", path.read_text(encoding="utf-8"), re.MULTILINE):
            pages[name] = f"api/{path.name}"
    return pages


def prose(docstring):
    """A config class's docstring as Markdown (reST ````code```` -> ```code```, one line per paragraph)."""
    paragraphs = inspect.cleandoc(docstring).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs).replace("``", "`").replace("<", "&lt;")


def command_section(words, parser, by_command, pages):
    """A command's section: what it does (its config class's docstring), its API entry and recipes, its usage and
    flag table (its one-line help is in the page's command table)."""
    name, config = " ".join(words), parser.get_default("config_class")
    notes = []
    if config:
        entry = f"`{config.__name__}`"
        path = f"{config.__module__}.{config.__name__}"
        if path in pages:
            entry = f"[{entry}]({pages[path]}#{path})"
        notes.append(f"Settings: {entry}")
    if by_command.get(name):
        notes.append("recipes taking these flags: " + ", ".join(
            f"`python {path}`" + ("" if every else " (part of them: the others are refused when set)")
            for path, every in by_command[name]))
    about = prose(config.__doc__ if config else parser.description or "")
    notes = "; ".join(notes)
    example = (f"For example:\n\n<!-- no-run: an example of the command's flags (checked; the guides run such "
               f"commands) -->\n```bash\n{EXAMPLES[name]}\n```\n\n")
    return (f"## zoo {name}\n\n{about}\n\n" + (f"{notes[0].upper()}{notes[1:]}.\n\n" if notes else "")
            + example + f"```text\n{usage(parser)}\n```\n\n{flag_table(parser)}")


def page():
    """The text of docs/cli.md."""
    root = build_parser()
    found = [c for c in commands(root) if c[0] and not any(isinstance(a, argparse._SubParsersAction)
                                                            for a in c[1]._actions)]  # the commands that run
    by_command, pages = recipes(), api_pages()
    listing = "\n".join(f"| [`zoo {' '.join(w)}`](#zoo-{'-'.join(w)}) | {h} |" for w, _, h in found)
    out = [HEADER, "# Command line\n\n",
           "Every command of `zoo` (also `python -m zoo`), with every flag: what it takes, its default and its help, "
           "as `zoo COMMAND --help` prints them. The flags are the fields of the command's config dataclass (its "
           "API entry is linked under each command). A switch that is on by default is turned off with its "
           "`--no-...` flag; a list is comma-separated (`--tasks LCQMC,BQ`); a repeatable flag is given once per "
           f"value. Old spellings, still accepted with a warning until zoo {REMOVED_IN}, are listed beside their "
           "flag.\n\n"
           "The recipes in `tasks/` (`python tasks/NAME.py`) take the flags of the command they write out, named "
           "under each command; `python tasks/NAME.py --help` lists them.\n\n"
           f"## zoo\n\n```text\n{usage(root)}\n```\n\n{flag_table(root, skip_help=False, grouped=False)}\n"
           f"| Command | What it does |\n|---|---|\n{listing}\n"]
    out += ["\n" + command_section(w, p, by_command, pages) for w, p, _ in found]
    return "".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/cli.md is not what would be written")
    args = parser.parse_args()
    text = page()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python tools/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
