"""ALBERT (Lan et al. 2019; albert_chinese_tiny/small/base...): factorised embeddings (``embedding_size``, projected
to ``hidden_size``) and one transformer layer shared by every depth. Checkpoints: Google's TF1 releases
(``bert/encoder/transformer/group_0/inner_group_0/...``) and transformers' ``AlbertModel`` folders."""

from __future__ import annotations

import keras

from .bert import BertBackbone


@keras.saving.register_keras_serializable(package="zoo")
class AlbertBackbone(BertBackbone):
    """BERT with factorised embeddings (always projected) and one transformer layer applied ``num_layers`` times.
    Load one with ``from_preset``.

    :param args: ``BertBackbone``'s arguments.
    :param shared_layers: True (the family's default).
    :param project_embeddings: True (the family's default).
    :param kwargs: ``BertBackbone``'s arguments.
    """

    family = "albert"

    def __init__(self, *args, shared_layers=True, project_embeddings=True, **kwargs):
        super().__init__(*args, shared_layers=shared_layers, project_embeddings=project_embeddings, **kwargs)
