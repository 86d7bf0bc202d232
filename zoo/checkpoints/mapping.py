"""The one mapping table: Google TF1 BERT variable names <-> zoo ``BertBackbone`` weights <-> transformers
state-dict names, and BERT config keys <-> ``BertBackbone`` arguments. Every checkpoint format is read as
Google-named arrays (kernels [in, out]); ``variable_map`` is the whole truth about where they land."""

from __future__ import annotations

import numpy as np

from ..errors import CheckpointError
from ..paths import read_json_file

OPTIONAL_PREFIXES = ("bert/pooler/", "cls/predictions/")


def variable_map(backbone):
    """[(zoo weight path, Google variable name)] for every weight of ``backbone``."""
    rows = [
        ("token_embedding/embeddings", "bert/embeddings/word_embeddings"),
        ("position_embedding/embeddings", "bert/embeddings/position_embeddings"),
        ("segment_embedding/embeddings", "bert/embeddings/token_type_embeddings"),
        ("embeddings_layer_norm/gamma", "bert/embeddings/LayerNorm/gamma"),
        ("embeddings_layer_norm/beta", "bert/embeddings/LayerNorm/beta"),
    ]
    for i in range(backbone.num_layers):
        z, g = f"transformer_layer_{i}", f"bert/encoder/layer_{i}"
        for part in ("query", "key", "value"):
            rows += [(f"{z}/self_attention_layer/{part}/kernel", f"{g}/attention/self/{part}/kernel"),
                     (f"{z}/self_attention_layer/{part}/bias", f"{g}/attention/self/{part}/bias")]
        rows += [
            (f"{z}/self_attention_layer/attention_output/kernel", f"{g}/attention/output/dense/kernel"),
            (f"{z}/self_attention_layer/attention_output/bias", f"{g}/attention/output/dense/bias"),
            (f"{z}/self_attention_layer_norm/gamma", f"{g}/attention/output/LayerNorm/gamma"),
            (f"{z}/self_attention_layer_norm/beta", f"{g}/attention/output/LayerNorm/beta"),
            (f"{z}/feedforward_intermediate_dense/kernel", f"{g}/intermediate/dense/kernel"),
            (f"{z}/feedforward_intermediate_dense/bias", f"{g}/intermediate/dense/bias"),
            (f"{z}/feedforward_output_dense/kernel", f"{g}/output/dense/kernel"),
            (f"{z}/feedforward_output_dense/bias", f"{g}/output/dense/bias"),
            (f"{z}/feedforward_layer_norm/gamma", f"{g}/output/LayerNorm/gamma"),
            (f"{z}/feedforward_layer_norm/beta", f"{g}/output/LayerNorm/beta"),
        ]
    rows += [("pooler_dense/kernel", "bert/pooler/dense/kernel"), ("pooler_dense/bias", "bert/pooler/dense/bias")]
    if backbone.with_mlm:
        rows += [
            ("mlm_transform/kernel", "cls/predictions/transform/dense/kernel"),
            ("mlm_transform/bias", "cls/predictions/transform/dense/bias"),
            ("mlm_layer_norm/gamma", "cls/predictions/transform/LayerNorm/gamma"),
            ("mlm_layer_norm/beta", "cls/predictions/transform/LayerNorm/beta"),
            ("mlm_bias/bias", "cls/predictions/output_bias"),
        ]
    return rows


def google_shape(zoo_path, shape):
    """The Google-layout shape of a zoo weight (attention kernels are stored per head in Keras)."""
    if "/self_attention_layer/" in zoo_path and "attention_output" not in zoo_path:
        return (shape[0], shape[1] * shape[2]) if zoo_path.endswith("kernel") else (shape[0] * shape[1],)
    if zoo_path.endswith("attention_output/kernel"):
        return (shape[0] * shape[1], shape[2])
    return tuple(shape)


def hf_to_google(name):
    """transformers state-dict name -> (Google name, transpose?) or None for buffers/aliases."""
    n = name[len("bert."):] if name.startswith("bert.") else name
    if n.endswith("position_ids") or n.startswith("cls.predictions.decoder."):
        return None  # a buffer, or the decoder tied to the word embeddings / output bias
    if n == "cls.predictions.bias":
        return "cls/predictions/output_bias", False
    if n.startswith("cls.seq_relationship."):
        return ("cls/seq_relationship/output_weights" if n.endswith("weight")
                else "cls/seq_relationship/output_bias"), False
    parts = n.split(".")
    leaf = parts.pop()
    path = "/".join(parts).replace("encoder/layer/", "encoder/layer_")
    if parts and parts[-1] == "LayerNorm":
        return f"{path if n.startswith('cls.') else 'bert/' + path}/{'gamma' if leaf in ('weight', 'gamma') else 'beta'}", False
    if parts and parts[-1].endswith("embeddings"):
        return f"bert/{path}", False
    prefix = "" if n.startswith("cls.") else "bert/"
    return (f"{prefix}{path}/kernel", True) if leaf == "weight" else (f"{prefix}{path}/bias", False)


def google_to_hf(name):
    """Google variable name -> (transformers BertModel state-dict name, transpose?); None for the MLM/NSP heads
    (``hf_to_google`` reversed, and checked against it)."""
    if not name.startswith("bert/"):
        return None
    parts = name[len("bert/"):].replace("encoder/layer_", "encoder/layer/").split("/")
    leaf = parts.pop()
    if leaf in ("word_embeddings", "token_type_embeddings", "position_embeddings"):
        parts, leaf = parts + [leaf], "weight"
    else:
        leaf = {"kernel": "weight", "gamma": "weight", "beta": "bias", "bias": "bias"}[leaf]
    hf = ".".join(parts + [leaf])
    transpose = name.endswith("/kernel")
    if hf_to_google(hf) != (name, transpose):
        raise AssertionError(f"name tables disagree on {name} -> {hf}")
    return hf, transpose


CONFIG_KEYS = {  # BertBackbone argument <- config key (same in Google and transformers configs)
    "vocabulary_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "hidden_dim": "hidden_size",
    "intermediate_dim": "intermediate_size",
    "max_sequence_length": "max_position_embeddings",
}


def read_bert_config(path):
    """``bert_config.json`` / transformers ``config.json`` -> BertBackbone keyword arguments."""
    config = read_json_file(path, "a BERT config")
    model_type = config.get("model_type", "bert")
    if model_type != "bert":  # Chinese RoBERTa-wwm / MacBERT checkpoints are model_type "bert"
        raise CheckpointError(f"{path}: model_type {model_type!r} is not supported (zoo reads BERT layouts)")
    missing = [k for k in CONFIG_KEYS.values() if k not in config]
    if missing:
        raise CheckpointError(f"{path}: missing field(s) {missing}")
    try:
        kwargs = {arg: int(config[key]) for arg, key in CONFIG_KEYS.items()}
        kwargs["num_segments"] = int(config.get("type_vocab_size", 2))
        kwargs["dropout"] = float(config.get("hidden_dropout_prob", 0.1))
        kwargs["layer_norm_epsilon"] = float(config.get("layer_norm_eps", 1e-12))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: a size or rate field is not a number ({e})") from None
    kwargs["activation"] = config.get("hidden_act", "gelu")
    if min(kwargs[k] for k in CONFIG_KEYS) < 1:
        raise CheckpointError(f"{path}: sizes must be positive, got {[config[k] for k in CONFIG_KEYS.values()]}")
    return kwargs


def bert_config(backbone):
    """The BERT config fields of a backbone (Google's ``bert_config.json``; transformers reads the same keys)."""
    return {
        "attention_probs_dropout_prob": backbone.dropout, "hidden_act": backbone.activation,
        "hidden_dropout_prob": backbone.dropout, "hidden_size": backbone.hidden_dim,
        "initializer_range": 0.02, "intermediate_size": backbone.intermediate_dim,
        "max_position_embeddings": backbone.max_sequence_length, "num_attention_heads": backbone.num_heads,
        "num_hidden_layers": backbone.num_layers, "type_vocab_size": backbone.num_segments,
        "vocab_size": backbone.vocabulary_size, "layer_norm_eps": backbone.layer_norm_epsilon,
    }


def backbone_arrays(backbone):
    """A backbone's weights as Google-named numpy arrays (the inverse of ``assign_weights``)."""
    weights = {w.path: w for w in backbone.weights}
    out = {}
    for zoo_path, name in variable_map(backbone):
        v = weights[zoo_path]
        out[name] = np.asarray(keras_to_numpy(v)).reshape(google_shape(zoo_path, tuple(v.shape)))
    return out


def keras_to_numpy(variable):
    from keras import ops

    return ops.convert_to_numpy(variable)
