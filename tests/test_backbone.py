"""zoo.BertBackbone: numerical parity with transformers on the reference checkpoints (TF and JAX backends),
the default preset, and backbone behaviour on tiny random models (erf GELU, attention masks, keep_tokens)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import zoo
from zoo.presets import load_saved
import torch_reference
from helpers import (L4, L6, assert_outputs_close, hf_google_pairs, load_quietly, max_diff, read_pairs, reference_outputs,
                      require_module, require_shared, tiny_bert_config, zoo_outputs)

PARITY_ATOL = 1e-4
OUTPUTS = ("sequence_output", "pooled_output", "mlm_logits")


# ------------------------------------------------------------------------------------------------ real checkpoints
@pytest.fixture(scope="module")
def lcqmc_batch():
    """64 real LCQMC test pairs encoded as pairs (maxlen 64), padded to 64 tokens."""
    data, vocab = require_shared("data/LCQMC/senteval_cn/LCQMC.test.data", f"{L4}/google/vocab.txt")
    pairs = read_pairs(data)
    picked = [pairs[i] for i in np.linspace(0, len(pairs) - 1, 64).astype(int)]
    picked[-1] = (picked[-1][0] * 6, picked[-1][1] * 6)  # one long pair, so truncation is exercised too
    tok = zoo.Tokenizer.from_preset(str(vocab))
    a, b = zip(*picked)
    batch = tok(list(a), list(b), maxlen=64, pad_to=64)
    assert batch["token_ids"].shape == (64, 64)
    assert batch["padding_mask"][-1].all() and not batch["padding_mask"].all()
    assert (batch["segment_ids"] == 1).any(axis=1).all()
    return batch


@pytest.fixture(scope="module")
def l4_reference(lcqmc_batch):
    """transformers BertForPreTraining on the L4 hf folder: the numerical reference (computed in a subprocess)."""
    return reference_outputs(torch_reference.run("from_pretrained", folder=str(require_shared(f"{L4}/hf")),
                                                 model="BertForPreTraining", batch=lcqmc_batch))


@pytest.fixture(scope="module")
def l4_google(lcqmc_batch):
    backbone = load_quietly(require_shared(f"{L4}/google"), with_mlm=True)
    return backbone, zoo_outputs(backbone, lcqmc_batch)


@pytest.fixture(scope="module")
def l4_hf(lcqmc_batch):
    backbone = load_quietly(require_shared(f"{L4}/hf"), with_mlm=True)
    return backbone, zoo_outputs(backbone, lcqmc_batch)


NSP = ["cls/seq_relationship/output_bias", "cls/seq_relationship/output_weights"]


def test_l4_google_matches_transformers(l4_google, l4_reference, lcqmc_batch):
    backbone, out = l4_google
    assert backbone.load_report.missing == [] and backbone.load_report.unused == NSP
    assert out["mlm_logits"].shape == (64, 64, 21128) and out["pooled_output"].shape == (64, 256)
    assert_outputs_close(out, l4_reference, lcqmc_batch["padding_mask"], PARITY_ATOL, label="L4 google vs torch")


def test_l4_hf_matches_transformers(l4_hf, l4_reference, lcqmc_batch):
    backbone, out = l4_hf
    assert backbone.load_report.missing == [] and backbone.load_report.unused == NSP
    assert_outputs_close(out, l4_reference, lcqmc_batch["padding_mask"], PARITY_ATOL, label="L4 hf vs torch")


def test_l4_google_and_hf_folders_identical(l4_google, l4_hf, lcqmc_batch):
    assert_outputs_close(l4_google[1], l4_hf[1], lcqmc_batch["padding_mask"], 1e-6, label="L4 google vs hf")
    from keras import ops

    for wg, wh in zip(l4_google[0].weights, l4_hf[0].weights):
        assert wg.path == wh.path
        np.testing.assert_array_equal(ops.convert_to_numpy(wg), ops.convert_to_numpy(wh), err_msg=wg.path)


def torch_from_google(folder, batch):
    """Outputs on ``batch`` of a transformers BertForPreTraining holding a Google TF1 checkpoint, via the test's own
    name mapping (the checkpoint is read here, the model runs in a subprocess; it checks that only the tied MLM
    decoder is missing and that it is tied)."""
    import tensorflow as tf

    config = json.loads((folder / "bert_config.json").read_text())
    reader = tf.train.load_checkpoint(str(folder / "bert_model.ckpt"))
    pairs = hf_google_pairs(config["num_hidden_layers"])
    assert set(reader.get_variable_to_shape_map()) == {g for _, g, _ in pairs}, "unexpected checkpoint variables"
    state = {}
    for h, g, transpose in pairs:
        a = reader.get_tensor(g)
        state[h] = np.ascontiguousarray(a.T if transpose else a)
    return reference_outputs(torch_reference.run("build", config=config, model="BertForPreTraining", state=state,
                                                 batch=batch))


@pytest.mark.slow
def test_l6_google_matches_transformers(lcqmc_batch):
    folder = require_shared(f"{L6}/google")
    reference = torch_from_google(folder, lcqmc_batch)
    backbone = load_quietly(folder, with_mlm=True)
    assert backbone.num_layers == 6 and backbone.hidden_dim == 384
    assert backbone.load_report.missing == [] and backbone.load_report.unused == NSP
    out = zoo_outputs(backbone, lcqmc_batch)
    assert_outputs_close(out, reference, lcqmc_batch["padding_mask"], PARITY_ATOL, label="L6 google vs torch")


JAX_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import keras
    import zoo
    assert keras.backend.backend() == "jax", keras.backend.backend()
    backbone = zoo.BertBackbone.from_preset(sys.argv[1], with_mlm=True)
    batch = dict(np.load(sys.argv[2]))
    out = backbone(batch, training=False)
    np.savez(sys.argv[3], backend=keras.backend.backend(),
             **{k: np.asarray(v) for k, v in out.items()})
""")


@pytest.mark.slow
def test_jax_backend_matches_transformers(tmp_path, lcqmc_batch, l4_reference, l4_google):
    folder = require_shared(f"{L4}/google")
    require_module("jax", "pip install 'jax[cpu]'")
    np.savez(tmp_path / "batch.npz", **lcqmc_batch)
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", JAX_SCRIPT, str(folder), str(tmp_path / "batch.npz"),
                           str(tmp_path / "out.npz")], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = dict(np.load(tmp_path / "out.npz"))
    assert str(out.pop("backend")) == "jax"
    mask = lcqmc_batch["padding_mask"]
    assert_outputs_close(out, l4_reference, mask, PARITY_ATOL, label="L4 google (jax) vs torch")
    assert_outputs_close(out, l4_google[1], mask, PARITY_ATOL, label="L4 google jax vs tensorflow")


def test_default_preset_equals_google_checkpoint(l4_google, lcqmc_batch):
    """The shipped preset (data/presets) is the reference L4 checkpoint, bit for bit."""
    google_dir = require_shared(f"{L4}/google")
    assert zoo.DEFAULT_PRESET == "chinese_L-4_H-256_A-4"
    model, tok = load_saved(zoo.DEFAULT_PRESET), zoo.Tokenizer.from_preset(zoo.DEFAULT_PRESET)
    assert isinstance(model, zoo.BertBackbone) and model.with_mlm
    assert tok.vocab == zoo.Tokenizer.from_preset(str(google_dir)).vocab and tok.do_lower_case
    out = zoo_outputs(model, lcqmc_batch)
    for k in OUTPUTS:
        np.testing.assert_array_equal(out[k], l4_google[1][k], err_msg=k)
    again = load_quietly(zoo.DEFAULT_PRESET)  # by name, through load_backbone
    assert not again.with_mlm and again.load_report.missing == []
    np.testing.assert_array_equal(zoo_outputs(again, lcqmc_batch)["sequence_output"], out["sequence_output"])


# ------------------------------------------------------------------------------------------------ tiny models
@pytest.fixture(scope="module")
def tiny_zoo(tiny_hf):
    return load_quietly(tiny_hf["dir"], with_mlm=True)


def test_tiny_model_matches_transformers(tiny_zoo, tiny_reference, tiny_batch):
    out = zoo_outputs(tiny_zoo, tiny_batch)
    assert_outputs_close(out, tiny_reference, tiny_batch["padding_mask"], 1e-5, label="tiny hf vs torch")


def test_exact_erf_gelu(tmp_path, tiny_vocab, tiny_batch):
    """zoo uses the exact erf GELU: it matches a transformers model with hidden_act='gelu' and is
    distinguishable from the same weights run with the tanh approximation ('gelu_new')."""
    # larger weights than usual, so FFN pre-activations reach |x| ~ 2, where erf and tanh GELU differ most
    config = tiny_bert_config(len(tiny_vocab[0]), initializer_range=0.2)
    ref = torch_reference.run("build", config=config, model="BertModel", seed=1, scale=0.1,
                              save={"hf": str(tmp_path)}, gelu_new=str(tmp_path / "tanh"), batch=tiny_batch)
    backbone = zoo.BertBackbone.from_preset(str(tmp_path))
    assert backbone.activation == "gelu"
    out = zoo_outputs(backbone, tiny_batch)
    erf, tanh = reference_outputs(ref), reference_outputs(ref, prefix="tanh/")
    mask = tiny_batch["padding_mask"]
    d_erf = max_diff(out["sequence_output"], erf["sequence_output"], mask)
    d_tanh = max_diff(out["sequence_output"], tanh["sequence_output"], mask)
    d_ref = max_diff(erf["sequence_output"], tanh["sequence_output"], mask)
    print(f"gelu: zoo vs erf {d_erf:.2e}, zoo vs tanh {d_tanh:.2e}, erf vs tanh (torch) {d_ref:.2e}")
    assert d_erf <= 1e-5
    assert d_ref > 5e-4 and d_tanh > 100 * d_erf
    # and a config asking for the tanh form gets it (the subprocess saved it with hidden_act="gelu_new")
    tanh_backbone = zoo.BertBackbone.from_preset(str(tmp_path / "tanh"))
    assert max_diff(zoo_outputs(tanh_backbone, tiny_batch)["sequence_output"], tanh["sequence_output"], mask) <= 1e-5


def test_attention_mask(tiny_zoo, tiny_batch):
    batch = {k: v[:2] for k, v in tiny_batch.items()}
    batch["padding_mask"] = np.ones_like(batch["padding_mask"])  # no padding: every position is real
    b, t = batch["token_ids"].shape
    plain = zoo_outputs(tiny_zoo, batch)
    ones = zoo_outputs(tiny_zoo, batch, attention_mask=np.ones((b, t, t), "int32"))
    for k in OUTPUTS:
        np.testing.assert_allclose(ones[k], plain[k], rtol=0, atol=1e-6, err_msg=k)

    causal = np.broadcast_to(np.tril(np.ones((t, t), "int32")), (b, t, t)).copy()
    with_causal = zoo_outputs(tiny_zoo, batch, attention_mask=causal)
    assert np.abs(with_causal["sequence_output"] - plain["sequence_output"]).max() > 1e-3  # the mask is used
    k = 9  # edit the token at position k: under the causal mask only positions >= k may change
    edited = {**batch, "token_ids": batch["token_ids"].copy()}
    edited["token_ids"][:, k] = np.where(edited["token_ids"][:, k] == 20, 21, 20)
    after = zoo_outputs(tiny_zoo, edited, attention_mask=causal)
    seq0, seq1 = with_causal["sequence_output"], after["sequence_output"]
    np.testing.assert_allclose(seq1[:, :k], seq0[:, :k], rtol=0, atol=1e-6)
    assert (np.abs(seq1[:, k:] - seq0[:, k:]).max(axis=-1) > 1e-4).all()
    # without the mask the edit reaches the earlier positions too
    unmasked = zoo_outputs(tiny_zoo, edited)["sequence_output"]
    assert np.abs(unmasked[:, :k] - plain["sequence_output"][:, :k]).max() > 1e-4


def test_first_token_only_equals_full_model(tiny_zoo, tiny_batch):
    """backbone(x, first_token_only=True) gives the full model's [CLS] state, pooled vector and gradients."""
    import tensorflow as tf

    from keras import ops

    def first_token(batch):
        return {k: ops.convert_to_numpy(v) for k, v in tiny_zoo(batch, training=False, first_token_only=True).items()}

    full = zoo_outputs(tiny_zoo, tiny_batch)
    first = first_token(tiny_batch)
    assert first["sequence_output"].shape[1] == 1 and "mlm_logits" not in first
    np.testing.assert_allclose(first["sequence_output"][:, 0], full["sequence_output"][:, 0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(first["pooled_output"], full["pooled_output"], rtol=0, atol=1e-6)
    b, t = tiny_batch["token_ids"].shape
    causal = np.broadcast_to(np.tril(np.ones((t, t), "int32")), (b, t, t)).copy()
    causal[:, 0, 3] = 1  # let [CLS] see a few later positions: the mask row of position 0 is what matters
    masked = zoo_outputs(tiny_zoo, tiny_batch, attention_mask=causal)
    first = first_token({**tiny_batch, "attention_mask": causal})
    np.testing.assert_allclose(first["pooled_output"], masked["pooled_output"], rtol=0, atol=1e-6)

    def grads(**kwargs):
        with tf.GradientTape() as tape:
            out = tiny_zoo(tiny_batch, training=False, **kwargs)
            loss = tf.reduce_sum(tf.sin(out["sequence_output"][:, 0])) + tf.reduce_sum(out["pooled_output"] ** 2)
        weights = [w for w in tiny_zoo.trainable_weights if "mlm" not in w.path]
        return [np.asarray(tf.convert_to_tensor(g)) if g is not None else np.zeros(w.shape) for w, g in
                zip(weights, tape.gradient(loss, [w.value for w in weights]))]

    for g_full, g_first in zip(grads(), grads(first_token_only=True)):  # float32 sums of terms up to ~50:
        np.testing.assert_allclose(g_first, g_full, rtol=1e-6, atol=1e-5)  # a few ulps of rounding allowed


def test_padding_positions_do_not_leak(tiny_zoo, tiny_batch):
    """Changing tokens under padding_mask == 0 leaves the real positions unchanged."""
    out = zoo_outputs(tiny_zoo, tiny_batch)
    noisy = {**tiny_batch, "token_ids": np.where(tiny_batch["padding_mask"] == 1, tiny_batch["token_ids"], 33)}
    out2 = zoo_outputs(tiny_zoo, noisy)
    mask = tiny_batch["padding_mask"]
    assert max_diff(out2["sequence_output"], out["sequence_output"], mask) <= 1e-6


def test_hidden_states_and_linear_pooler(tiny_hf, tiny_batch):
    backbone = load_quietly(tiny_hf["dir"], output_hidden_states=True, pooler_activation="linear")
    out = backbone(tiny_batch, training=False)
    hidden = [np.asarray(h) for h in out["hidden_states"]]
    ref = tiny_hf["outputs"]  # transformers' outputs with output_hidden_states=True (torch_reference)
    ref_hidden = [ref[k] for k in sorted((k for k in ref if k.startswith("hidden_state_")), key=lambda k: int(k[13:]))]
    linear_pooled = ref["linear_pooled"]
    assert len(hidden) == len(ref_hidden) == 3
    for i, (h, r) in enumerate(zip(hidden, ref_hidden)):
        assert max_diff(h, r, tiny_batch["padding_mask"]) <= 1e-5, f"hidden state {i}"
    np.testing.assert_allclose(np.asarray(out["pooled_output"]), linear_pooled, rtol=0, atol=1e-5)


def test_keep_tokens(tiny_hf, tiny_vocab, tiny_zoo, tiny_batch):
    tokens = tiny_vocab[0]
    new_tokens, keep = zoo.simplify_vocab(tokens)
    assert len(keep) < len(tokens)
    small = load_quietly(tiny_hf["dir"], with_mlm=True, keep_tokens=keep)
    assert small.vocabulary_size == len(keep)
    full_emb = tiny_zoo.get_layer("token_embedding").embeddings.numpy()
    np.testing.assert_array_equal(small.get_layer("token_embedding").embeddings.numpy(), full_emb[keep])
    np.testing.assert_array_equal(small.get_layer("mlm_bias").bias.numpy(),
                                  tiny_zoo.get_layer("mlm_bias").bias.numpy()[keep])
    # the same text in both id spaces
    rng = np.random.default_rng(3)
    small_batch = dict(tiny_batch)
    small_ids = rng.integers(5, len(keep), tiny_batch["token_ids"].shape).astype("int32")
    small_batch["token_ids"] = np.where(tiny_batch["padding_mask"] == 1, small_ids, 0).astype("int32")
    full_batch = {**small_batch, "token_ids": np.asarray(keep, "int32")[small_batch["token_ids"]]}
    got, want = zoo_outputs(small, small_batch), zoo_outputs(tiny_zoo, full_batch)
    mask = tiny_batch["padding_mask"]
    assert got["mlm_logits"].shape[-1] == len(keep)
    assert max_diff(got["sequence_output"], want["sequence_output"], mask) <= 1e-6
    assert max_diff(got["mlm_logits"], want["mlm_logits"][..., keep], mask) <= 1e-5
    # a simplified tokenizer and a keep_tokens backbone work together
    tok = zoo.Tokenizer.from_preset(str(tiny_hf["dir"]), simplified=True)
    assert tok.keep_tokens == keep and tok.vocab == new_tokens


def test_backbone_validation():
    with pytest.raises(ValueError, match="multiple"):
        zoo.BertBackbone(vocabulary_size=10, num_layers=1, num_heads=3, hidden_dim=16, intermediate_dim=8)
    with pytest.raises(ValueError, match="pooler_activation"):
        zoo.BertBackbone(vocabulary_size=10, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=8,
                         pooler_activation="relu")
    with pytest.raises(ValueError, match="hidden_act"):
        zoo.BertBackbone(vocabulary_size=10, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=8,
                         activation="gelu_magic")
