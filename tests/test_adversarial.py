"""Adversarial training on the word embeddings (FGM, zoo/train/adversarial.py): one step equals its definition on
TensorFlow and on JAX, the table is restored, and the jobs take --adversarial-epsilon."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import (assert_same_weights, tiny_sentence_encoder, tiny_train_config,
                     weights_after_a_jax_step)

import zoo
from zoo.train.adversarial import EMBEDDING_TABLE, adversarial

PAIRS = [("今天天气不错", "今天天气很好"), ("花呗怎么开通", "如何开通花呗"), ("借呗怎么还款", "信用卡逾期"),
         ("你好", "再见"), ("中国", "我们"), ("hello world", "hello")]
LABELS = np.array([1, 1, 0, 0, 1, 0])
EPSILON, LR = 0.5, 0.1


def scorer(seed=3):
    enc = tiny_sentence_encoder(seed)
    return zoo.CrossEncoder(enc.backbone, enc.tokenizer, maxlen=16)


def pair_ids(model):
    return model.preprocessor.tokenize([a for a, _ in PAIRS], [b for _, b in PAIRS])


def weights_by_path(model):
    return {v.path: np.array(v.numpy()) for v in model.trainable_variables}


def fgm_by_hand(model, x, y):
    """FGM's SGD step written out: gradients at E, the table moved by epsilon * g / ||g||, gradients there, the
    table moved back, both gradients applied."""
    trainer = model.trainer()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = trainer.trainable_variables

    def gradients():
        with tf.GradientTape() as tape:
            value = loss(y, trainer(x, training=True))
        return [tf.convert_to_tensor(g) for g in tape.gradient(value, variables)]

    clean = gradients()
    index = next(i for i, v in enumerate(variables) if v.path.endswith(EMBEDDING_TABLE))
    delta = EPSILON * clean[index] / (tf.norm(clean[index]) + 1e-8)
    variables[index].assign_add(delta)
    moved = gradients()
    variables[index].assign_sub(delta)
    return {v.path: np.array(v.numpy()) - LR * (a + b).numpy() for v, a, b in zip(variables, clean, moved)}


def fgm_step(model, x, y, epsilon=EPSILON):
    trainer = adversarial(model.trainer(), epsilon)
    trainer.compile(keras.optimizers.SGD(LR), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    jit_compile=False)
    trainer.train_on_batch(x, y)
    return weights_by_path(model)


def test_one_fgm_step_is_its_definition_and_restores_the_table():
    """On TensorFlow: the step's update equals FGM written out by hand (1e-5, float32 rounding between a compiled
    graph and eager ops; no dropout in the tiny model); it
    differs from a plain step (the perturbed pass counts), and the table is moved back (only the update stays)."""
    x = pair_ids(scorer())
    want = fgm_by_hand(scorer(), x, LABELS)
    got = fgm_step(scorer(), x, LABELS)
    assert got.keys() == want.keys()
    for path in want:
        np.testing.assert_allclose(got[path], want[path], atol=1e-5, err_msg=path)
    plain = scorer()
    trainer = plain.trainer()
    trainer.compile(keras.optimizers.SGD(LR), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    jit_compile=False)
    trainer.train_on_batch(x, LABELS)
    table = next(p for p in want if p.endswith(EMBEDDING_TABLE))
    assert np.abs(weights_by_path(plain)[table] - got[table]).max() > 1e-4
    with pytest.raises(zoo.ConfigError, match="epsilon must be > 0"):
        adversarial(scorer().trainer(), 0.0)


JAX_SCRIPT = """
import json, sys
import keras, numpy as np, zoo
from zoo.train.adversarial import adversarial
model = zoo.CrossEncoder.from_preset(sys.argv[1])
x = dict(np.load(sys.argv[2]))
trainer = adversarial(model.trainer(), float(sys.argv[3]))
trainer.compile(keras.optimizers.SGD(float(sys.argv[4])), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
trainer.train_on_batch(x, np.array(json.loads(sys.argv[5])))
np.savez(sys.argv[6], **{v.path: np.asarray(v.value) for v in model.trainable_variables})
print(keras.backend.backend())
"""


@pytest.mark.slow
def test_the_jax_step_equals_the_tensorflow_step(tmp_path):
    """On JAX (the stateless step, XLA-compiled) one FGM step updates every weight as on TensorFlow (1e-5)."""
    model = scorer()
    model.save_to_preset(tmp_path / "scorer")
    x = pair_ids(model)
    np.savez(tmp_path / "x.npz", **x)
    got = weights_after_a_jax_step(JAX_SCRIPT, tmp_path / "scorer", tmp_path / "x.npz", EPSILON, LR,
                                   json.dumps(LABELS.tolist()), tmp_path / "after.npz")
    assert_same_weights(got, fgm_step(scorer(), x, LABELS))


@pytest.mark.slow
def test_the_jobs_take_the_flag_and_refuse_it_across_devices(tiny_setup, tmp_path):
    """``zoo train bi-encoder --adversarial-epsilon 1`` trains (its results record the setting) and differs from the
    same run without it; the flag is checked before any data is read."""
    from zoo.jobs import bi_encoder

    runs = {}
    for epsilon in (None, 1.0):
        config = tiny_train_config(tiny_setup, tmp_path / f"eps_{epsilon}", epochs=1, adversarial_epsilon=epsilon)
        bi_encoder.run(config)
        runs[epsilon] = json.loads((tmp_path / f"eps_{epsilon}" / "results.json").read_text())
    assert runs[1.0]["config"]["adversarial_epsilon"] == 1.0
    assert runs[1.0]["epochs"][-1]["train_loss"] != runs[None]["epochs"][-1]["train_loss"]
    for bad in ({"adversarial_epsilon": -1.0}, {"adversarial_epsilon": 1.0, "distribute": "data-parallel"}):
        with pytest.raises(zoo.ConfigError, match="--adversarial-epsilon"):
            tiny_train_config(tiny_setup, tmp_path / "bad", **bad)
