"""ERNIE 3.0 (Baidu; ernie-3.0-*-zh as converted for transformers): BERT plus task-type embeddings, whose row 0
(transformers' default ``task_type_ids``) is added to every position. Checkpoints: transformers' ``ErnieModel``
folders."""

from __future__ import annotations

import keras

from .bert import BertBackbone


@keras.saving.register_keras_serializable(package="zoo")
class ErnieBackbone(BertBackbone):
    """BERT with task-type embeddings (``task_type_vocabulary_size`` rows; row 0 is added). Load one with
    ``from_preset``.

    :param args: ``BertBackbone``'s arguments.
    :param task_type_vocabulary_size: rows of the task-type embedding (ERNIE 3.0's checkpoints have 3).
    :param kwargs: ``BertBackbone``'s arguments.
    """

    family = "ernie"

    def __init__(self, *args, task_type_vocabulary_size=3, **kwargs):
        super().__init__(*args, task_type_vocabulary_size=task_type_vocabulary_size, **kwargs)
