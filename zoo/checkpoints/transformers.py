"""transformers checkpoints: read a folder (safetensors, sharded safetensors or pytorch_model.bin) as Google-named
arrays, and write a backbone as a transformers (and sentence-transformers) folder."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from ..errors import CheckpointError
from ..logs import log
from ..paths import write_json_atomic
from .mapping import backbone_arrays, bert_config, google_to_hf, hf_to_tf1
from .torch_zip import read_torch_zip


class HFCheckpoint:
    """A transformers state dict (safetensors, sharded safetensors or pytorch_model.bin) of a ``family``, named as
    that family's TF1 release names it (``mapping.hf_to_tf1``)."""

    def __init__(self, folder, family="bert"):
        self.folder = folder
        files = weight_files(folder)
        if not files:
            raise CheckpointError(
                f"{folder}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")
        self.file = files[0] if len(files) == 1 else folder
        self._arrays, self.shapes, self.ignored = {}, {}, []
        for f in files:
            for hf_name, array in read_state_dict(f).items():
                target = hf_to_tf1(family, hf_name)
                if target is None:
                    self.ignored.append(hf_name)
                    continue
                name, transpose = target
                self._arrays[name] = (array, transpose, f)
                self.shapes[name] = tuple(array.shape[::-1] if transpose else array.shape)

    def get(self, name):
        array, transpose, _ = self._arrays[name]
        array = np.asarray(array)
        return array.T if transpose else array


def weight_files(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(folder, s) for s in shards]
    for name in ("model.safetensors", "pytorch_model.bin"):
        if os.path.exists(os.path.join(folder, name)):
            return [os.path.join(folder, name)]
    return []


def read_state_dict(path):
    """A safetensors or PyTorch file as {transformers name: numpy array}."""
    if path.endswith(".safetensors"):
        from safetensors.numpy import load_file

        try:
            return load_file(path)
        except Exception as e:
            raise CheckpointError(f"{path}: cannot read safetensors file ({e})") from None
    if zipfile.is_zipfile(path):  # torch >= 1.6: read without torch (zoo never loads a second runtime)
        return read_torch_zip(path)
    try:
        import torch
    except ImportError:
        return read_torch_zip(path)  # names the legacy format and asks for torch
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path}: cannot read PyTorch file ({e})") from None
    return {k: v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy() for k, v in state.items()}


def save_transformers(backbone, folder, tokenizer=None, pooling=None, maxlen=None):
    """Write a backbone as a transformers BertModel folder (``config.json``, ``model.safetensors``, vocab).

    :param backbone: a ``BertBackbone``.
    :param folder: the folder to write.
    :param tokenizer: its tokenizer (None: no vocabulary).
    :param pooling: "cls" or "mean": also the sentence-transformers modules (Transformer, Pooling, Normalize), so
        ``SentenceTransformer(folder)`` embeds as the zoo SentenceEncoder does (None: BertModel only).
    :param maxlen: the sentence-transformers ``max_seq_length``.
    """
    from safetensors.numpy import save_file

    config = bert_config(backbone)  # refuses a family zoo does not write, before anything is written
    os.makedirs(folder, exist_ok=True)
    state = {}
    for name, array in backbone_arrays(backbone).items():
        target = google_to_hf(name)
        if target is not None:
            state[target[0]] = np.ascontiguousarray(array.T if target[1] else array, dtype="float32")
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    write_json_atomic(os.path.join(folder, "config.json"), {"architectures": ["BertModel"], "model_type": "bert",
                                                      "pad_token_id": 0, **config})
    if tokenizer is not None:
        tokenizer.save_to_preset(folder)
        write_json_atomic(os.path.join(folder, "tokenizer_config.json"),
                    {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": maxlen or 512})
    if pooling in ("cls", "mean"):
        write_json_atomic(os.path.join(folder, "modules.json"), [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
        write_json_atomic(os.path.join(folder, "sentence_bert_config.json"), {"max_seq_length": maxlen or 512,
                                                                         "do_lower_case": False})
        os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
        os.makedirs(os.path.join(folder, "2_Normalize"), exist_ok=True)
        write_json_atomic(os.path.join(folder, "1_Pooling", "config.json"), {
            "word_embedding_dimension": backbone.hidden_dim, "pooling_mode_cls_token": pooling == "cls",
            "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False})
    elif pooling is not None:
        log.warning("zoo writes sentence-transformers modules for cls and mean pooling only (not %r): %s holds the "
                    "transformers model only", pooling, folder)
    return folder
