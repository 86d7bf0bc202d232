"""Raw strings in Keras: each task's preprocessor layer, predict / fit / evaluate on strings and tf.data datasets of
strings, a functional model that starts from keras.Input(dtype="string"), and the Python fallback without
tensorflow-text (zoo/models/preprocessor.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import require_module, tiny_sentence_encoder

import zoo
from zoo.models import preprocessor as preprocessing

TEXTS = ["花呗怎么开通", "如何开通花呗", "今天天气不错", "借呗怎么还款", "hello world", "中国", "我们的keras zoo"]


@pytest.fixture(scope="module")
def shipped():
    return zoo.SentenceEncoder.from_preset("zoo-embed-zh-L4")


@pytest.mark.slow
def test_predict_on_strings_is_the_models_own_output(shipped):
    """predict(["花呗怎么开通"]) gives the model's unnormalised vector, as encode() at fp32 without normalisation; a
    list, a numpy array and a tf.data dataset of strings give the same."""
    want = shipped.encode(TEXTS, normalize_embeddings=False, engine="fp32")
    assert not np.allclose(np.linalg.norm(want, axis=1), 1.0, atol=1e-3)  # unnormalised: the model's own output
    np.testing.assert_allclose(shipped.predict(["花呗怎么开通"], verbose=0), want[:1], atol=1e-6)
    np.testing.assert_allclose(shipped.predict(TEXTS, verbose=0), want, atol=1e-5)
    np.testing.assert_allclose(shipped.predict(np.array(TEXTS), batch_size=3, verbose=0), want, atol=1e-5)
    dataset = tf.data.Dataset.from_tensor_slices(TEXTS).batch(3)
    np.testing.assert_allclose(shipped.predict(dataset, verbose=0), want, atol=1e-5)
    ids = shipped.preprocessor.tokenize(TEXTS)
    for key, value in shipped.tokenizer(TEXTS, maxlen=shipped.maxlen).items():
        np.testing.assert_array_equal(ids[key], value, err_msg=key)


@pytest.mark.parametrize("head,zero_segments", [("softmax", False), ("cosent", True)])
def test_cross_encoder_predicts_and_trains_on_raw_pairs(head, zero_segments):
    """A cross-encoder's predict on (text_a, text_b) pairs returns its head's logits: score() is their served form
    (segments zeroed when the model was trained so); fit and evaluate take the pairs too."""
    enc = tiny_sentence_encoder()
    scorer = zoo.CrossEncoder(enc.backbone, enc.tokenizer, head=head, maxlen=16, zero_segments=zero_segments)
    pairs = [(a, b) for a, b in zip(TEXTS, TEXTS[1:] + TEXTS[:1])]
    logits = scorer.predict(pairs, verbose=0)
    assert logits.shape == (len(pairs), 2 if head == "softmax" else 1)
    np.testing.assert_allclose(scorer.head_spec().serve_numpy(logits), scorer.score(pairs), atol=1e-5)
    ids = scorer.preprocessor.tokenize([a for a, _ in pairs], [b for _, b in pairs])
    assert (ids["segment_ids"] == 0).all() == zero_segments
    if head == "softmax":
        labels = np.array([1, 0, 1, 0, 1, 0, 1])
        scorer.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       jit_compile=False)
        dataset = tf.data.Dataset.from_tensor_slices(((np.array(pairs)[:, 0], np.array(pairs)[:, 1]), labels))
        before = scorer.evaluate(pairs, labels, verbose=0)
        scorer.fit(dataset.batch(4), epochs=8, shuffle=False, verbose=0)
        assert scorer.evaluate(dataset.batch(4), verbose=0) < before


@pytest.mark.slow
def test_a_string_input_classifier_trains_saves_reloads_and_predicts_the_same(tmp_path):
    """keras.Input(shape=(), dtype="string") -> the encoder's preprocessor -> the encoder -> a head: trains on numpy
    strings and on a tf.data dataset, compiles without XLA by itself, and a .keras file reloads it exactly."""
    enc = tiny_sentence_encoder()
    texts = np.array(TEXTS * 2, dtype=object)  # Keras' own array adapter takes no fixed-width unicode arrays
    labels = np.array([1, 1, 0, 1, 0, 0, 1] * 2)
    inputs = keras.Input(shape=(), dtype="string")
    outputs = keras.layers.Dense(2, activation="softmax")(enc(enc.preprocessor(inputs)))
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy")
    assert model.jit_compile is False  # jit_compile="auto": the string layer does not support XLA
    first = model.fit(texts, labels, batch_size=4, epochs=1, verbose=0).history["loss"][0]
    dataset = tf.data.Dataset.from_tensor_slices((texts, labels)).shuffle(14, seed=0).batch(4)
    last = model.fit(dataset, epochs=10, shuffle=False, verbose=0).history["loss"][-1]
    assert last < first
    path = tmp_path / "classifier.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded.predict(texts, verbose=0), model.predict(texts, verbose=0), atol=1e-6)
    layer = next(x for x in loaded.layers if isinstance(x, preprocessing.TextPreprocessor))
    assert layer.maxlen == enc.maxlen and layer.tokenizer.vocab == enc.tokenizer.vocab


def test_the_python_fallback_gives_the_in_graph_ids(monkeypatch):
    """Without tensorflow-text the same layer runs the Python tokenizer in the pipeline: the same ids, eagerly and
    in tf.data, for texts and for pairs (cut at maxlen)."""
    enc = tiny_sentence_encoder()
    texts = TEXTS + ["x" * 150, "unbelievable " * 9, "", "[CLS] [MASK] 中国"]
    single = preprocessing.TextPreprocessor(enc.tokenizer, maxlen=8)
    pairs = preprocessing.TextPreprocessor(enc.tokenizer, maxlen=8, texts=2)
    graph = single.tokenize(texts), pairs.tokenize(texts, texts[::-1])
    assert single.in_graph
    monkeypatch.setattr(preprocessing, "has_tensorflow_text", lambda: False)
    assert not single.in_graph
    for got, want in zip((single.tokenize(texts), pairs.tokenize(texts, texts[::-1])), graph):
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    batch = next(iter(single.map_dataset(tf.data.Dataset.from_tensor_slices(texts).batch(len(texts)))))
    np.testing.assert_array_equal(batch["token_ids"].numpy(), graph[0]["token_ids"])


JAX_SCRIPT = """
import json, sys
import numpy as np, tensorflow as tf, keras, zoo
enc = zoo.SentenceEncoder.from_preset(sys.argv[1])
texts = json.loads(sys.argv[2])
listed = enc.predict(texts, verbose=0)
streamed = enc.predict(tf.data.Dataset.from_tensor_slices(texts).batch(3), verbose=0)
print(json.dumps({"backend": keras.backend.backend(), "listed": listed.tolist(), "streamed": streamed.tolist()}))
"""


@pytest.mark.slow
def test_on_jax_strings_are_tokenized_in_the_data_pipeline(tmp_path):
    """On the JAX backend a task's predict takes a list and a tf.data dataset of strings (tokenized by TensorFlow
    ops in the pipeline) and gives TensorFlow's outputs."""
    require_module("jax", "pip install 'jax[cpu]'")
    enc = tiny_sentence_encoder()
    enc.save_to_preset(tmp_path / "encoder")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run([sys.executable, "-c", JAX_SCRIPT, str(tmp_path / "encoder"), json.dumps(TEXTS)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["backend"] == "jax"
    want = enc.predict(TEXTS, verbose=0)
    np.testing.assert_allclose(np.array(out["listed"]), want, atol=1e-5)
    np.testing.assert_allclose(np.array(out["streamed"]), want, atol=1e-5)


def test_bad_inputs_are_named():
    enc = tiny_sentence_encoder()
    scorer = zoo.CrossEncoder(enc.backbone, enc.tokenizer, maxlen=16)
    with pytest.raises(ValueError, match="takes \\(text_a, text_b\\) pairs"):
        scorer.predict(["one text"], verbose=0)
    with pytest.raises(ValueError, match="takes single texts"):
        enc.preprocessor.call(tf.constant(["a"]), tf.constant(["b"]))
    with pytest.raises(ValueError, match="texts must be 1"):
        preprocessing.TextPreprocessor(enc.tokenizer, texts=3)
