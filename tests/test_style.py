"""The repository passes ruff (configured in pyproject.toml): unused imports, undefined names, style errors."""

import os
import subprocess
import sys

from helpers import require_installed

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_is_clean():
    require_installed("ruff", install="pip install -e '.[dev]'")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
