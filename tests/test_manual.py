"""The manual's reference parts, checked against what they document: the command-line page (docs/cli.md) against
the ``zoo`` parser, the navigation against the pages under docs/, and the built API reference against the source
(constructors' parameters, config fields, code examples rendered as code)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import html
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import require_module

from zoo.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


# ------------------------------------------------------------------------------ docs/cli.md
def command_parsers(parser, words=()):
    """(words, parser) of ``zoo`` and of every command that runs something (the ``zoo train`` group left out)."""
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands or not words:
        yield words, parser
    for action in subcommands:
        for name, sub in action.choices.items():
            yield from command_parsers(sub, (*words, name))


def section(text, words):
    """The part of docs/cli.md under ``## zoo WORDS``."""
    heading = "## " + " ".join(("zoo", *words))
    assert f"\n{heading}\n" in text, f"docs/cli.md has no section {heading!r}"
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def row_of(part, option):
    """The table row (unescaped) whose first cell names ``option``."""
    rows = [line for line in part.splitlines() if line.startswith("| ") and f"`{option}`" in line.split(" | ")[0]]
    assert len(rows) == 1, f"{option}: {len(rows)} rows"
    return html.unescape(rows[0]).replace("\\|", "|")


def expected_default(action):
    """The default cell as the page should show it (backticks left out), from the parser."""
    if action.required:
        return "required"
    if action.nargs == 0:  # a switch
        return "" if action.default == argparse.SUPPRESS else "off"
    default = action.default
    if default is None or default == ():
        return "none"
    if isinstance(default, tuple):
        return ",".join(map(str, default))
    return str(default) if default != "" else '""'


def test_cli_page_lists_every_flag_with_its_help_and_default():
    """Every option string of every command (old spellings included) is in its command's section of docs/cli.md,
    in a row with the help text ``--help`` prints (its "(default: ...)" left to the Default column) and the parser's
    default."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    checked = 0
    for words, parser in command_parsers(build_parser()):
        part = section(text, words)
        for action in parser._actions:
            if not action.option_strings or (words and isinstance(action, argparse._HelpAction)):
                continue
            if action.help == argparse.SUPPRESS:  # an old spelling: beside the flag that replaces it
                for option in action.option_strings:
                    assert f"`{option}`" in row_of(part, action.replacement).split(" | ")[0], (words, option)
                continue
            row = row_of(part, action.option_strings[0])
            help_text = argparse.HelpFormatter(parser.prog)._expand_help(action)
            for repeated in (f" (default: {expected_default(action)})", f" (default: {action.default})",
                             f" (comma-separated; default: {expected_default(action)})", " (comma-separated)"):
                help_text = help_text.removesuffix(repeated)  # the Default column (and Takes) say it once
            assert help_text in row, (words, action.option_strings, help_text)
            assert "(default: " not in row.split(" | ")[3] or "(default: " in help_text, row
            default = row.split(" | ")[2].strip("`")
            assert default == expected_default(action), (words, action.option_strings, default)
            checked += 1
    assert checked > 100, checked  # the walk found the commands' flags


def test_cli_page_is_up_to_date():
    done = subprocess.run([sys.executable, "tools/cli_reference.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_cli_page_groups_the_flags_and_shows_an_example_per_command():
    """Each command's section opens with an example of it (its flags are checked with the page's no-run blocks) and
    lists its flags in groups, data first, deprecated ones last (--train-files after --output)."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    for words, _ in command_parsers(build_parser()):
        if words:
            part = section(text, words)
            assert f"```bash\nzoo {' '.join(words)} " in part.split("```text", 1)[0], words
    part = section(text, ["train", "bi-encoder"])
    headings = re.findall(r"^\*\*(.+)\*\*$", part, re.MULTILINE)
    assert headings[0] == "Data" and headings[-1] == "Deprecated" and "Training" in headings, headings
    assert part.index("`--output`") < part.index("`--train-files`")
    assert part.index("**Training**") < part.index("`--ema-momentum`")


def test_cli_page_names_each_recipe_under_its_command():
    """Each ``tasks/*.py`` that takes a command's flags (``zoo.job("COMMAND")``) is named in that command's section."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    recipes = 0
    for path in sorted((ROOT / "tasks").glob("*.py")):
        match = re.search(r'zoo\.job\("([^"]+)"\)', path.read_text(encoding="utf-8"))
        if match:
            assert f"`python tasks/{path.name}`" in section(text, match[1].split()), path.name
            recipes += 1
    assert recipes >= 5


# ------------------------------------------------------------------------------ the navigation
def nav_pages(entry):
    """Every page a mkdocs ``nav`` entry names (nested sections, section index pages and titled pages)."""
    if isinstance(entry, str):
        return set() if "://" in entry else {entry}
    if isinstance(entry, list):
        return set().union(*(nav_pages(e) for e in entry)) if entry else set()
    if isinstance(entry, dict):
        return set().union(*(nav_pages(v) for v in entry.values())) if entry else set()
    return set()


def read_mkdocs_yml():
    yaml = require_module("yaml", "pip install -e '.[docs]'")

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)  # !!python/name: tags and the like
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


def test_every_page_is_in_the_navigation():
    """A page under docs/ (or a shipped preset's model card, a page of the build: tools/mkdocs_hooks.py) that no nav
    entry names is only reachable by a link (mkdocs merely logs it)."""
    listed = nav_pages(read_mkdocs_yml()["nav"])
    cards = {f"models/{p.parent.name}.md" for p in (ROOT / "data" / "presets").glob("*/README.md")}  # the build's
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")} | cards
    assert not listed - pages, f"nav entries without a page: {sorted(listed - pages)}"
    assert not pages - listed, f"pages missing from mkdocs.yml's nav: {sorted(pages - listed)}"


def test_nav_walk_finds_nested_and_index_pages():
    nav = [{"Home": "index.md"}, {"Results": ["results/index.md", {"Speed": "results/speed.md"}]},
           {"Code": "https://example.org/"}]
    assert nav_pages(nav) == {"index.md", "results/index.md", "results/speed.md"}


# ------------------------------------------------------------------------------ the API reference
@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The manual built once (``mkdocs build --strict``) for the API checks."""
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        require_module(module, "pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    return out


def entry(page_html, object_id):
    """The HTML of one API entry: from its heading to the next heading of the same or a higher level."""
    assert f'id="{object_id}"' in page_html, f"no API entry {object_id}"
    start = page_html.rfind("<h", 0, page_html.index(f'id="{object_id}"'))
    level = int(page_html[start + 2])
    after = start + 3
    end = next((m.start() for m in re.finditer(r"<h([1-6])[ >]", page_html[after:]) if int(m[1]) <= level), None)
    return page_html[start:after + end if end is not None else len(page_html)]


def text_of(fragment):
    """An HTML fragment's text, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def init_parameters(path, class_name):
    """The parameter names of ``class_name.__init__`` in the source file ``path`` (self and **kwargs left out)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return [a.arg for a in init.args.args[1:] + init.args.kwonlyargs]


@pytest.mark.parametrize("page, object_id, path", [
    ("sentence-encoder", "zoo.models.bi_encoder.SentenceEncoder", "zoo/models/bi_encoder.py"),
    ("cross-encoder", "zoo.models.cross_encoder.CrossEncoder", "zoo/models/cross_encoder.py"),
    ("semantic-index", "zoo.retrieval.base.SemanticIndex", "zoo/retrieval/base.py"),
])
def test_api_reference_shows_constructor_parameters(site, page, object_id, path):
    """A class's heading carries its ``__init__`` parameters (merge_init_into_class)."""
    text = (site / "api" / page / "index.html").read_text(encoding="utf-8")
    heading = text_of(entry(text, object_id).split("</h", 1)[0])
    parameters = init_parameters(path, object_id.rsplit(".", 1)[1])
    assert len(parameters) >= 4, parameters
    assert all(re.search(rf"[(,] ?{p}\b", heading) for p in parameters), (parameters, heading)


def test_api_reference_shows_from_preset(site):
    """The models' ``from_preset`` (on ``Task``, their base) is documented on each model's page with its
    parameters."""
    for page, name in (("sentence-encoder", "bi_encoder.SentenceEncoder"), ("cross-encoder", "cross_encoder.CrossEncoder"),
                       ("simbert", "simbert.SimBERT")):
        model = entry((site / "api" / page / "index.html").read_text(encoding="utf-8"), f"zoo.models.{name}")
        assert re.search(r"from_preset\(path\b", text_of(entry(model, f"zoo.models.{name}.from_preset")))


def test_api_reference_shows_config_fields(site):
    """A job's config class lists its own fields with their type, default and help text (zoo.config.option)."""
    from zoo.jobs.bi_encoder import BiEncoderConfig

    text = (site / "api" / "jobs" / "index.html").read_text(encoding="utf-8")
    own = BiEncoderConfig.__dict__["__annotations__"]
    fields = [f for f in dataclasses.fields(BiEncoderConfig) if f.name in own and f.metadata.get("help")]
    assert len(fields) > 10
    for field in fields:
        shown = text_of(entry(text, f"zoo.jobs.bi_encoder.BiEncoderConfig.{field.name}"))
        assert shown.startswith(f"{field.name}: {own[field.name]} = {field.default!r}"), (field.name, shown)
        assert " ".join(field.metadata["help"].split()) in shown, (field.name, shown)


def test_api_reference_renders_examples_as_code(site):
    """Docstring examples are code blocks: a ``>>>`` prompt in a docstring renders as nested blockquotes."""
    for page in sorted((site / "api").rglob("index.html")):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"<blockquote>\s*<blockquote>", text) and "&gt;&gt;&gt;" not in text, page
    models = (site / "api" / "sentence-encoder" / "index.html").read_text(encoding="utf-8")
    example = entry(models, "zoo.models.bi_encoder.SentenceEncoder")
    assert '<div class="highlight"><pre>' in example.split('id="zoo.models.bi_encoder.SentenceEncoder.', 1)[0]


def api_entries():
    """[(API page, object path, listed members or None)] of the ``::: path`` entries of docs/api/*.md."""
    sys.path.insert(0, str(ROOT / "tools"))
    from mkdocs_hooks import ENTRY

    found = []
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        for path, members in ENTRY.findall(page.read_text(encoding="utf-8")):
            found.append((page.stem, path, json.loads(members) if members and members != "false" else [] if members
                          else None))
    return found


def api_object(path):
    import importlib

    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:  # a class: module.Class
        module, _, owner = module.rpartition(".")
        return getattr(getattr(importlib.import_module(module), owner), name)


def documented_parameters(obj):
    """The names of the ``:param name:`` fields of ``obj``'s docstring."""
    return set(re.findall(r"^\s*:param (\w+):", inspect.getdoc(obj) or "", re.MULTILINE))


def undocumented(function, documented_on):
    """The parameters of ``function`` (self and cls left out) that ``documented_on``'s docstring leaves out."""
    names = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
    return [p for p in names if p not in documented_parameters(documented_on)]


def test_api_docstrings_document_every_parameter():
    """Docstrings in one style (Sphinx fields, CONTRIBUTING.md): every parameter of every callable the API reference
    shows -- a class's constructor, the members its page lists, a function -- has a ``:param name:`` field. A class
    is documented in its own docstring, or where its ``__init__`` is (a family's backbone without one by
    BertBackbone); config classes document their fields instead (zoo.config.option, tested above)."""
    missing, checked = [], 0
    for page, path, members in api_entries():
        obj = api_object(path)
        if inspect.isclass(obj):
            if dataclasses.is_dataclass(obj) and path.endswith("Config"):
                continue
            owner = next((c for c in obj.__mro__ if "__init__" in vars(c)), None)
            if owner is not None and owner.__module__.startswith("zoo"):
                documented_on = obj if documented_parameters(obj) else owner  # a mixin's __init__: on the class
                missing += [f"{page}: {obj.__name__}({p})" for p in undocumented(owner.__init__, documented_on)]
                checked += 1
            for member in members or ():
                function = inspect.getattr_static(obj, member)
                function = getattr(function, "__func__", function)
                if inspect.isfunction(function):
                    missing += [f"{page}: {path}.{member}({p})" for p in undocumented(function, function)]
                    checked += 1
        else:
            missing += [f"{page}: {path}({p})" for p in undocumented(obj, obj)]
            checked += 1
    assert checked > 100, checked
    assert not missing, missing


def test_api_pages_each_show_an_example_and_hide_internals(site):
    """Each page of the API reference (by class or concept) shows a runnable example, documents BertBackbone once,
    and shows none of the internals the module-by-module reference used to (layers, activations, protobufs)."""
    pages = sorted(p for p in (site / "api").glob("*/index.html"))
    assert len(pages) >= 12, pages
    backbone = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        content = text.split('<article', 1)[1]
        assert '<div class="highlight"><pre>' in content, f"{page.parent.name}: no example"
        backbone += text.count('id="zoo.backbones.bert.BertBackbone"')
        for internal in ("BiasAdd", "gelu_tanh", "merged_attention_mask", "serving.protos"):
            assert not re.search(rf'id="zoo\.[\w.]*{re.escape(internal)}', text), (page.parent.name, internal)
        private = re.findall(r'id="(zoo\.[\w.]*\.(?:_[^_"]\w*|__(?!init__|call__)\w+__))"', text)
        assert not private, (page.parent.name, private)
    assert backbone == 1


def test_guides_link_the_api_names_they_use(site):
    """Where a guide names a class of the API reference in an inline code span, the name links to its entry (the
    build hook, tools/mkdocs_hooks.py ``linked``); code blocks are left as they are."""
    classes = {path.rpartition(".")[2]: (page, path) for page, path, _ in api_entries()
               if path.rpartition(".")[2][0].isupper()}
    linked = unlinked = 0
    for html_file in sorted(site.rglob("index.html")):
        relative = html_file.relative_to(site).as_posix()
        if relative.startswith(("api/", "search/")):
            continue
        text = html_file.read_text(encoding="utf-8").split('<article', 1)[-1]
        for match in re.finditer(r"(<a [^>]*>)?<code>(?:zoo\.)?([A-Z]\w+)</code>", text):
            if match[2] in classes:
                if match[1] and f"api/{classes[match[2]][0]}/#{classes[match[2]][1]}" in match[1]:
                    linked += 1
                else:
                    unlinked += 1
                    assert match[1], f"{relative}: `{match[2]}` is not a link"
    assert linked >= 20, linked
    bi_encoders = (site / "bi-encoders" / "index.html").read_text(encoding="utf-8")
    assert 'href="../api/sentence-encoder/#zoo.models.bi_encoder.SentenceEncoder"' in bi_encoders


def test_the_link_hook_leaves_code_blocks_headings_and_links_alone():
    sys.path.insert(0, str(ROOT / "tools"))
    from mkdocs_hooks import api_names, linked

    names = api_names()
    text = ("Call `SentenceEncoder.encode(texts)`, `zoo.train.fit` and `read_pairs`; not `fit` nor `encode`.\n"
            "```python\nenc = `SentenceEncoder`\n```\n## `SentenceEncoder`\n[`SentenceEncoder`](x.md)")
    out = linked(text, "guide/page.md", names).split("\n")
    assert out[0] == ("Call [`SentenceEncoder.encode(texts)`](../api/sentence-encoder.md#zoo.models.bi_encoder."
                      "SentenceEncoder.encode), [`zoo.train.fit`](../api/training.md#zoo.train.loop.fit) and "
                      "[`read_pairs`](../api/data.md#zoo.data.pair_files.read_pairs); not `fit` nor `encode`.")
    assert out[1:] == text.split("\n")[1:]


def test_pretrained_models_page_has_a_row_per_model_from_the_one_results_file(site):
    """The pretrained-models page (sbert.net's, keras.io's): each model of bench_models' results file with its
    parameters, dimension and input length, size, speed, five-task mean, licence and use; zoo's own link to their
    cards, which are pages of the manual."""
    data = json.loads((ROOT / "bench" / "results" / "model_choice.json").read_text(encoding="utf-8"))
    text = (site / "pretrained-models" / "index.html").read_text(encoding="utf-8")
    table = text.split("<table", 1)[1].split("</table>", 1)[0]
    header = text_of(table.split("<thead", 1)[1].split(">", 1)[1].split("</thead>", 1)[0])
    assert header == "model parameters dim / max tokens size sentences/s 5-task mean licence intended use", header
    body = table.split("<tbody>", 1)[1]
    rows = body.split("</tr>")[:-1]
    assert len(rows) == len(data["rows"])
    for row, model in zip(rows, data["rows"]):
        cells = [text_of(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)]
        assert cells[0].startswith(model["model"]), (cells, model["model"])
        assert cells[1:6] == [f"{model['parameters'] / 1e6:.1f} M", f"{model['dim']} / {model['max_tokens']}",
                              f"{model['size_bytes'] / 2**20:.0f} MiB", f"{model['sentences_per_second']:,.0f}",
                              f"{model['mean']:.2f}"], cells
        assert cells[6:] == [model["licence"], model["use"]], cells
        if model["kind"] == "zoo preset":
            assert f'href="../models/{model["model"]}/"' in row
            assert (site / "models" / model["model"] / "index.html").exists()


def test_the_speed_page_explains_every_system_it_measures():
    """Every system name in the speed page's tables (st_onnx_o1, zoo_light_int8 ...) is explained in its legend."""
    text = (ROOT / "docs" / "results" / "speed.md").read_text(encoding="utf-8")
    legend = text.split("### ", 1)[0]
    named = set(re.findall(r"`([a-z][\w-]*\*?)`", legend))
    systems = set(re.findall(r"^\| ((?:zoo|st|transformers)_[\w-]+) \|", text, re.MULTILINE))
    assert len(systems) >= 10, systems
    unexplained = [s for s in systems if s not in named and not any(n.endswith("*") and s.startswith(n[:-1])
                                                                    for n in named)]
    assert not unexplained, unexplained


def test_search_finds_chinese_words(site):
    """The built search index splits text where the search plugin's jieba put zero-width spaces between Chinese
    words (its dictionary plus tools/search_words.txt, which keeps product names like 花呗 whole), so a Chinese word a
    page contains is a search term; with whitespace and hyphens alone (the default separator) it is not."""
    import json
    import re

    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    separator = index["config"]["separator"]

    def pages_with(word, pattern):
        return [doc["location"] for doc in index["docs"] if word in re.split(pattern, doc["text"])]

    assert pages_with("花呗", separator), separator
    assert not pages_with("花呗", r"[\s\-]+")  # the default separator: no Chinese word is a term


WIDE_PAGES = ("cli/", "recipes/", "data/", "results/models/", "results/speed/", "getting-started/")
LAYOUT = """
const content = document.querySelector('.md-content__inner').getBoundingClientRect();
const code = [...document.querySelectorAll('.md-content pre > code')];
const words = [...document.querySelectorAll('.md-content code .zoo-word')];
return {content: content.width,
        code_blocks: code.length,
        scrolling: code.filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.textContent.split('\\n')[0]),
        wide_tables: [...document.querySelectorAll('.md-content table')].filter(
            t => t.getBoundingClientRect().right > content.right + 1).map(t => t.rows[0].textContent.trim()),
        kept_words: words.length,
        broken_words: words.filter(w => w.getClientRects().length > 1).map(w => w.textContent)};
"""


@pytest.fixture(scope="module")
def site_in_browser(site, tmp_path_factory):
    """(a headless Chromium in a 1280x800 window, the address of the built manual served over HTTP)."""
    import functools
    import http.server
    import threading

    from helpers import chromium

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with chromium(tmp_path_factory.mktemp("profile"), 1280, 800) as browser:
            yield browser, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


@pytest.mark.slow
def test_pages_hold_their_code_and_tables_at_1280_px(site_in_browser):
    """In a 1280x800 window (headless Chromium), the manual's 120-column code blocks on the CLI, recipes, data and
    getting-started pages do not scroll sideways, no table runs past the content column (the results pages' widest
    ones included), and no flag breaks inside its name (docs/stylesheets/extra.css, docs/javascripts/extra.js)."""
    browser, base = site_in_browser
    for page in WIDE_PAGES:
        browser.get(f"{base}/{page}")
        layout = browser.execute_script(LAYOUT)
        assert layout["content"] >= 960, (page, layout["content"])
        assert not layout["scrolling"] and not layout["wide_tables"], (page, layout)
        assert not layout["broken_words"], (page, layout["broken_words"])
        if page == "cli/":
            assert layout["code_blocks"] >= 10 and layout["kept_words"] > 100, layout


@pytest.mark.slow
def test_the_home_page_first_screen_shows_an_example_and_its_output(site_in_browser):
    """At 1280x800 the home page's first screen holds what zoo is, its first runnable example and that example's
    output (the block the docs test compares with what the example prints)."""
    browser, base = site_in_browser
    browser.get(f"{base}/")
    blocks = browser.execute_script("""
        return [...document.querySelectorAll('.md-content .highlight')].slice(0, 2).map(b => ({
            bottom: b.getBoundingClientRect().bottom, text: b.textContent}));""")
    assert len(blocks) == 2 and "from_preset" in blocks[0]["text"] and "如何开通花呗" in blocks[1]["text"], blocks
    assert all(b["bottom"] <= 800 for b in blocks), [b["bottom"] for b in blocks]


def test_each_shipped_model_card_is_a_page(site):
    """Every data/presets/NAME/README.md is the page models/NAME/ of the built manual: its title and scores table."""
    cards = sorted((ROOT / "data" / "presets").glob("*/README.md"))
    assert len(cards) >= 2
    for card in cards:
        page = text_of((site / "models" / card.parent.name / "index.html").read_text(encoding="utf-8"))
        assert card.parent.name in page and "test Spearman" in page, card


def test_the_repository_url_is_set_once(site):
    """setup.cfg's url is the manual's repository link and the install page's ``git clone`` address; no page and
    not mkdocs.yml writes it again (tools/mkdocs_hooks.py reads it)."""
    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    url = config["metadata"]["url"]
    assert f'href="{url}"' in (site / "index.html").read_text(encoding="utf-8")  # the header's repository link
    assert f"git clone {url} " in text_of((site / "install" / "index.html").read_text(encoding="utf-8"))
    written = [p for p in [ROOT / "mkdocs.yml", ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
               if url in p.read_text(encoding="utf-8")]
    assert not written, written
