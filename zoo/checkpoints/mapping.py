"""The mapping tables, one per checkpoint family: TF1 variable names <-> zoo backbone weights <-> transformers
state-dict names, and config keys <-> backbone arguments. Every checkpoint format is read as arrays named as in
the family's TF1 release (Google BERT's names for BERT and for the relatives that kept them -- RoFormer as bert4keras
releases it, ELECTRA, ERNIE --, Google ALBERT's for ALBERT; kernels [in, out]); ``variable_map`` is the whole truth
about where they land."""

from __future__ import annotations

import numpy as np

from ..errors import CheckpointError
from ..paths import read_json_file

OPTIONAL_PREFIXES = ("bert/pooler/", "cls/predictions/")


def variable_map(backbone):
    """[(zoo weight path, TF1 variable name)] for every weight of ``backbone``: its family's table."""
    return TABLES[backbone.family](backbone)


def embedding_rows(backbone):
    """The embedding block's rows (the same names in every family's TF1 release)."""
    rows = [("token_embedding/embeddings", "bert/embeddings/word_embeddings")]
    if backbone.position_encoding == "absolute":
        rows.append(("position_embedding/embeddings", "bert/embeddings/position_embeddings"))
    rows += [
        ("segment_embedding/embeddings", "bert/embeddings/token_type_embeddings"),
        ("embeddings_layer_norm/gamma", "bert/embeddings/LayerNorm/gamma"),
        ("embeddings_layer_norm/beta", "bert/embeddings/LayerNorm/beta"),
    ]
    if backbone.task_type_vocabulary_size:  # ERNIE
        rows.append(("task_type_embedding/embeddings", "bert/embeddings/task_type_embeddings"))
    if backbone.project_embeddings:  # ALBERT, and ELECTRA / RoFormer with embedding_size != hidden_size
        rows += [("embeddings_projection/kernel", "bert/encoder/embedding_hidden_mapping_in/kernel"),
                 ("embeddings_projection/bias", "bert/encoder/embedding_hidden_mapping_in/bias")]
    return rows


def head_rows(backbone):
    """The pooler's and the MLM head's rows (the same names in every family's TF1 release)."""
    rows = [("pooler_dense/kernel", "bert/pooler/dense/kernel"), ("pooler_dense/bias", "bert/pooler/dense/bias")]
    if backbone.with_mlm:
        rows += [
            ("mlm_transform/kernel", "cls/predictions/transform/dense/kernel"),
            ("mlm_transform/bias", "cls/predictions/transform/dense/bias"),
            ("mlm_layer_norm/gamma", "cls/predictions/transform/LayerNorm/gamma"),
            ("mlm_layer_norm/beta", "cls/predictions/transform/LayerNorm/beta"),
            ("mlm_bias/bias", "cls/predictions/output_bias"),
        ]
    return rows


def bert_table(backbone):
    """BERT, and RoFormer / ELECTRA / ERNIE, which keep BERT's names: ``bert/encoder/layer_I/...``."""
    rows = embedding_rows(backbone)
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
    return rows + head_rows(backbone)


ALBERT_LAYER = "bert/encoder/transformer/group_0/inner_group_0"


def albert_table(backbone):
    """ALBERT (Google's release names): one shared layer, ``bert/encoder/transformer/group_0/inner_group_0/...``."""
    z, g = "transformer_layer", ALBERT_LAYER
    rows = embedding_rows(backbone)
    for part in ("query", "key", "value"):
        rows += [(f"{z}/self_attention_layer/{part}/kernel", f"{g}/attention_1/self/{part}/kernel"),
                 (f"{z}/self_attention_layer/{part}/bias", f"{g}/attention_1/self/{part}/bias")]
    rows += [
        (f"{z}/self_attention_layer/attention_output/kernel", f"{g}/attention_1/output/dense/kernel"),
        (f"{z}/self_attention_layer/attention_output/bias", f"{g}/attention_1/output/dense/bias"),
        (f"{z}/self_attention_layer_norm/gamma", f"{g}/LayerNorm/gamma"),
        (f"{z}/self_attention_layer_norm/beta", f"{g}/LayerNorm/beta"),
        (f"{z}/feedforward_intermediate_dense/kernel", f"{g}/ffn_1/intermediate/dense/kernel"),
        (f"{z}/feedforward_intermediate_dense/bias", f"{g}/ffn_1/intermediate/dense/bias"),
        (f"{z}/feedforward_output_dense/kernel", f"{g}/ffn_1/intermediate/output/dense/kernel"),
        (f"{z}/feedforward_output_dense/bias", f"{g}/ffn_1/intermediate/output/dense/bias"),
        (f"{z}/feedforward_layer_norm/gamma", f"{g}/LayerNorm_1/gamma"),
        (f"{z}/feedforward_layer_norm/beta", f"{g}/LayerNorm_1/beta"),
    ]
    return rows + head_rows(backbone)


TABLES = {"bert": bert_table, "roformer": bert_table, "electra": bert_table, "ernie": bert_table,
          "albert": albert_table}


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


# transformers module (after the family's prefix) -> TF1 name, for the relatives that keep BERT's names otherwise
RELATIVE_MODULES = {
    "embeddings_project": "bert/encoder/embedding_hidden_mapping_in",  # ELECTRA, RoFormer (embedding_size != hidden)
    "generator_predictions.dense": "cls/predictions/transform/dense",  # an ELECTRA generator's MLM head
    "generator_predictions.LayerNorm": "cls/predictions/transform/LayerNorm",
}

# ALBERT: transformers module -> Google TF1 name, and what kind of weights it holds
ALBERT_MODULES = {
    "albert.embeddings.word_embeddings": ("bert/embeddings/word_embeddings", "embedding"),
    "albert.embeddings.position_embeddings": ("bert/embeddings/position_embeddings", "embedding"),
    "albert.embeddings.token_type_embeddings": ("bert/embeddings/token_type_embeddings", "embedding"),
    "albert.embeddings.LayerNorm": ("bert/embeddings/LayerNorm", "norm"),
    "albert.encoder.embedding_hidden_mapping_in": ("bert/encoder/embedding_hidden_mapping_in", "dense"),
    "albert.pooler": ("bert/pooler/dense", "dense"),
    "predictions.dense": ("cls/predictions/transform/dense", "dense"),
    "predictions.LayerNorm": ("cls/predictions/transform/LayerNorm", "norm"),
    "sop_classifier.classifier": ("cls/seq_relationship", "classifier"),
    **{f"albert.encoder.albert_layer_groups.0.albert_layers.0.{hf}": (f"{ALBERT_LAYER}/{tf1}", kind) for hf, tf1, kind in [
        ("attention.query", "attention_1/self/query", "dense"),
        ("attention.key", "attention_1/self/key", "dense"),
        ("attention.value", "attention_1/self/value", "dense"),
        ("attention.dense", "attention_1/output/dense", "dense"),
        ("attention.LayerNorm", "LayerNorm", "norm"),
        ("ffn", "ffn_1/intermediate/dense", "dense"),
        ("ffn_output", "ffn_1/intermediate/output/dense", "dense"),
        ("full_layer_layer_norm", "LayerNorm_1", "norm"),
    ]},
}
LEAVES = {  # (kind, transformers leaf) -> (TF1 leaf, transpose?)
    ("dense", "weight"): ("kernel", True), ("dense", "bias"): ("bias", False),
    ("norm", "weight"): ("gamma", False), ("norm", "bias"): ("beta", False),
    ("classifier", "weight"): ("output_weights", False), ("classifier", "bias"): ("output_bias", False),
}


def hf_to_tf1(family, name):
    """transformers state-dict name of a ``family`` checkpoint -> (TF1 name, transpose?), None for buffers and tied
    copies; a name no table knows comes back as itself (reported as unused)."""
    if family == "bert":
        return hf_to_google(name)
    if family == "albert":
        if not name.startswith(("albert.", "predictions.", "sop_classifier.")):
            name = "albert." + name  # a bare AlbertModel (as save_pretrained writes it, and sentence-transformers)
        if name == "predictions.bias":
            return "cls/predictions/output_bias", False
        if name.startswith("predictions.decoder.") or name.endswith("position_ids"):
            return None  # tied to the word embeddings and the output bias
        module, _, leaf = name.rpartition(".")
        if module not in ALBERT_MODULES:
            return name, False
        tf1, kind = ALBERT_MODULES[module]
        if kind == "embedding":
            return tf1, False
        tf1_leaf, transpose = LEAVES[(kind, leaf)]
        return f"{tf1}/{tf1_leaf}", transpose
    prefix = family + "."
    n = "bert." + name[len(prefix):] if name.startswith(prefix) else name
    if n.endswith("embed_positions.weight") or n.startswith("generator_lm_head.weight"):
        return None  # RoFormer's sinusoid table (a buffer); an ELECTRA generator's decoder, tied
    if n == "generator_lm_head.bias":
        return "cls/predictions/output_bias", False
    module, _, leaf = n.removeprefix("bert.").rpartition(".")
    if module in RELATIVE_MODULES:
        kind = "norm" if module.endswith("LayerNorm") else "dense"
        tf1_leaf, transpose = LEAVES[(kind, leaf)]
        return f"{RELATIVE_MODULES[module]}/{tf1_leaf}", transpose
    return hf_to_google(n)


def tf1_to_canonical(family, name):
    """A TF1 variable name as the family's table names it: ELECTRA's releases say ``electra/`` for ``bert/``."""
    if family == "electra":
        if name.startswith("electra/embeddings_project/"):
            return "bert/encoder/embedding_hidden_mapping_in/" + name.rsplit("/", 1)[1]
        if name.startswith("electra/"):
            return "bert/" + name[len("electra/"):]
    return name


def tf1_family(names):
    """Which family a TF1 checkpoint holds, from its variable names (TF1 configs carry no model type)."""
    names = set(names)
    if any(n.startswith("bert/encoder/transformer/group_") for n in names):
        return "albert"
    if any(n.startswith("electra/encoder/") for n in names):
        return "electra"
    if "bert/embeddings/task_type_embeddings" in names:
        return "ernie"
    if "bert/embeddings/position_embeddings" not in names and any(n.startswith("bert/encoder/layer_") for n in names):
        return "roformer"  # bert4keras' RoFormer: BERT's names, no position table
    return "bert"


CONFIG_KEYS = {  # backbone argument <- config key (the same in Google, bert4keras and transformers configs)
    "vocabulary_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "hidden_dim": "hidden_size",
    "intermediate_dim": "intermediate_size",
    "max_sequence_length": "max_position_embeddings",
}
MODEL_TYPES = ("bert", "roformer", "albert", "electra", "ernie")  # transformers' model_type of each family
NOT_SUPPORTED = {"nezha": "transformers 5 no longer ships NEZHA, so zoo has no reference to prove parity against"}


def config_sizes(config, keys, path):
    """``{argument: int(config[key])}`` for ``keys`` (argument -> config key); CheckpointError naming ``path`` for a
    missing field or one that is not a number."""
    missing = [key for key in keys.values() if key not in config]
    if missing:
        raise CheckpointError(f"{path}: missing field(s) {missing}")
    try:
        return {arg: int(config[key]) for arg, key in keys.items()}
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: a size or rate field is not a number ({e})") from None


def read_config(path, family=None):
    """A checkpoint's config (Google / bert4keras ``*_config.json``, transformers ``config.json``) -> (family,
    backbone keyword arguments). ``family``: what a TF1 checkpoint's names showed (its config has no model type);
    a transformers config names its own (``model_type``)."""
    config = read_json_file(path, "a checkpoint config")
    model_type = config.get("model_type")
    if model_type is not None:
        if model_type not in MODEL_TYPES:
            why = f" ({NOT_SUPPORTED[model_type]})" if model_type in NOT_SUPPORTED else ""
            raise CheckpointError(f"{path}: model_type {model_type!r} is not supported{why}; zoo reads "
                                  f"{', '.join(MODEL_TYPES)} checkpoints (RoBERTa-wwm and MacBERT are 'bert')")
        family = model_type
    family = family or "bert"
    kwargs = config_sizes(config, CONFIG_KEYS, path)
    try:
        kwargs["num_segments"] = int(config.get("type_vocab_size", 2))
        kwargs["dropout"] = float(config.get("hidden_dropout_prob", 0.1))
        kwargs["layer_norm_epsilon"] = float(config.get("layer_norm_eps", 1e-12))
        kwargs["embedding_dim"] = int(config.get("embedding_size") or kwargs["hidden_dim"])
        groups = (int(config.get("num_hidden_groups", 1)), int(config.get("inner_group_num", 1)))
        task_types = int(config.get("task_type_vocab_size", 3)) if config.get("use_task_id") else 0
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: a size or rate field is not a number ({e})") from None
    kwargs["activation"] = config.get("hidden_act", "gelu")
    if min(kwargs[k] for k in CONFIG_KEYS) < 1:
        raise CheckpointError(f"{path}: sizes must be positive, got {[config[k] for k in CONFIG_KEYS.values()]}")
    if family == "albert" and groups != (1, 1):
        raise CheckpointError(f"{path}: ALBERT with num_hidden_groups={groups[0]}, inner_group_num={groups[1]}: zoo "
                              f"reads the released form, one group of one shared layer")
    if family == "roformer":
        kwargs["rotary_value"] = bool(config.get("rotary_value", False))
    if family == "ernie":
        kwargs["task_type_vocabulary_size"] = task_types
    return family, kwargs


def bert_config(backbone):
    """The BERT config fields of a backbone (Google's ``bert_config.json``; transformers reads the same keys).
    Written for BERT only: another family's checkpoint is refused by name."""
    if backbone.family != "bert":
        raise CheckpointError(f"{type(backbone).__name__}: zoo writes Google and transformers checkpoints of BERT "
                              f"only; save a {backbone.family} backbone as a zoo preset (save_to_preset)")
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
