"""The BERT encoder as a Keras 3 functional model built from ``keras_hub.layers``, and the options its relatives
(``zoo.backbones``: RoFormer, ALBERT, ELECTRA, ERNIE) set.

Post-LayerNorm BERT with exact (erf) GELU, optional [batch, query, key] attention mask (UniLM, causal),
a pooler on [CLS] (tanh as Google BERT, or linear as SimBERT) and an optional MLM head tied to the token
embeddings. Layer names are fixed: ``zoo.checkpoints`` maps checkpoint variables onto them.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops
from keras_hub.layers import PositionEmbedding, ReversibleEmbedding, TransformerEncoder

from ..checkpoints import assign_weights, checkpoint_source
from ..errors import CheckpointError
from ..presets import classproperty
from .rotary import RotaryTransformerEncoder

INPUT_NAMES = ("token_ids", "segment_ids", "padding_mask")
FAMILIES = {}  # checkpoint family -> its backbone class: BERT here, its relatives in ``zoo.backbones``


def backbone_inputs():
    """Fresh ``keras.Input`` s for the three id arrays a backbone (and every zoo task model) takes."""
    return {name: keras.Input((None,), dtype="int32", name=name) for name in INPUT_NAMES}


@keras.saving.register_keras_serializable(package="zoo")
def gelu_tanh(x):
    """The tanh approximation of GELU (transformers' ``gelu_new``)."""
    return keras.activations.gelu(x, approximate=True)


# transformers / Google ``hidden_act`` names -> Keras activations. "gelu" is the exact erf form.
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "gelu_fast": gelu_tanh,
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
    "tanh": "tanh",
}


def get_activation(name):
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown hidden_act {name!r}; known: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


@keras.saving.register_keras_serializable(package="zoo")
class BiasAdd(keras.layers.Layer):
    """Adds a learned bias over the last axis (the MLM output bias)."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.bias = self.add_weight(shape=(units,), initializer="zeros", name="bias")

    def call(self, x):
        return x + ops.cast(self.bias, x.dtype)

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def embed(layer, token_ids, segment_ids, training=None):
    """The embedding block: token + position + segment (+ ERNIE's task-type row 0) embeddings, LayerNorm, dropout,
    then the projection to the hidden size where the family has one. ``layer(name)`` gives the backbone's layer of
    that name, or None where the family has none."""
    tokens = layer("token_embedding")(token_ids)
    terms = [tokens]
    if layer("position_embedding") is not None:
        terms.append(layer("position_embedding")(tokens))
    terms.append(layer("segment_embedding")(segment_ids))
    if layer("task_type_embedding") is not None:
        terms.append(layer("task_type_embedding")(ops.zeros_like(segment_ids)))
    x = layer("embeddings_add")(terms)
    x = layer("embeddings_dropout")(layer("embeddings_layer_norm")(x), training=training)
    if layer("embeddings_projection") is not None:
        x = layer("embeddings_projection")(x)
    return x


def merged_attention_mask(padding_mask, attention_mask):
    """[B, T] padding mask and [B, Tq, Tk] attention mask -> one int [B, Tq or 1, Tk] mask (or None): what
    ``TransformerEncoder`` itself attends with."""
    mask = None if padding_mask is None else ops.cast(ops.expand_dims(padding_mask, axis=1), "int32")
    if attention_mask is None:
        return mask
    attention_mask = ops.cast(attention_mask, "int32")
    return attention_mask if mask is None else ops.minimum(mask, attention_mask)


def first_token_layer(layer, x, padding_mask=None, attention_mask=None, training=None):
    """``TransformerEncoder`` ``layer`` applied to [B, T, H] ``x`` for position 0 only -> [B, 1, H].

    Equals ``layer(x, ...)[:, :1]``: the first token still attends to every position (keys and values are
    projected for all T), but its query, the attention output projection and the feed-forward block run on
    one position instead of T -- about 5/6 of a layer's work saved when only [CLS] is read.
    """
    mask = merged_attention_mask(padding_mask, attention_mask)
    if mask is not None:
        mask = mask[:, :1, :]
    residual = query = x[:, :1, :]
    if layer.normalize_first:
        query, x = layer._self_attention_layer_norm(query), layer._self_attention_layer_norm(x)
    h = layer._self_attention_layer(query=query, value=x, attention_mask=mask, training=training)
    h = layer._self_attention_dropout(h, training=training) + residual
    if not layer.normalize_first:
        h = layer._self_attention_layer_norm(h)
    residual = h
    if layer.normalize_first:
        h = layer._feedforward_layer_norm(h)
    h = layer._feedforward_output_dense(layer._feedforward_intermediate_dense(h))
    h = layer._feedforward_dropout(h, training=training) + residual
    if not layer.normalize_first:
        h = layer._feedforward_layer_norm(h)
    return h


@keras.saving.register_keras_serializable(package="zoo")
class BertBackbone(keras.Model):
    """The BERT encoder (keras-hub's ``BertBackbone``, with what Chinese BERT's relatives change).

    ```python
    backbone = zoo.BertBackbone.from_preset("chinese_L-12_H-768_A-12")   # the family the checkpoint holds
    tokenizer = zoo.Tokenizer.from_preset("chinese_L-12_H-768_A-12")
    out = backbone(tokenizer(["你好"], maxlen=32))                     # [CLS] 你 好 [SEP]
    out["sequence_output"].shape, out["pooled_output"].shape           # (1, 4, 768), (1, 768)
    ```

    Call it on a dict of int arrays ``token_ids``, ``segment_ids``, ``padding_mask`` (1 = real token) and
    optionally ``attention_mask`` [batch, query, key] (1 = may attend; combined with the padding mask). Returns a
    dict with ``sequence_output`` [B, T, H], ``pooled_output`` [B, H], with ``with_mlm=True`` also ``mlm_logits``
    [B, T, V], and with ``output_hidden_states=True`` also ``hidden_states`` (embedding output then every layer's
    output). ``backbone(inputs, first_token_only=True)`` computes the last layer for [CLS] only
    (``sequence_output`` is then [B, 1, H]; no MLM logits or hidden states): the same [CLS] and pooled vectors,
    ~20% less work for a 4-layer model. [CLS]-pooled encoders and cross-encoders use it.

    ``from_preset`` builds one from a checkpoint (it returns the family the checkpoint holds: RoFormer, ALBERT,
    ELECTRA and ERNIE are subclasses with their own defaults); the constructor gives random weights.

    :param vocabulary_size: rows of the token embedding.
    :param num_layers: transformer layers.
    :param num_heads: attention heads per layer (``hidden_dim`` must be a multiple).
    :param hidden_dim: width of the hidden states.
    :param intermediate_dim: width of each feed-forward block.
    :param max_sequence_length: rows of the position embedding.
    :param num_segments: rows of the segment embedding.
    :param dropout: dropout rate of the embeddings, attention and feed-forward outputs.
    :param activation: the feed-forward activation, by transformers' ``hidden_act`` name: "gelu" (exact), "gelu_new"
        (the tanh form), "relu", ... (``ACTIVATIONS``).
    :param layer_norm_epsilon: LayerNorm's epsilon.
    :param pooler_activation: "tanh" (Google BERT's pooler) or "linear" (SimBERT's).
    :param with_mlm: add the MLM head (transform, LayerNorm, tied embedding, bias) and return ``mlm_logits``.
    :param output_hidden_states: also return every layer's output (``hidden_states``).
    :param embedding_dim: width of the embeddings when factorised (None: ``hidden_dim``): ALBERT, ELECTRA, RoFormer.
    :param project_embeddings: project the embeddings to ``hidden_dim`` even when the sizes agree (ALBERT; None:
        only when they differ).
    :param position_encoding: "absolute" (a learned table) or "rotary" (RoFormer).
    :param rotary_value: with rotary positions, rotate the values too (transformers' ``rotary_value``).
    :param shared_layers: one transformer layer applied ``num_layers`` times (ALBERT).
    :param task_type_vocabulary_size: rows of ERNIE's task-type embedding (row 0 is added; 0: none).
    :param dtype: a Keras dtype policy (None: the global one).
    :param kwargs: Keras ``Model`` arguments (``name``, ``trainable``).
    """

    family = "bert"  # the checkpoint family: its mapping table in zoo.checkpoints.mapping

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "family" in cls.__dict__:  # a family's class (zoo.backbones), not a user's subclass
            FAMILIES[cls.family] = cls

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        max_sequence_length=512,
        num_segments=2,
        dropout=0.1,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        pooler_activation="tanh",
        with_mlm=False,
        output_hidden_states=False,
        embedding_dim=None,
        project_embeddings=None,
        position_encoding="absolute",
        rotary_value=False,
        shared_layers=False,
        task_type_vocabulary_size=0,
        dtype=None,
        **kwargs,
    ):
        if hidden_dim % num_heads:
            raise ValueError(f"hidden_dim={hidden_dim} is not a multiple of num_heads={num_heads}")
        if pooler_activation not in ("tanh", "linear"):
            raise ValueError(f"pooler_activation must be 'tanh' or 'linear', got {pooler_activation!r}")
        if position_encoding not in ("absolute", "rotary"):
            raise ValueError(f"position_encoding must be 'absolute' or 'rotary', got {position_encoding!r}")
        embedding_dim = int(embedding_dim or hidden_dim)
        if project_embeddings is None:
            project_embeddings = embedding_dim != hidden_dim
        if embedding_dim != hidden_dim and not project_embeddings:
            raise ValueError(f"embedding_dim={embedding_dim} differs from hidden_dim={hidden_dim}: the embeddings "
                             f"need a projection (project_embeddings=True)")
        init = lambda: keras.initializers.TruncatedNormal(stddev=0.02)  # noqa: E731

        # created in BERT's order (token, position, segment): a random backbone draws its weights as before
        layers = {"token_embedding": ReversibleEmbedding(
            vocabulary_size, embedding_dim, tie_weights=True, embeddings_initializer=init(), dtype=dtype,
            name="token_embedding")}
        if position_encoding == "absolute":
            layers["position_embedding"] = PositionEmbedding(
                max_sequence_length, initializer=init(), dtype=dtype, name="position_embedding")
        layers.update({
            "segment_embedding": keras.layers.Embedding(
                num_segments, embedding_dim, embeddings_initializer=init(), dtype=dtype, name="segment_embedding"),
            "embeddings_add": keras.layers.Add(dtype=dtype, name="embeddings_add"),
            "embeddings_layer_norm": keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_layer_norm"),
            "embeddings_dropout": keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout"),
        })
        if task_type_vocabulary_size:
            layers["task_type_embedding"] = keras.layers.Embedding(
                task_type_vocabulary_size, embedding_dim, embeddings_initializer=init(), dtype=dtype,
                name="task_type_embedding")
        if project_embeddings:
            layers["embeddings_projection"] = keras.layers.Dense(
                hidden_dim, kernel_initializer=init(), dtype=dtype, name="embeddings_projection")
        token_embedding = layers["token_embedding"]

        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
        padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
        attention_mask = keras.Input((None, None), dtype="int32", name="attention_mask", optional=True)

        x = embed(layers.get, token_ids, segment_ids)
        hidden_states = [x]

        def transformer(name):
            options = dict(intermediate_dim=intermediate_dim, num_heads=num_heads, dropout=dropout,
                           activation=get_activation(activation), layer_norm_epsilon=layer_norm_epsilon,
                           kernel_initializer=init(), dtype=dtype, name=name)
            if position_encoding == "rotary":
                return RotaryTransformerEncoder(max_sequence_length=max_sequence_length, rotary_value=rotary_value,
                                                **options)
            return TransformerEncoder(**options)

        shared = transformer("transformer_layer") if shared_layers else None
        for i in range(num_layers):
            x = (shared or transformer(f"transformer_layer_{i}"))(
                x, padding_mask=padding_mask, attention_mask=attention_mask)
            hidden_states.append(x)
        pooled = keras.layers.Dense(
            hidden_dim, activation=pooler_activation, kernel_initializer=init(), dtype=dtype,
            name="pooler_dense")(x[:, 0, :])
        outputs = {"sequence_output": x, "pooled_output": pooled}
        if with_mlm:
            h = keras.layers.Dense(embedding_dim, activation=get_activation(activation),
                                   kernel_initializer=init(), dtype=dtype, name="mlm_transform")(x)
            h = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="mlm_layer_norm")(h)
            logits = token_embedding(h, reverse=True)
            outputs["mlm_logits"] = BiasAdd(vocabulary_size, dtype=dtype, name="mlm_bias")(logits)
        if output_hidden_states:
            outputs["hidden_states"] = hidden_states
        inputs = {"token_ids": token_ids, "segment_ids": segment_ids,
                  "padding_mask": padding_mask, "attention_mask": attention_mask}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.dropout = dropout
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.pooler_activation = pooler_activation
        self.with_mlm = with_mlm
        self.output_hidden_states = output_hidden_states
        self.embedding_dim = embedding_dim
        self.project_embeddings = bool(project_embeddings)
        self.position_encoding = position_encoding
        self.rotary_value = bool(rotary_value)
        self.shared_layers = bool(shared_layers)
        self.task_type_vocabulary_size = int(task_type_vocabulary_size)
        self.token_embedding = token_embedding

    def save_to_preset(self, directory, tokenizer=None, metadata=None, weights_dtype="float32"):
        """Write the backbone and a tokenizer as a zoo preset folder, atomically, with a sha256 manifest;
        ``from_preset`` loads it back.

        :param directory: the preset folder to write.
        :param tokenizer: the tokenizer to save (None: the ``tokenizer`` attribute, when set).
        :param metadata: a dict recorded in the preset's metadata.
        :param weights_dtype: "float32", or "float16" to halve the size.
        """
        from ..presets import save_preset

        return save_preset(self, tokenizer or getattr(self, "tokenizer", None), directory, metadata=metadata,
                           weights_dtype=weights_dtype)

    @classproperty
    def presets(cls):
        """The shipped presets (every one holds a BERT backbone: a task preset gives its own), each with its
        ``class_name``, description, parameters, path and metadata, as keras-hub's ``Class.presets``."""
        from ..presets import preset_catalogue

        return preset_catalogue()

    @classmethod
    def from_preset(cls, path, with_mlm=False, pooler_activation=None, keep_tokens=None,
                    output_hidden_states=False, dropout=None, dtype=None):
        """A backbone with the weights of ``path``, of any family zoo has (BERT, RoBERTa-wwm and MacBERT as BERT,
        RoFormer and RoFormer-Sim, ALBERT, ELECTRA, ERNIE), detected from the checkpoint. Called on a family's
        class, the checkpoint must hold that family.

        The result's ``load_report`` says what was loaded, missing (left random) and unused (e.g. the NSP head); a
        wrong shape or a missing encoder variable raises ``zoo.CheckpointError`` naming the file and the variable.

        :param path: a Google TF1 folder (or its ckpt prefix), a transformers folder (``model.safetensors`` or
            ``pytorch_model.bin``), a keras-hub preset, a zoo preset folder or name, a run folder, or a zoo
            ``.keras`` file.
        :param with_mlm: load (or add) the MLM head.
        :param pooler_activation: "tanh" (Google BERT) or "linear" (SimBERT); None: tanh, or what a preset was
            saved with.
        :param keep_tokens: slice the token embeddings and MLM bias to these ids (the ``keep_tokens`` of
            ``Tokenizer.from_preset(..., simplified=True)``).
        :param output_hidden_states: also return every layer's output.
        :param dropout: the dropout rate (None: the checkpoint's config).
        :param dtype: a Keras dtype policy (None: the global one).
        """
        family, kwargs, source = checkpoint_source(path)
        family_class = FAMILIES.get(family)
        if family_class is None:  # only when zoo.backbones.bert is imported alone
            raise CheckpointError(f"{path} holds a {family} checkpoint: import zoo.backbones, which defines it")
        if cls is not BertBackbone and not issubclass(family_class, cls):
            raise CheckpointError(f"{path} holds a {family} checkpoint, not {cls.family}: load it with "
                                  f"{family_class.__name__}.from_preset (or BertBackbone.from_preset)")
        if keep_tokens is not None:
            kwargs["vocabulary_size"] = len(keep_tokens)
        if pooler_activation is not None:
            kwargs["pooler_activation"] = pooler_activation
        if dropout is not None:
            kwargs["dropout"] = dropout
        backbone = family_class(**kwargs, with_mlm=with_mlm, output_hidden_states=output_hidden_states, dtype=dtype)
        backbone.load_report = assign_weights(backbone, source, keep_tokens)
        return backbone

    def _layer_or_none(self, name):
        return next((layer for layer in self.layers if layer.name == name), None)

    def call(self, inputs, training=None, mask=None, first_token_only=False):
        if not first_token_only:
            return super().call(inputs, training=training, mask=mask)
        padding_mask, attention_mask = inputs["padding_mask"], inputs.get("attention_mask")
        x = embed(self._layer_or_none, inputs["token_ids"], inputs["segment_ids"], training=training)
        for transformer in self.transformer_layers[:-1]:
            x = transformer(x, padding_mask=padding_mask, attention_mask=attention_mask, training=training)
        x = first_token_layer(self.transformer_layers[-1], x, padding_mask, attention_mask, training)
        return {"sequence_output": x, "pooled_output": self.get_layer("pooler_dense")(x[:, 0, :])}

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, dict):
            # ``attention_mask`` may be left out; numpy arrays may be mixed with tensors.
            inputs = {k: ops.convert_to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
            inputs.setdefault("attention_mask", None)
        return super().__call__(inputs, *args, **kwargs)

    def compute_output_spec(self, inputs, *args, first_token_only=False, **kwargs):
        if first_token_only:
            batch = inputs["token_ids"].shape[0]
            return {"sequence_output": keras.KerasTensor((batch, 1, self.hidden_dim), dtype=self.compute_dtype),
                    "pooled_output": keras.KerasTensor((batch, self.hidden_dim), dtype=self.compute_dtype)}
        # Symbolic calls without a mask: shapes do not depend on it.
        if isinstance(inputs, dict) and inputs.get("attention_mask") is None:
            inputs = {**inputs, "attention_mask": keras.KerasTensor((None, None, None), dtype="int32")}
        return super().compute_output_spec(inputs, *args, **kwargs)

    def mlm_head(self, hidden):
        """Vocabulary logits for hidden vectors [..., H] through the MLM head (transform, LayerNorm, tied
        embedding, bias): pretraining calls it on the masked positions only, as Google BERT does.

        :param hidden: hidden vectors [..., H].
        """
        if not self.with_mlm:
            raise ValueError("this backbone has no MLM head (build or load it with with_mlm=True)")
        layer = self.get_layer
        h = layer("mlm_layer_norm")(layer("mlm_transform")(hidden))
        return layer("mlm_bias")(self.token_embedding(h, reverse=True))

    @property
    def transformer_layers(self):
        """The transformer layer applied at each depth (ALBERT: one shared layer, ``num_layers`` times)."""
        if self.shared_layers:
            return [self.get_layer("transformer_layer")] * self.num_layers
        return [self.get_layer(f"transformer_layer_{i}") for i in range(self.num_layers)]

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "max_sequence_length": self.max_sequence_length,
            "num_segments": self.num_segments,
            "dropout": self.dropout,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "pooler_activation": self.pooler_activation,
            "with_mlm": self.with_mlm,
            "output_hidden_states": self.output_hidden_states,
            "embedding_dim": self.embedding_dim,
            "project_embeddings": self.project_embeddings,
            "position_encoding": self.position_encoding,
            "rotary_value": self.rotary_value,
            "shared_layers": self.shared_layers,
            "task_type_vocabulary_size": self.task_type_vocabulary_size,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)


FAMILIES[BertBackbone.family] = BertBackbone
