"""zoo's error classes (a leaf: imports nothing from zoo). Each message names the file, line, field or flag."""


class ZooError(Exception):
    """Base class of the errors zoo raises on purpose."""


class CheckpointError(ZooError, ValueError):
    """A checkpoint, preset or saved state that cannot be loaded; the message names the file and the variable."""


class DataError(ZooError, ValueError):
    """A bad data file; the message names the file and line."""


class ConfigError(ZooError, ValueError):
    """A bad setting (a flag or config field); the message names it. Raised before any work starts."""
