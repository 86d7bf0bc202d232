"""``python -m zoo export|serve ...``: the same as the ``zoo`` command."""

from .cli import main

raise SystemExit(main())
