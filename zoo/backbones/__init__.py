"""zoo's backbones, one file per checkpoint family: BERT (``zoo.backbones.bert``: also RoBERTa-wwm and MacBERT, which are
BERT checkpoints), RoFormer (and RoFormer-Sim), ALBERT, ELECTRA and ERNIE. Each family is ``BertBackbone`` with the
options that family sets; its checkpoint names are its table in ``zoo.checkpoints.mapping``.
``BertBackbone.from_preset(path)`` returns the family a checkpoint holds.

NEZHA is not here: transformers no longer ships a NEZHA model (removed in transformers 5), so there is no reference
implementation to prove parity against.
"""

from .albert import AlbertBackbone
from .bert import FAMILIES, BertBackbone, backbone_inputs
from .electra import ElectraBackbone
from .ernie import ErnieBackbone
from .roformer import RoFormerBackbone

__all__ = ["FAMILIES", "AlbertBackbone", "BertBackbone", "ElectraBackbone", "ErnieBackbone", "RoFormerBackbone",
           "backbone_inputs"]
