"""The manual's build hooks (mkdocs.yml ``hooks``): the repository's URL is set once, as ``url`` in setup.cfg; the
manual's repository link (``repo_url``) and its pages (``{{ repo_url }}``, e.g. the install page's ``git clone``)
read it from there. The shipped presets' model cards (``data/presets/NAME/README.md``) are pages of the manual,
``models/NAME.md``, as they are (``card_pages``). The guides link the API names they use: an inline code span naming
a class, method or function of the API reference (``SentenceEncoder``, ``SentenceEncoder.encode``,
``zoo.data.read_pairs``) becomes a link to its entry (``api_names``, ``linked``)."""

from __future__ import annotations

import configparser
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLACEHOLDER = "{{ repo_url }}"
API = os.path.join(ROOT, "docs", "api")
ENTRY = re.compile(r"^::: ([\w.]+)\n(?:    options:\n(?:      .*\n)*?      members: (.*)\n)?", re.MULTILINE)
# an inline code span, not already a link's text: `zoo.data.read_pairs`, `SentenceEncoder.encode(texts)`
SPAN = re.compile(r"(?<![\[`])`((?:zoo\.(?:[a-z_]+\.)*)?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?))(?:\([^`]*\))?`(?![\]`])")


def repository_url():
    """setup.cfg's ``[metadata] url``."""
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"), encoding="utf-8")
    return config["metadata"]["url"]


def card_pages():
    """{page path in the manual: a shipped preset's model card} for every ``data/presets/NAME/README.md``."""
    presets = os.path.join(ROOT, "data", "presets")
    return {f"models/{name}.md": os.path.join(presets, name, "README.md") for name in sorted(os.listdir(presets))
            if os.path.isfile(os.path.join(presets, name, "README.md"))}


def api_names():
    """{name: (API page, anchor)} from the ``::: path`` entries of docs/api/*.md: a class by its name and each member
    its page lists (``SentenceEncoder.encode``), a function by its name (``read_pairs``, ``fit``)."""
    names = {}
    for page in sorted(os.listdir(API)):
        with open(os.path.join(API, page), encoding="utf-8") as f:
            text = f.read()
        for path, members in ENTRY.findall(text):
            name = path.rpartition(".")[2]
            names[name] = (f"api/{page}", path)
            for member in json.loads(members) if members and members != "false" else ():
                names[f"{name}.{member}"] = (f"api/{page}", f"{path}.{member}")
    return names


def linked(markdown, page_path, names):
    """``markdown`` with each inline code span that names an API entry (outside code blocks and headings) made a
    link to it, relative to ``page_path``: a class or its member as written (``SentenceEncoder.encode``, with or
    without ``zoo.`` and its module), a function by its name where that holds an underscore (``read_pairs``), else
    only with its module (``zoo.train.fit``: ``fit`` alone may be Keras')."""
    here = os.path.dirname(page_path) or "."
    out, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and not line.startswith("#"):
            def link(match):
                written, name = match[1], match[2]
                target = names.get(name)
                if target is None or (name.islower() and "_" not in name and written == name):
                    return match[0]
                return f"[{match[0]}]({os.path.relpath(target[0], here)}#{target[1]})"
            line = SPAN.sub(link, line)
        out.append(line)
    return "\n".join(out)


def on_files(files, config):
    from mkdocs.structure.files import File

    for page, card in card_pages().items():
        with open(card, encoding="utf-8") as f:
            files.append(File.generated(config, page, content=f.read()))
    return files


def on_config(config):
    config["repo_url"] = repository_url()
    # mkdocs derives the header's repository name from repo_url before hooks run: from the URL, as it would
    config["repo_name"] = "/".join(config["repo_url"].rstrip("/").split("/")[-2:])
    return config


def on_page_markdown(markdown, page, config, files):
    markdown = markdown.replace(PLACEHOLDER, config["repo_url"])
    if page.file.src_uri.startswith("api/"):
        return markdown
    return linked(markdown, page.file.src_uri, api_names())
