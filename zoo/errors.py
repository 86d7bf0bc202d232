"""zoo's error classes (a leaf: imports nothing from zoo). Each message names the file, line, field or flag; a missing
optional package names the ``pip install 'zoo[...]'`` that brings it (``require``)."""


class ZooError(Exception):
    """Base class of the errors zoo raises on purpose.

    ```python
    try:
        zoo.data.read_pairs("pairs.tsv")
    except zoo.DataError as error:       # a ValueError too
        print(error)                     # pairs.tsv, line 2: field 2 (text_b): empty text
    ```

    :param message: what went wrong, naming the file, line, field or flag.
    :param param: the parameter the message names (a library function's argument or a config field), which the
        command line spells as its flag (``naming``).
    """

    def __init__(self, message="", param=None):
        super().__init__(message)
        self.param = param

    def naming(self, spelling):
        """The message with its parameter's name, where it first appears, written as ``spelling``.

        :param spelling: e.g. the flag, "--columns".
        """
        import re

        message = str(self)
        if not self.param:
            return message
        return re.sub(rf"(?<![\w-]){re.escape(self.param)}(?![\w-])", lambda _: spelling, message, count=1)


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
    command resumes. A KeyboardInterrupt, so code that handles Ctrl-C still sees one.

    :param output: the run folder.
    :param epoch: the epoch the state was saved at.
    :param step: the step the state was saved at.
    """

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
