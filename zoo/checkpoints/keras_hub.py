"""keras-hub presets: a folder written by keras-hub's ``save_to_preset`` (``config.json`` with keras-hub's "module",
"class_name", "config" and "registered_name"; ``model.weights.h5``; ``tokenizer.json`` and
``assets/tokenizer/vocabulary.txt``; ``metadata.json``), the layout of keras-hub's ``bert_base_zh``.

keras-hub itself reads the weights (``keras_hub.models.Backbone.from_preset``, public API only); ``weight_names``
is the one table from its weight paths to Google TF1 names and ``bert_kwargs`` translates its config, so
``assign_weights`` loads a keras-hub preset as it loads every other format. Only ``BertBackbone`` maps onto zoo's
backbone: a preset of any other keras-hub class is refused by name.
"""

from __future__ import annotations

import json
import os

import numpy as np

from ..errors import CheckpointError, MissingFileError
from ..paths import read_json_file
from .mapping import config_sizes, google_shape

CONFIG = "config.json"
WEIGHTS = ("model.weights.h5", "model.weights.json")  # one file, or the index of sharded ones
TOKENIZER_CONFIG = "tokenizer.json"
VOCABULARY = os.path.join("assets", "tokenizer", "vocabulary.txt")
BACKBONES = {"BertBackbone": "bert"}  # keras-hub backbone class -> zoo family
TOKENIZERS = ("BertTokenizer",)
# zoo BertBackbone argument <- keras-hub BertBackbone config key (the same names)
CONFIG_KEYS = {key: key for key in ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                                    "max_sequence_length", "num_segments")}


def weight_names(num_layers):
    """{keras-hub ``BertBackbone`` weight path: Google TF1 variable name}, the whole mapping of this format."""
    names = {
        "token_embedding/embeddings": "bert/embeddings/word_embeddings",
        "position_embedding/embeddings": "bert/embeddings/position_embeddings",
        "segment_embedding/embeddings": "bert/embeddings/token_type_embeddings",
        "embeddings_layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
        "embeddings_layer_norm/beta": "bert/embeddings/LayerNorm/beta",
        "pooled_dense/kernel": "bert/pooler/dense/kernel",
        "pooled_dense/bias": "bert/pooler/dense/bias",
    }
    for i in range(num_layers):
        k, g = f"transformer_layer_{i}", f"bert/encoder/layer_{i}"
        names.update({
            f"{k}/self_attention_layer/query/kernel": f"{g}/attention/self/query/kernel",
            f"{k}/self_attention_layer/query/bias": f"{g}/attention/self/query/bias",
            f"{k}/self_attention_layer/key/kernel": f"{g}/attention/self/key/kernel",
            f"{k}/self_attention_layer/key/bias": f"{g}/attention/self/key/bias",
            f"{k}/self_attention_layer/value/kernel": f"{g}/attention/self/value/kernel",
            f"{k}/self_attention_layer/value/bias": f"{g}/attention/self/value/bias",
            f"{k}/self_attention_layer/attention_output/kernel": f"{g}/attention/output/dense/kernel",
            f"{k}/self_attention_layer/attention_output/bias": f"{g}/attention/output/dense/bias",
            f"{k}/self_attention_layer_norm/gamma": f"{g}/attention/output/LayerNorm/gamma",
            f"{k}/self_attention_layer_norm/beta": f"{g}/attention/output/LayerNorm/beta",
            f"{k}/feedforward_intermediate_dense/kernel": f"{g}/intermediate/dense/kernel",
            f"{k}/feedforward_intermediate_dense/bias": f"{g}/intermediate/dense/bias",
            f"{k}/feedforward_output_dense/kernel": f"{g}/output/dense/kernel",
            f"{k}/feedforward_output_dense/bias": f"{g}/output/dense/bias",
            f"{k}/feedforward_layer_norm/gamma": f"{g}/output/LayerNorm/gamma",
            f"{k}/feedforward_layer_norm/beta": f"{g}/output/LayerNorm/beta",
        })
    return names


def keras_hub_json(path):
    """The JSON object in ``path`` when keras-hub wrote it ("registered_name" ``keras_hub>...`` or a "module" of
    keras_hub), else None (no such file, not JSON, or another library's file of the same name)."""
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(obj, dict):
        return None
    registered, module = obj.get("registered_name"), obj.get("module")
    if (isinstance(registered, str) and registered.startswith("keras_hub>")) or \
            (isinstance(module, str) and module.startswith("keras_hub")):
        return obj
    return None


def class_name(obj):
    """The keras-hub class of a config object: "BertBackbone" for "keras_hub>BertBackbone"."""
    registered = obj.get("registered_name")
    if isinstance(registered, str) and ">" in registered:
        return registered.split(">", 1)[1]
    return str(obj.get("class_name"))


def keras_hub_weights(folder):
    """The weights file of a keras-hub preset folder; None when its ``config.json`` is not keras-hub's (or absent).
    A keras-hub config without its weights raises CheckpointError."""
    if keras_hub_json(os.path.join(folder, CONFIG)) is None:
        return None
    for name in WEIGHTS:
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise CheckpointError(f"{folder}: a keras-hub preset ({CONFIG}) without its weights ({WEIGHTS[0]})")


def activation_name(function):
    """zoo's ``activation`` name of a keras-hub activation function, told by its values: keras-hub's BERT uses the
    tanh approximation of GELU (zoo's "gelu_new"), not the exact erf GELU of Google and transformers."""
    from keras import activations, ops

    x = np.linspace(-4.0, 4.0, 33, dtype="float32")
    y = ops.convert_to_numpy(function(ops.convert_to_tensor(x)))
    candidates = {"gelu": lambda t: activations.gelu(t, approximate=False),
                  "gelu_new": lambda t: activations.gelu(t, approximate=True), "relu": activations.relu}
    for name, reference in candidates.items():
        if np.allclose(y, ops.convert_to_numpy(reference(ops.convert_to_tensor(x))), rtol=0, atol=1e-6):
            return name
    raise CheckpointError(f"keras-hub activation {getattr(function, '__name__', function)!r} is none of "
                          f"{sorted(candidates)}")


def bert_kwargs(config, backbone, path):
    """keras-hub ``BertBackbone`` config (``config.json``'s "config") -> zoo ``BertBackbone`` keyword arguments.
    The activation and LayerNorm epsilon are fixed in keras-hub's source, not in its config: they are read from
    the loaded ``backbone``'s layers."""
    kwargs = config_sizes(config, CONFIG_KEYS, f"{path} (keras-hub BertBackbone config)")
    try:
        kwargs["dropout"] = float(config.get("dropout", 0.1))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: a size or rate field is not a number ({e})") from None
    layers = [backbone.get_layer(f"transformer_layer_{i}") for i in range(kwargs["num_layers"])]
    epsilons = {float(backbone.get_layer("embeddings_layer_norm").epsilon)}
    epsilons |= {float(layer.layer_norm_epsilon) for layer in layers}
    activations = {activation_name(layer.activation) for layer in layers} or {"gelu_new"}
    if len(epsilons) > 1 or len(activations) > 1:
        raise CheckpointError(f"{path}: layers differ in LayerNorm epsilon {sorted(epsilons)} or activation "
                              f"{sorted(activations)}; zoo's BertBackbone has one of each")
    kwargs["layer_norm_epsilon"], kwargs["activation"] = epsilons.pop(), activations.pop()
    return kwargs


class KerasHubSource:
    """The weights of a loaded keras-hub ``BertBackbone`` as Google-named numpy arrays, with the interface of every
    source in ``zoo.checkpoints`` (``file``, ``shapes``, ``get``). A weight the table does not name keeps its
    keras-hub path, so a load reports it as unused."""

    def __init__(self, backbone, file):
        from keras import ops

        names = weight_names(backbone.num_layers)
        self.file, self._arrays = file, {}
        for weight in backbone.weights:
            array = np.asarray(ops.convert_to_numpy(weight))
            name = names.get(weight.path)
            if name is None:
                self._arrays[weight.path] = array
            else:
                self._arrays[name] = array.reshape(google_shape(weight.path, array.shape))
        self.shapes = {k: tuple(v.shape) for k, v in self._arrays.items()}

    def get(self, name):
        return self._arrays[name]


def keras_hub_source(folder):
    """(zoo ``BertBackbone`` keyword arguments, Google-named source) of a keras-hub preset folder. The class in
    ``config.json`` is checked before keras-hub loads anything: only ``BertBackbone`` is mapped."""
    config_path = os.path.join(folder, CONFIG)
    obj = read_json_file(config_path, "a keras-hub preset's config")
    name = class_name(obj)
    if name not in BACKBONES:
        raise CheckpointError(f"{config_path}: a keras-hub {name} preset; zoo maps only keras-hub "
                              f"{', '.join(BACKBONES)} presets onto its backbone")
    weights = keras_hub_weights(folder)
    import keras_hub

    try:
        backbone = keras_hub.models.Backbone.from_preset(folder)
    except Exception as e:  # keras-hub's own errors (missing or damaged files) name no zoo type
        raise CheckpointError(f"{folder}: keras-hub could not load this preset ({type(e).__name__}: {e})") from e
    if not isinstance(backbone, keras_hub.models.BertBackbone):
        raise CheckpointError(f"{config_path}: keras-hub loaded a {type(backbone).__name__}, not a BertBackbone")
    kwargs = bert_kwargs(obj.get("config") or {}, backbone, config_path)
    return kwargs, KerasHubSource(backbone, weights)


def keras_hub_tokenizer(folder):
    """(vocabulary file, lowercase) of the tokenizer of a keras-hub preset folder, None when the folder holds no
    keras-hub ``tokenizer.json`` (a transformers ``tokenizer.json`` is not keras-hub's). Only keras-hub's WordPiece
    ``BertTokenizer`` is read; any other class raises CheckpointError naming it."""
    path = os.path.join(folder, TOKENIZER_CONFIG)
    obj = keras_hub_json(path)
    if obj is None:
        return None
    name = class_name(obj)
    if name not in TOKENIZERS:
        raise CheckpointError(f"{path}: a keras-hub {name}; zoo reads only keras-hub {', '.join(TOKENIZERS)} "
                              f"(WordPiece) tokenizers")
    config = obj.get("config") or {}
    if config.get("suffix_indicator", "##") != "##" or config.get("oov_token", "[UNK]") != "[UNK]":
        raise CheckpointError(f"{path}: suffix_indicator {config.get('suffix_indicator')!r} / oov_token "
                              f"{config.get('oov_token')!r}; zoo's WordPiece uses '##' and '[UNK]'")
    vocabulary = os.path.join(folder, VOCABULARY)
    if not os.path.isfile(vocabulary):
        raise MissingFileError(f"{vocabulary}: missing (the vocabulary of the keras-hub tokenizer {path})")
    return vocabulary, bool(config.get("lowercase", False))
