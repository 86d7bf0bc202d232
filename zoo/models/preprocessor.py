"""The preprocessor layer of zoo's tasks (as keras-hub's): raw strings -> the backbone's inputs.

``task.preprocessor`` is a ``TextPreprocessor``; with it a task's ``predict``, ``fit`` and ``evaluate`` take lists or
numpy arrays of strings and tf.data datasets of strings, and a Keras model can start from
``keras.Input(shape=(), dtype="string")``. It is the SavedModel export's tokenizer too: one in-graph tokenizer.
"""

from __future__ import annotations

import os

import keras
import numpy as np

from ..paths import VOCAB_FILE
from ..tokenizer.wordpiece import Tokenizer

ID_NAMES = ("token_ids", "segment_ids", "padding_mask")


def has_tensorflow_text():
    """Whether tensorflow-text imports (the ``serve`` extra): the in-graph WordPiece."""
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        return False
    return True


@keras.saving.register_keras_serializable(package="zoo")
class TextPreprocessor(keras.layers.Layer):
    """Strings -> ``token_ids``, ``segment_ids``, ``padding_mask`` (int32, rows padded to the longest, cut at
    ``maxlen`` as ``zoo.Tokenizer`` cuts them): the ids of ``zoo.Tokenizer``, from TensorFlow ops.

    ``texts=1``: one string tensor (a sentence encoder, SimBERT); ``texts=2``: pairs, as two string tensors or one
    tuple of them (a cross-encoder; ``zero_segments`` sets every segment id to 0, as such a model was trained).

    With tensorflow-text (the ``serve`` extra) the tokenizer is in the graph (``zoo.tokenizer.GraphTokenizer``): it
    runs in tf.data pipelines on every backend, in TensorFlow-backend models that take strings, and in exported
    SavedModels. Without it, the Python tokenizer runs through ``tf.numpy_function``: in tf.data pipelines and eager
    TensorFlow, not in a SavedModel. String ops cannot be XLA-compiled: a model holding this layer compiles without
    XLA (``supports_jit`` is False, so Keras' ``jit_compile="auto"`` turns it off).

    ```python
    texts = keras.Input(shape=(), dtype="string")
    vectors = encoder(encoder.preprocessor(texts))   # a task's own preprocessor: its tokenizer and maxlen
    ```

    :param tokenizer: the ``zoo.Tokenizer`` whose ids this layer gives (saved with it as an asset).
    :param maxlen: the most tokens per row, [CLS] and [SEP] included.
    :param texts: 1 for single texts, 2 for pairs.
    :param zero_segments: every segment id 0 (for a cross-encoder trained so).
    :param kwargs: Keras ``Layer`` arguments (``name``).
    """

    def __init__(self, tokenizer=None, maxlen=64, texts=1, zero_segments=False, **kwargs):
        super().__init__(**kwargs)
        if texts not in (1, 2):
            raise ValueError(f"texts must be 1 (single texts) or 2 (pairs), got {texts!r}")
        self.tokenizer, self.maxlen, self.texts, self.zero_segments = tokenizer, int(maxlen), texts, zero_segments
        self.supports_jit = False
        # strings are not floats: Keras must neither cast nor convert them (as keras-hub's preprocessing layers)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    def get_config(self):
        return {**super().get_config(), "maxlen": self.maxlen, "texts": self.texts,
                "zero_segments": self.zero_segments}

    # its vocabulary goes into the .keras file with it (a task saved before preprocessors existed has none there)
    def save_assets(self, dir_path):
        if self.tokenizer is not None:
            self.tokenizer.save_to_preset(dir_path)

    def load_assets(self, dir_path):
        if dir_path is not None and os.path.exists(os.path.join(dir_path, VOCAB_FILE)):
            self.tokenizer = Tokenizer.from_preset(dir_path)

    @property
    def in_graph(self):
        """True when the tokenizer runs as TensorFlow ops (tensorflow-text installed)."""
        return has_tensorflow_text()

    def graph_tokenizer(self):
        """The ``GraphTokenizer`` this layer runs (built on first use: ~3 s for the character tables)."""
        cached = self.__dict__.get("_graph")
        if cached is None or cached[0] != (id(self.tokenizer), self.maxlen):
            import tensorflow as tf

            from ..tokenizer.graph import GraphTokenizer

            with tf.init_scope():  # its lookup table lives outside the graph being traced, for every later graph
                tokenizer = GraphTokenizer(self.tokenizer, self.maxlen)
            cached = ((id(self.tokenizer), self.maxlen), tokenizer)
            object.__setattr__(self, "_graph", cached)  # a tf.Module: not a Keras-tracked attribute
        return cached[1]

    def _split(self, texts, texts_b):
        if self.texts == 2 and texts_b is None:
            if not isinstance(texts, (tuple, list)) or len(texts) != 2:
                raise ValueError("a pair preprocessor takes two string tensors (texts, texts_b), or one tuple of two")
            texts, texts_b = texts
        elif self.texts == 1 and texts_b is not None:
            raise ValueError("this preprocessor takes single texts; a cross-encoder's takes pairs")
        return texts, texts_b

    def call(self, texts, texts_b=None):
        """Strings -> the ids dict (tensors).

        :param texts: a string tensor [B] (or a scalar: one row), or a (texts, texts_b) tuple for pairs.
        :param texts_b: the second texts of pairs.
        """
        import tensorflow as tf

        if self.tokenizer is None:
            raise ValueError("this TextPreprocessor has no tokenizer (pass tokenizer=, or load it with its model)")
        texts, texts_b = self._split(texts, texts_b)
        texts = tf.convert_to_tensor(texts, tf.string)
        scalar = texts.shape.rank == 0
        if scalar:  # one text (a tf.data element before batching): one row
            texts = texts[None]
            texts_b = None if texts_b is None else tf.convert_to_tensor(texts_b, tf.string)[None]
        if texts_b is not None:
            texts_b = tf.convert_to_tensor(texts_b, tf.string)
        if self.in_graph:
            ids = self.graph_tokenizer()(texts, texts_b)
        else:
            ids = self._python_ids(texts, texts_b)
        if self.zero_segments:
            ids["segment_ids"] = tf.zeros_like(ids["segment_ids"])
        return {k: v[0] for k, v in ids.items()} if scalar else ids

    def _python_ids(self, texts, texts_b):
        """The Python tokenizer inside a TensorFlow graph (``tf.numpy_function``): the fallback without
        tensorflow-text."""
        import tensorflow as tf

        def tokenize(a, *b):
            a = [t.decode("utf-8") for t in a]
            b = [t.decode("utf-8") for t in b[0]] if b else None
            ids = self.tokenizer(a, b, maxlen=self.maxlen)
            return tuple(np.asarray(ids[k], "int32") for k in ID_NAMES)

        args = [texts] if texts_b is None else [texts, texts_b]
        out = tf.numpy_function(tokenize, args, [tf.int32] * 3, stateful=False)
        for tensor in out:
            tensor.set_shape([None, None])
        return dict(zip(ID_NAMES, out))

    def compute_output_spec(self, texts, texts_b=None):
        texts, _ = self._split(texts, texts_b)
        shape = (*texts.shape, None)
        return {k: keras.KerasTensor(shape, dtype="int32") for k in ID_NAMES}

    def tokenize(self, texts, texts_b=None):
        """Strings -> the ids as numpy arrays: what ``call`` gives, run eagerly by TensorFlow whatever the Keras
        backend.

        :param texts: a list or numpy array of texts.
        :param texts_b: the second texts of pairs.
        """
        ids = self.call(np.asarray(texts, dtype=object).astype(str),
                        None if texts_b is None else np.asarray(texts_b, dtype=object).astype(str))
        return {k: v.numpy() for k, v in ids.items()}

    def map_dataset(self, dataset):
        """A dataset of the ids, mapped in the pipeline (as keras-hub does), so a backend's compiled step never sees
        a string.

        :param dataset: a tf.data dataset of strings, or of (strings, labels[, weights]) elements.
        """
        import tensorflow as tf

        def preprocess(*element):
            if len(element) == 1:
                return self.call(element[0])
            if self.texts == 2 and len(element) == 2 and all(getattr(e, "dtype", None) == tf.string for e in element):
                return self.call(*element)  # a pair without a label
            return (self.call(element[0]), *element[1:])

        return dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)

    def __call__(self, *args, **kwargs):
        if keras.backend.backend() != "tensorflow" and not any(isinstance(a, keras.KerasTensor) for a in args):
            return self.call(*args, **kwargs)  # TensorFlow ops, run as they are (tf.data, eager), on any backend
        return super().__call__(*args, **kwargs)


# ----------------------------------------------------------------------------------- what a task's methods take
def is_strings(x):
    """Whether ``x`` is text a task's preprocessor takes: a str, a list/tuple of str (or of pairs of str), or a numpy
    array of strings."""
    if isinstance(x, str):
        return True
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "US" or (x.dtype == object and x.size > 0 and isinstance(x.flat[0], (str, bytes)))
    if isinstance(x, (list, tuple)) and x:
        first = x[0]
        return isinstance(first, str) or (isinstance(first, (list, tuple, np.ndarray)) and len(first) > 0
                                          and isinstance(first[0], str))
    return False


def is_string_dataset(x):
    """Whether ``x`` is a tf.data dataset whose features (the first part of an (x, y) element) are strings."""
    import sys

    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(x, tf.data.Dataset):
        return False
    spec = x.element_spec
    features = spec[0] if isinstance(spec, tuple) and len(spec) in (2, 3) and not _all_strings(spec) else spec
    return _all_strings(features)


def _all_strings(spec):
    import tensorflow as tf

    leaves = tf.nest.flatten(spec)
    return bool(leaves) and all(getattr(s, "dtype", None) == tf.string for s in leaves)
