"""ELECTRA discriminators (Clark et al. 2020; chinese-electra small/base): BERT whose embeddings (``embedding_size``)
are projected to the hidden size, with no pooler in the checkpoint (``pooled_output`` stays random: pool with
``cls`` or ``mean``). Checkpoints: the TF1 releases (``electra/...`` names) and transformers' ``ElectraModel`` /
``ElectraForPreTraining`` folders; a generator (``ElectraForMaskedLM``) brings its MLM head."""

from __future__ import annotations

import keras

from .bert import BertBackbone


@keras.saving.register_keras_serializable(package="zoo")
class ElectraBackbone(BertBackbone):
    """BERT with projected embeddings where ``embedding_dim`` differs from ``hidden_dim``. Load one with
    ``from_preset``."""

    family = "electra"
