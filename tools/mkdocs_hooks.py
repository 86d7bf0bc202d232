"""The manual's build hooks (mkdocs.yml ``hooks``): the repository's URL is set once, as ``url`` in setup.cfg; the
manual's repository link (``repo_url``) and its pages (``{{ repo_url }}``, e.g. the install page's ``git clone``)
read it from there."""

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


def on_config(config):
    config["repo_url"] = repository_url()
    return config


def on_page_markdown(markdown, page, config, files):
    return markdown.replace(PLACEHOLDER, config["repo_url"])
