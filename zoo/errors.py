"""zoo's error classes (a leaf: imports nothing from zoo). Each message names the file, line, field or flag; a missing
optional package names the ``pip install 'zoo[...]'`` that brings it (``require``)."""


class ZooError(Exception):
    """Base class of the errors zoo raises on purpose."""


class CheckpointError(ZooError, ValueError):
    """A checkpoint, preset or saved state that cannot be loaded; the message names the file and the variable."""


class DataError(ZooError, ValueError):
    """A bad data file; the message names the file and line."""


class ConfigError(ZooError, ValueError):
    """A bad setting (a flag or config field); the message names it. Raised before any work starts."""


class MissingFileError(ZooError, FileNotFoundError):
    """A file or folder that must exist does not (a FileNotFoundError too); the message names it."""


class MissingExtra(ZooError, ImportError):
    """A feature whose optional packages are not installed; the message names the ``pip install 'zoo[...]'``."""


class ZooDeprecationWarning(DeprecationWarning):
    """A zoo name or call that still works but will be removed (``zoo.logs.warn_deprecated``); the tests turn it
    into an error, so zoo's own code never uses a deprecated spelling."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training: the state was saved at ``epoch`` / ``step`` in ``output``, where a rerun with the same
    command resumes. A KeyboardInterrupt, so code that handles Ctrl-C still sees one."""

    def __init__(self, output, epoch, step):
        super().__init__(f"interrupted at epoch {epoch}, step {step}: saved in {output}; rerun the same command to "
                         f"resume")
        self.output, self.epoch, self.step = output, epoch, step


def require(module, extra, feature):
    """``import module``, or MissingExtra naming ``pip install 'zoo[extra]'`` for ``feature``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(f"{feature} needs {module.split('.')[0]} ({e}): pip install 'zoo[{extra}]'") from None
