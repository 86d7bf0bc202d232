"""The base class of zoo's task models (SentenceEncoder, CrossEncoder, SimBERT).

A ``Task`` is a functional Keras model around a ``BertBackbone`` that keeps its Python tokenizer with it (as
assets inside ``.keras`` files, as ``vocab.txt`` in presets), loads from every supported form with one verb,
``from_preset``, saves with ``save``, and runs text through the model in length-sorted batches.
"""

from __future__ import annotations

import os

import keras
import numpy as np

from ..backbones.bert import backbone_inputs
from ..errors import CheckpointError, ConfigError
from ..logs import log, warn_deprecated
from ..paths import VOCAB_FILE
from ..presets import classproperty, load_saved, preset_catalogue, preset_class_name, recorded_max_input_tokens, save_preset


class Task(keras.Model):
    """Shared by zoo's task models: ``from_preset``, ``save``, tokenizer assets, batched prediction."""

    # Attributes of a saved model that ``from_preset`` may change when loading it (others are fixed at training).
    loadable_overrides = ("maxlen",)

    # ------------------------------------------------------------------ loading and saving
    @classproperty
    def presets(cls):
        """The shipped presets ``from_preset`` takes by name: those holding a trained ``cls``, and the backbones a
        new one is built on (``class_name`` says which), each with its description, parameters, path and
        metadata, as keras-hub's ``Class.presets``."""
        return preset_catalogue(lambda held: held == cls.__name__ or held.endswith("Backbone"))

    @classmethod
    def from_preset(cls, path, **kwargs):
        """Load or build a ``cls`` from ``path``, whatever its form.

        A zoo preset (folder or name), run folder or ``.keras`` file that holds a ``cls`` is loaded as saved,
        tokenizer included (``maxlen=`` may still be changed). Anything else -- a Google TF1 folder or ckpt
        prefix, a transformers folder, a sentence-transformers folder, a backbone preset, or a preset of another
        task -- gives a new ``cls`` on its backbone (and tokenizer), built with ``kwargs``.

        :param path: a shipped preset's name (``cls.presets``), a folder, a ``.keras`` file or a TF1 ckpt prefix.
        :param kwargs: the constructor's arguments for a new model (e.g. ``pooling=`` for a SentenceEncoder); for a
            saved one, ``maxlen=`` only (another value of a saved setting is refused with ConfigError).
        :returns: the model, with its tokenizer.
        """
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        stored = preset_class_name(path)
        if stored == cls.__name__:
            model = load_saved(path)
            for key, value in kwargs.items():
                if key in cls.loadable_overrides:
                    setattr(model, key, value)
                elif getattr(model, key, value) != value:
                    raise ConfigError(f"{path} holds a {cls.__name__} saved with {key}={getattr(model, key)!r}; "
                                      f"it cannot be loaded with {key}={value!r}")
            return model
        if stored is not None and not stored.endswith("Backbone"):
            log.info("%s holds a %s: building a new %s on its backbone", path, stored, cls.__name__)
        model = cls._from_backbone_preset(path, **kwargs)
        if stored is not None:  # a preset's backbone keeps the length it was trained for
            model.max_input_tokens = recorded_max_input_tokens(path)
        return model

    @property
    def max_input_tokens(self):
        """The longest input, in tokens, this model's weights were trained on (at least ``maxlen``): recorded in its
        preset's metadata (for the shipped presets the pretraining length of their position embeddings, 128),
        kept from the backbone preset a model is built on, else ``maxlen``. A fact about the weights, not a
        default: ``encode``, indexes, exports and ``zoo serve`` all cut at ``maxlen``; a ``--maxlen`` up to this
        stays within the lengths the weights have seen."""
        return max(getattr(self, "_max_input_tokens", None) or 0, self.maxlen)

    @max_input_tokens.setter
    def max_input_tokens(self, value):
        self._max_input_tokens = None if value is None else int(value)

    @classmethod
    def _from_backbone_preset(cls, path, **kwargs):
        raise NotImplementedError

    @classmethod
    def from_checkpoint(cls, path, **kwargs):
        """Deprecated: ``from_preset``."""
        warn_deprecated(f"{cls.__name__}.from_checkpoint", f"{cls.__name__}.from_preset")
        return cls.from_preset(path, **kwargs)

    @classmethod
    def load(cls, path):
        """Deprecated: ``from_preset`` (for a saved ``cls`` only)."""
        warn_deprecated(f"{cls.__name__}.load", f"{cls.__name__}.from_preset")
        stored = preset_class_name(path)
        if stored != cls.__name__:
            raise TypeError(f"{path} holds a {stored or 'checkpoint'}, not a {cls.__name__}")
        return cls.from_preset(path)

    def save_to_preset(self, directory, tokenizer=None, metadata=None, weights_dtype="float32"):
        """Write the model and its tokenizer as a zoo preset folder, atomically, with a sha256 manifest;
        ``from_preset`` loads it back.

        :param directory: the preset folder to write.
        :param tokenizer: the tokenizer to save (None: the model's own).
        :param metadata: a dict recorded in the preset's metadata (e.g. scores, the training command).
        :param weights_dtype: "float32", or "float16" to halve the size.
        """
        return save_preset(self, tokenizer or self.tokenizer, directory, metadata=metadata,
                           weights_dtype=weights_dtype)

    def save(self, path, metadata=None, weights_dtype="float32", **kwargs):
        """Keras' ``save``: ``path`` ending in ``.keras`` writes one Keras file, tokenizer inside. A folder path is
        deprecated: ``save_to_preset``.

        :param path: a ``.keras`` file (a folder: deprecated).
        :param metadata: for a folder only, as ``save_to_preset``'s.
        :param weights_dtype: for a folder only, as ``save_to_preset``'s.
        :param kwargs: Keras' ``save`` arguments.
        """
        if str(path).endswith(".keras"):
            return super().save(path, **kwargs)
        warn_deprecated(f"{type(self).__name__}.save(folder)", "save_to_preset(folder)")
        return self.save_to_preset(path, metadata=metadata, weights_dtype=weights_dtype)

    def _config(self, **fields):
        return {"name": self.name, "trainable": self.trainable, **fields,
                "backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)

    def save_assets(self, dir_path):
        if getattr(self, "tokenizer", None) is not None:
            self.tokenizer.save_to_preset(dir_path)

    def load_assets(self, dir_path):
        from ..tokenizer.wordpiece import Tokenizer

        if os.path.exists(os.path.join(dir_path, VOCAB_FILE)):
            self.tokenizer = Tokenizer.from_preset(dir_path)

    # ------------------------------------------------------------------ raw strings in Keras' methods
    preprocessor_texts = 1  # texts per example: 2 for a cross-encoder's pairs

    @property
    def preprocessor(self):
        """The ``TextPreprocessor`` of this task (strings -> its inputs, with its tokenizer and ``maxlen``): what
        ``predict``, ``fit`` and ``evaluate`` run on strings, and a layer to start a Keras model from strings."""
        from .preprocessor import TextPreprocessor

        self._require_tokenizer()
        key = (id(self.tokenizer), self.maxlen, self.preprocessor_texts, bool(getattr(self, "zero_segments", False)))
        cached = self.__dict__.get("_preprocessor")
        if cached is None or cached[0] != key:
            layer = TextPreprocessor(self.tokenizer, self.maxlen, texts=key[2], zero_segments=key[3],
                                     name=f"{self.name}_preprocessor")
            cached = (key, layer)
            object.__setattr__(self, "_preprocessor", cached)  # derived from saved fields: not a tracked layer
        return cached[1]

    def preprocess(self, x):
        """``x`` as the model takes it.

        :param x: strings (a list or numpy array of texts, or of (text_a, text_b) pairs for a cross-encoder), a
            tf.data dataset of strings (or of (strings, labels) elements), or ids.
        :returns: the ids (numpy) for strings; the dataset mapped through the preprocessor; ids unchanged.
        """
        from .preprocessor import is_string_dataset, is_strings

        if isinstance(x, str):
            x = [x]
        if is_strings(x):
            if self.preprocessor_texts == 2:
                pairs = np.asarray(x, dtype=object)
                if pairs.ndim != 2 or pairs.shape[1] != 2:
                    raise ValueError(f"a {type(self).__name__} takes (text_a, text_b) pairs, got an array of shape "
                                     f"{pairs.shape}")
                return self.preprocessor.tokenize(pairs[:, 0], pairs[:, 1])
            return self.preprocessor.tokenize(x)
        if is_string_dataset(x):
            return self.preprocessor.map_dataset(x)
        return x

    def predict(self, x, *args, **kwargs):
        """Keras' ``predict``; strings go through ``preprocessor`` first. Returns the model's own output (a sentence
        encoder's unnormalised vectors, a cross-encoder's logits): ``encode`` and ``score`` give vectors and scores.

        :param x: strings, a dataset of strings, or ids (``preprocess``).
        :param args: Keras' ``predict`` arguments.
        :param kwargs: Keras' ``predict`` arguments.
        """
        return super().predict(self.preprocess(x), *args, **kwargs)

    def fit(self, x=None, y=None, *args, validation_data=None, **kwargs):
        """Keras' ``fit``; strings (in ``x`` and ``validation_data``) go through ``preprocessor`` first.

        :param x: strings, a dataset of strings (or of (strings, labels)), or ids (``preprocess``).
        :param y: the targets, when ``x`` is not a dataset.
        :param validation_data: as ``x``, or an (x, y) tuple.
        :param args: Keras' ``fit`` arguments.
        :param kwargs: Keras' ``fit`` arguments.
        """
        if isinstance(validation_data, tuple):
            validation_data = (self.preprocess(validation_data[0]), *validation_data[1:])
        elif validation_data is not None:
            validation_data = self.preprocess(validation_data)
        return super().fit(self.preprocess(x), y, *args, validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        """Keras' ``evaluate``; strings go through ``preprocessor`` first.

        :param x: strings, a dataset of strings (or of (strings, labels)), or ids (``preprocess``).
        :param y: the targets, when ``x`` is not a dataset.
        :param args: Keras' ``evaluate`` arguments.
        :param kwargs: Keras' ``evaluate`` arguments.
        """
        return super().evaluate(self.preprocess(x), y, *args, **kwargs)

    # ------------------------------------------------------------------ shared checks and inference
    @property
    def dim(self):
        """Width of the backbone's vectors."""
        return self.backbone.hidden_dim

    def head_spec(self):
        """What this model's output means (a ``zoo.heads.HeadSpec``): read by the exports, the fused ONNX graph,
        the precision probe and the server. TypeError for a model that serves nothing."""
        raise TypeError(f"a {type(self).__name__} has no served output: exportable are models with a head_spec() "
                        f"(SentenceEncoder, CrossEncoder, SimBERT)")

    def served_model(self):
        """The model whose outputs ``head_spec()`` describes: this one (SimBERT: its retrieval encoder)."""
        return self

    def check_vocabulary(self, where=""):
        """The tokenizer must have one id per token-embedding row of the backbone."""
        if self.tokenizer is not None and self.tokenizer.vocab_size != self.backbone.vocabulary_size:
            source = self.tokenizer.vocab_file or where or "the tokenizer"
            raise CheckpointError(f"{source}: {self.tokenizer.vocab_size} tokens, but the model has "
                                  f"{self.backbone.vocabulary_size} token-embedding rows (a vocabulary of another "
                                  f"model, or a cut or edited vocab.txt)")

    def _require_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError(f"this {type(self).__name__} has no tokenizer; pass tokenizer= or load it with "
                             f"{type(self).__name__}.from_preset")

    def _predict_batch(self, batch):
        """One batch of ids (numpy) -> the model's output (numpy). On TensorFlow: one shape-generic tf.function per
        model (XLA still compiles each batch shape once). Keras's own predict function traces every new batch
        shape, and TensorFlow counts traces per Python function across models, so a job that evaluates several
        models (the best epoch reloaded, teachers) would print "triggered tf.function retracing" warnings."""
        backend = keras.backend.backend()
        if not self.compiled and not getattr(self, "_jit_chosen", False):
            # XLA without compile(): compiling would attach an optimizer that then gets saved with the weights.
            self.jit_compile = backend != "torch"
            self._jit_chosen = True
        if backend != "tensorflow":
            return self.predict_on_batch(batch)
        import tensorflow as tf

        # under MirroredStrategy predict_on_batch would hand each replica the whole batch and concatenate the
        # copies: inference runs as one plain (cross-replica) call instead, without XLA
        jit = bool(self.jit_compile) and self.distribute_strategy.num_replicas_in_sync == 1
        key = repr((jit, sorted((k, str(v.dtype), np.ndim(v)) for k, v in batch.items())))
        cached = getattr(self, "_generic_predict", None)
        if cached is None or cached[0] != key:
            specs = {k: tf.TensorSpec([None] * np.ndim(v), tf.as_dtype(v.dtype), name=k) for k, v in batch.items()}
            function = tf.function(lambda b: self(b, training=False), input_signature=[specs], jit_compile=jit)
            cached = (key, function)
            object.__setattr__(self, "_generic_predict", cached)  # not a tracked attribute of the Keras model
        return keras.ops.convert_to_numpy(cached[1](batch))

    def predict_rows(self, rows, batch_size=64, maxlen=None, show_progress_bar=None, unit="row", precision="fp32"):
        """Model outputs for (token ids, segment ids) rows, in input order -> float32 [n, ...].

        Rows run longest first in batches padded to a multiple of 8 tokens (for XLA; to the longest row in ONNX
        Runtime), so little padding is computed and XLA compiles few shapes. ``precision``: auto, fp32, bf16,
        onnx-fp32 or int8 (``zoo.inference``)."""
        from ..inference.pipeline import predict_sorted
        from ..inference.precisions import runner
        from ..inference.sessions import pad_length

        self._require_tokenizer()
        predict = runner(self, precision)

        def pad(batch):
            return self.tokenizer.pad(batch, pad_to=pad_length(predict.precision, batch, maxlen or self.maxlen))

        return predict_sorted(rows, predict, pad, batch_size,
                              show_progress_bar, unit)

    def trainer(self):
        """An uncompiled functional wrapper to ``compile`` and ``fit`` (the model itself stays uncompiled, so no
        optimizer is saved with its weights)."""
        inputs = backbone_inputs()
        return keras.Model(inputs, self(inputs), name=f"{self.name}_trainer")
