"""zoo's task models: one file each, on the shared ``Task`` base."""

from ..presets import preset_class_name
from .bi_encoder import SBERTClassifier, SentenceEncoder, build_pair_trainer, build_trainer
from .cross_encoder import CrossEncoder
from .preprocessor import TextPreprocessor
from .simbert import SimBERT
from .task import Task

TASKS = {cls.__name__: cls for cls in (SentenceEncoder, CrossEncoder, SimBERT)}


def from_preset(path, pooling=None, maxlen=None, **kwargs):
    """Whatever task model ``path`` holds: a SentenceEncoder, CrossEncoder or SimBERT preset, run folder or ``.keras``
    file as saved (``maxlen`` may be changed); anything else -- a Google TF1 or transformers folder, a backbone
    preset -- becomes a SentenceEncoder; a sentence-transformers folder with its own pooling, Dense layers,
    normalisation and max_seq_length.

    ```python
    model = zoo.from_preset("zoo-embed-zh-L4")
    ```

    :param path: a preset name, a folder, a ``.keras`` file or a TF1 ckpt prefix.
    :param pooling: for a new SentenceEncoder (None: "cls").
    :param maxlen: tokens per text (None: the saved model's, or 64 for a new SentenceEncoder).
    :param kwargs: the class' ``from_preset`` arguments.
    """
    stored = preset_class_name(path)
    if stored in TASKS:
        return TASKS[stored].from_preset(path, pooling=pooling, maxlen=maxlen, **kwargs)
    return SentenceEncoder.from_preset(path, pooling=pooling, maxlen=maxlen, **kwargs)


__all__ = ["CrossEncoder", "SBERTClassifier", "SentenceEncoder", "SimBERT", "TASKS", "Task", "TextPreprocessor",
           "build_pair_trainer",
           "build_trainer", "from_preset"]
