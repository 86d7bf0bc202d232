"""Google TF1 checkpoints (``bert_config.json`` + ``bert_model.ckpt.*``, bert4keras' format): read as arrays,
and write a backbone as one."""

from __future__ import annotations

import os
import re

import numpy as np

from ..errors import CheckpointError
from ..paths import GOOGLE_CONFIG, write_json_atomic
from .mapping import backbone_arrays, bert_config


class GoogleCheckpoint:
    """Variables of a TF1 checkpoint (``bert_model.ckpt.index`` + data files; TF checks each tensor's CRC-32C)."""

    def __init__(self, prefix):
        import tensorflow as tf

        self.file = prefix
        index = prefix + ".index"
        if not os.path.exists(index):
            raise CheckpointError(f"{index}: TF checkpoint index not found")
        try:
            self._reader = tf.train.load_checkpoint(prefix)
            shapes = self._reader.get_variable_to_shape_map()
        except Exception as e:  # noqa: BLE001 -- a damaged index, or a data file missing
            raise CheckpointError(f"{self._culprit(e)}: cannot read the TF checkpoint ({_first_line(e)})") from None
        self.names = {k: k for k in shapes}  # the name a mapping table uses -> the stored name
        self.shapes = {name: tuple(shapes[stored]) for name, stored in self.names.items()}

    def renamed(self, rename):
        """The same checkpoint with its names passed through ``rename`` (e.g. ELECTRA's ``electra/`` -> ``bert/``)."""
        self.names = {rename(name): stored for name, stored in self.names.items()}
        self.shapes = {rename(name): shape for name, shape in self.shapes.items()}
        return self

    def _culprit(self, error):
        """The file a TF error is about: a named data file, else the index."""
        data = re.search(r"\S*\.data-\d+-of-\d+", str(error))
        return data.group(0).rstrip(";:,") if data else self.file + ".index"

    def get(self, name):
        try:
            return np.asarray(self._reader.get_tensor(self.names.get(name, name)))
        except Exception as e:  # noqa: BLE001 -- a data file damaged (checksum), truncated or missing
            import glob

            data, shards = self._culprit(e), sorted(glob.glob(glob.escape(self.file) + ".data-*"))
            if data.endswith(".index"):
                data = shards[0] if len(shards) == 1 else f"{self.file}.data-*"
            raise CheckpointError(f"{data}: cannot read variable {name} ({_first_line(e)})") from None


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def save_google_checkpoint(backbone, folder, tokenizer=None):
    """Write a backbone as a Google TF1 folder (``bert_config.json``, ``bert_model.ckpt.*``, vocab), as bert4keras
    and Google's BERT read it.

    :param backbone: a ``BertBackbone``.
    :param folder: the folder to write.
    :param tokenizer: its tokenizer (None: no ``vocab.txt``).
    """
    import tensorflow as tf

    config = bert_config(backbone)  # refuses a family zoo does not write, before anything is written
    os.makedirs(folder, exist_ok=True)
    arrays = backbone_arrays(backbone)
    variables = {name: tf.Variable(a) for name, a in arrays.items()}
    tf.compat.v1.train.Saver(var_list=variables).save(None, os.path.join(folder, "bert_model.ckpt"))
    write_json_atomic(os.path.join(folder, GOOGLE_CONFIG), config)
    if tokenizer is not None:
        tokenizer.save_to_preset(folder)


def write_bert_config(backbone, path):
    """Google ``bert_config.json`` for a backbone."""
    write_json_atomic(path, bert_config(backbone))
