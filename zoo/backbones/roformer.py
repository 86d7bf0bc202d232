"""RoFormer (Su et al. 2021) and RoFormer-Sim (SimBERT v2): BERT with rotary position embeddings in every
self-attention layer (``zoo.backbones.rotary``) instead of a learned position table; factorised embeddings where the
checkpoint's ``embedding_size`` differs from ``hidden_size``. Checkpoints: bert4keras' TF1 releases (BERT's
variable names without ``position_embeddings``) and transformers' ``RoFormerModel`` folders."""

from __future__ import annotations

import keras

from .bert import BertBackbone


@keras.saving.register_keras_serializable(package="zoo")
class RoFormerBackbone(BertBackbone):
    """BERT with rotary position embeddings (``position_encoding="rotary"``); ``rotary_value=True`` rotates the
    values too (transformers' ``rotary_value``). Load one with ``from_preset``.

    :param args: ``BertBackbone``'s arguments.
    :param position_encoding: "rotary" (the family's default).
    :param kwargs: ``BertBackbone``'s arguments.
    """

    family = "roformer"

    def __init__(self, *args, position_encoding="rotary", **kwargs):
        super().__init__(*args, position_encoding=position_encoding, **kwargs)
