"""Cached in-batch negatives (GradCache, zoo/train/cached.py): one step computed in mini-batches updates the weights
as the uncached batch does, on TensorFlow (with and without XLA) and on JAX; with dropout, each mini-batch's masks
are replayed; the job takes --cached-mini-batch-size."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_same_weights, synthetic_vocab, tiny_train_config, weights_after_a_jax_step

import zoo
from zoo.losses import CoSENTInBatchLoss
from zoo.models.bi_encoder import build_trainer
from zoo.train.cached import cached

PAIRS = [("今天天气不错", "今天天气很好"), ("花呗怎么开通", "如何开通花呗"), ("借呗怎么还款", "信用卡逾期"),
         ("你好", "再见"), ("中国", "我们"), ("hello world", "hello"), ("今天", "明天"), ("keras", "zoo"),
         ("天气不错", "天气很好"), ("怎么还款", "如何还款"), ("我们", "你们"), ("the", "and")]  # 24 rows
LABELS = np.array([[1, 1], [1, 1], [0, 0], [0, 0], [1, 1], [0, 0], [0, 0], [1, 1], [1, 1], [1, 1], [0, 0], [1, 1]],
                  dtype="float32")  # CoSENT label, anchor flag
LR, MINI = 0.5, 5  # 24 rows in mini-batches of 5: the last one padded


def encoder(dropout=0.0, seed=3):
    keras.utils.set_random_seed(seed)
    tok = zoo.Tokenizer(synthetic_vocab())
    backbone = zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=64, dropout=dropout)
    return zoo.SentenceEncoder(backbone, tok, pooling="mean", maxlen=16)


def rows(model):
    texts = [t for pair in PAIRS for t in pair]  # interleaved: a1, b1, a2, b2, ...
    return {k: np.asarray(v) for k, v in model.preprocessor.tokenize(texts).items()}


def weights_by_path(model):
    return {v.path: np.array(v.numpy()) for v in model.trainable_variables}


def step(model, mini_batch_size, jit_compile=False):
    trainer = cached(build_trainer(model, in_batch=True), mini_batch_size)
    trainer.compile(keras.optimizers.SGD(LR), CoSENTInBatchLoss(1.0), jit_compile=jit_compile)
    logs = trainer.train_on_batch(rows(model), LABELS, return_dict=True)
    return weights_by_path(model), float(logs["loss"])


def seed_states(model):
    return [v for v in model.non_trainable_variables if "seed_generator" in v.path]


@pytest.mark.parametrize("jit_compile", [False, True])
def test_the_cached_step_equals_the_uncached_batch(jit_compile):
    """Without dropout (the tiny model's rate 0) the cached step's loss and update equal the uncached batch's (1e-5);
    a mini-batch size that does not divide the batch pads the last one without changing the result."""
    want, want_loss = step(encoder(), None)
    for mini in (MINI, 8):
        got, loss = step(encoder(), mini, jit_compile)
        assert got.keys() == want.keys()
        assert abs(loss - want_loss) < 1e-5, (mini, loss, want_loss)
        for path in want:
            np.testing.assert_allclose(got[path], want[path], atol=1e-5, err_msg=f"{mini}: {path}")
    with pytest.raises(zoo.ConfigError, match="mini-batch size must be an integer >= 2"):
        cached(build_trainer(encoder(), in_batch=True), 1)


def test_with_dropout_each_mini_batch_replays_its_masks():
    """With dropout the uncached batch draws other masks, so the reference is the batch computed part by part from
    the same random state in one tape (what GradCache's first pass computes): the cached step equals it (1e-5);
    without the replay its gradient would come from other masks than its loss."""
    reference = encoder(dropout=0.3)
    x, start = rows(reference), [np.array(v.numpy()) for v in seed_states(reference)]
    assert start and any(s.size for s in start)
    variables = reference.trainable_variables
    with tf.GradientTape() as tape:
        parts = [reference({k: v[a:a + MINI] for k, v in x.items()}, training=True) for a in range(0, 24, MINI)]
        loss = CoSENTInBatchLoss(1.0)(LABELS, tf.concat(parts, 0))
    want = {v.path: np.array(v.numpy()) - LR * tf.convert_to_tensor(g).numpy()
            for v, g in zip(variables, tape.gradient(loss, variables))}
    model = encoder(dropout=0.3)
    for variable, value in zip(seed_states(model), start):
        variable.assign(value)
    got, got_loss = step(model, MINI)
    assert abs(got_loss - float(loss)) < 1e-5
    for path in want:
        np.testing.assert_allclose(got[path], want[path], atol=1e-5, err_msg=path)
    plain, _ = step(encoder(dropout=0.3), None)  # other masks: another update
    assert max(np.abs(plain[p] - got[p]).max() for p in got) > 1e-4


JAX_SCRIPT = """
import json, sys
import keras, numpy as np, zoo
from zoo.losses import CoSENTInBatchLoss
from zoo.models.bi_encoder import build_trainer
from zoo.train.cached import cached
model = zoo.SentenceEncoder.from_preset(sys.argv[1])
x, y = dict(np.load(sys.argv[2])), np.array(json.loads(sys.argv[5]), dtype="float32")
trainer = cached(build_trainer(model, in_batch=True), int(sys.argv[3]))
trainer.compile(keras.optimizers.SGD(float(sys.argv[4])), CoSENTInBatchLoss(1.0))
trainer.train_on_batch(x, y)
np.savez(sys.argv[6], **{v.path: np.asarray(v.value) for v in model.trainable_variables})
print(keras.backend.backend())
"""


@pytest.mark.slow
def test_the_jax_step_equals_the_uncached_tensorflow_step(tmp_path):
    """On JAX (the stateless step, XLA-compiled) the cached step updates every weight as TensorFlow's uncached
    batch does (1e-5)."""
    model = encoder()
    model.save_to_preset(tmp_path / "encoder")
    np.savez(tmp_path / "x.npz", **rows(model))
    got = weights_after_a_jax_step(JAX_SCRIPT, tmp_path / "encoder", tmp_path / "x.npz", MINI, LR,
                                   json.dumps(LABELS.tolist()), tmp_path / "after.npz")
    assert_same_weights(got, step(encoder(), None)[0])


@pytest.mark.slow
def test_the_job_trains_with_a_cache_as_without(tiny_setup, tmp_path):
    """``zoo train bi-encoder --in-batch-weight 1 --cached-mini-batch-size 6`` on the tiny preset trains and records
    the setting, close to the uncached run: not equal, as Adam's first steps divide each gradient by its own size, so
    float32 rounding differences on the tiny model's near-zero gradients (layer-norm weights, ~1e-7) become
    differences of up to a step (the step's equality is shown above with SGD). The flag is refused without the
    in-batch loss, below 2 and beside FGM, before any data is read."""
    from zoo.jobs import bi_encoder

    runs = {}
    for mini in (None, 6):
        config = tiny_train_config(tiny_setup, tmp_path / f"mini_{mini}", epochs=1, in_batch_weight=1.0,
                                   cached_mini_batch_size=mini)
        bi_encoder.run(config)
        runs[mini] = json.loads((tmp_path / f"mini_{mini}" / "results.json").read_text())
    assert runs[6]["config"]["cached_mini_batch_size"] == 6
    want, got = runs[None]["epochs"][-1]["train_loss"], runs[6]["epochs"][-1]["train_loss"]
    assert np.isfinite(got) and got == pytest.approx(want, rel=0.1)
    for bad in ({}, {"in_batch_weight": 1.0, "cached_mini_batch_size": 1},
                {"in_batch_weight": 1.0, "adversarial_epsilon": 1.0}):
        with pytest.raises(zoo.ConfigError, match="--cached-mini-batch-size"):
            tiny_train_config(tiny_setup, tmp_path / "bad", **{"cached_mini_batch_size": 4, **bad})
