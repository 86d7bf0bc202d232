"""The manual's build hooks (mkdocs.yml ``hooks``): the repository's URL is set once, as ``url`` in setup.cfg; the
manual's repository link (``repo_url``) and its pages (``{{ repo_url }}``, e.g. the install page's ``git clone``)
read it from there. The shipped presets' model cards (``data/presets/NAME/README.md``) are pages of the manual,
``models/NAME.md``, as they are (``card_pages``)."""

from __future__ import annotations

import configparser
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLACEHOLDER = "{{ repo_url }}"


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


def on_files(files, config):
    from mkdocs.structure.files import File

    for page, card in card_pages().items():
        with open(card, encoding="utf-8") as f:
            files.append(File.generated(config, page, content=f.read()))
    return files


def on_config(config):
    config["repo_url"] = repository_url()
    return config


def on_page_markdown(markdown, page, config, files):
    return markdown.replace(PLACEHOLDER, config["repo_url"])
