"""``python -m zoo COMMAND ...``: the same as the ``zoo`` command."""

from .cli import main

raise SystemExit(main())
