"""zoo.checkpoints / zoo.presets on tiny random models: transformers folders of every kind, pytorch_model.bin,
Google TF1 folders, save_google_checkpoint, error messages, load reports, presets and .keras files."""

from __future__ import annotations

import json
import re
import shutil
import logging

import numpy as np
import pytest

import torch_reference
import zoo
from helpers import (assert_outputs_close, google_config_of, hf_google_pairs, hf_to_google_arrays, load_quietly, logs,
                      no_warning_logged, write_google_checkpoint, zoo_outputs)
from zoo.checkpoints.torch_zip import read_torch_zip
from zoo.errors import CheckpointError
from zoo.presets import load_saved, save_preset

NSP = ["cls/seq_relationship/output_bias", "cls/seq_relationship/output_weights"]
POOLER = ["bert/pooler/dense/bias", "bert/pooler/dense/kernel"]
TOL = 1e-5


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def tiny_arrays(tiny_hf):
    """Google-named arrays of the tiny model, by the test's own mapping."""
    return hf_to_google_arrays(tiny_hf["state"], tiny_hf["config"]["num_hidden_layers"])


@pytest.fixture(scope="module")
def tiny_google(tmp_path_factory, tiny_hf, tiny_arrays, tiny_vocab):
    """A Google TF1 folder written from the tiny transformers model (independent mapping, tf.compat.v1 Saver)."""
    folder = tmp_path_factory.mktemp("tiny_google")
    return write_google_checkpoint(tiny_arrays, folder, google_config_of(tiny_hf["config"]), tiny_vocab[0])


def copy_google(src, dst, arrays=None, config_edit=None):
    """A variant of a Google folder: other arrays and/or an edited bert_config.json."""
    config = json.loads((src / "bert_config.json").read_text())
    if config_edit:
        config_edit(config)
    if arrays is None:
        dst.mkdir(parents=True)
        for f in src.iterdir():
            shutil.copy(f, dst / f.name)
        (dst / "bert_config.json").write_text(json.dumps(config))
        return dst
    return write_google_checkpoint(arrays, dst, config)


# ------------------------------------------------------------------------------------------------ transformers folders
# the load warning names what was left out (by head: "pooler (2 variables)", or by variable name)
WARN_UNUSED_NSP = r"not used by this model: .*(NSP head|cls/seq_relationship)"
WARN_MISSING_POOLER = r"left randomly initialised: .*(pooler|bert/pooler/dense)"

# name -> (with_mlm, expected missing, expected unused, warning, outputs compared); the folders are tiny_hf's (its
# BertForPreTraining, and the same weights written by transformers as each other layout: tests/torch_reference.py)
VARIANTS = {
    "BertForPreTraining": (True, [], NSP, WARN_UNUSED_NSP, ("sequence_output", "pooled_output", "mlm_logits")),
    "BertModel": (False, [], [], None, ("sequence_output", "pooled_output")),
    "BertForMaskedLM": (True, POOLER, [], WARN_MISSING_POOLER, ("sequence_output", "mlm_logits")),
    "pytorch_model.bin": (True, [], NSP, WARN_UNUSED_NSP, ("sequence_output", "pooled_output", "mlm_logits")),
}


def tiny_folder(tiny_hf, variant):
    return tiny_hf["dir"] if variant == "BertForPreTraining" else tiny_hf["variants"][variant]


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_transformers_folders_load_and_match(variant, tiny_hf, tiny_batch, tiny_reference, caplog):
    with_mlm, missing, unused, warning, keys = VARIANTS[variant]
    folder = tiny_folder(tiny_hf, variant)
    files = {p.name for p in folder.iterdir()}
    assert ("pytorch_model.bin" in files) == (variant == "pytorch_model.bin")
    if warning:
        with logs(caplog, warning):
            backbone = zoo.BertBackbone.from_preset(str(folder), with_mlm=with_mlm)
    else:
        with no_warning_logged(caplog):  # a clean load warns about nothing
            backbone = zoo.BertBackbone.from_preset(str(folder), with_mlm=with_mlm)
    report = backbone.load_report
    assert sorted(report.missing) == sorted(missing) and report.unused == unused
    assert len(report.loaded) == len(backbone.weights) - len(missing)
    out = zoo_outputs(backbone, tiny_batch)
    assert_outputs_close(out, tiny_reference, tiny_batch["padding_mask"], TOL, keys=keys, label=variant)


def test_bert_model_folder_with_mlm_reports_missing_head(tiny_hf, caplog):
    with logs(caplog, "left randomly initialised", logging.WARNING):
        backbone = zoo.BertBackbone.from_preset(str(tiny_folder(tiny_hf, "BertModel")), with_mlm=True)
    assert backbone.load_report.missing == [
        "cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
        "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
        "cls/predictions/output_bias"]
    summary = str(backbone.load_report)
    assert "not in the checkpoint" in summary and "MLM head (5 variables)" in summary
    assert "\n" not in summary and len(summary) < 300, summary  # one short line, heads grouped, not 70 names


def test_torch_zip_reader_matches_torch_load(tmp_path, tiny_hf, tiny_batch, tiny_reference):
    folder = tiny_folder(tiny_hf, "pytorch_model.bin")
    path = folder / "pytorch_model.bin"
    want = torch_reference.run("torch_load", path=str(path))  # torch.load, in a subprocess
    got = read_torch_zip(str(path))
    assert set(got) == set(want) and len(got) > 40
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    # load_backbone reads the same file through the zip reader (zoo never imports torch: a test that did would fail)
    backbone = load_quietly(folder, with_mlm=True)
    out = zoo_outputs(backbone, tiny_batch)
    assert_outputs_close(out, tiny_reference, tiny_batch["padding_mask"], TOL, label="pytorch_model.bin, no torch")
    # views with strides and storage offsets, other dtypes, saved by torch.save (their values come back)
    tensors = torch_reference.run("save_views", path=str(tmp_path / "views.bin"))
    got = read_torch_zip(str(tmp_path / "views.bin"))
    assert set(got) == set(tensors)
    for k, v in tensors.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
        assert got[k].dtype == v.dtype, k


# ------------------------------------------------------------------------------------------------ Google TF1
def test_google_folder_written_from_transformers(tiny_google, tiny_batch, tiny_reference, tiny_vocab, caplog):
    import tensorflow as tf

    names = {n for n, _ in tf.train.list_variables(str(tiny_google / "bert_model.ckpt"))}
    assert "bert/encoder/layer_1/attention/self/query/kernel" in names and "cls/predictions/output_bias" in names
    with logs(caplog, WARN_UNUSED_NSP):
        backbone = zoo.BertBackbone.from_preset(str(tiny_google), with_mlm=True)
    assert backbone.load_report.missing == [] and backbone.load_report.unused == NSP
    out = zoo_outputs(backbone, tiny_batch)
    assert_outputs_close(out, tiny_reference, tiny_batch["padding_mask"], TOL, label="tiny google vs torch")
    # a bert4keras-style checkpoint prefix works too
    by_prefix = load_quietly(tiny_google / "bert_model.ckpt", with_mlm=True)
    np.testing.assert_array_equal(zoo_outputs(by_prefix, tiny_batch)["mlm_logits"], out["mlm_logits"])
    assert zoo.Tokenizer.from_preset(str(tiny_google)).vocab == tiny_vocab[0]


def test_save_google_checkpoint_round_trip(tmp_path, tiny_hf, tiny_arrays, tiny_batch, tiny_vocab, caplog):
    import tensorflow as tf

    backbone = load_quietly(tiny_hf["dir"], with_mlm=True)
    tok = zoo.Tokenizer.from_preset(str(tiny_hf["dir"]))
    zoo.save_google_checkpoint(backbone, str(tmp_path / "g"), tokenizer=tok)
    prefix = str(tmp_path / "g" / "bert_model.ckpt")
    # what zoo wrote is the Google layout of the independent mapping, value for value
    reader = tf.train.load_checkpoint(prefix)
    written = set(reader.get_variable_to_shape_map())
    assert written == set(tiny_arrays) - set(NSP)
    for name in sorted(written):
        np.testing.assert_array_equal(reader.get_tensor(name), tiny_arrays[name], err_msg=name)
    config = json.loads((tmp_path / "g" / "bert_config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["hidden_size"] == 32 and config["hidden_act"] == "gelu"
    # and it loads back to the same model
    with no_warning_logged(caplog):
        again = zoo.BertBackbone.from_preset(str(tmp_path / "g"), with_mlm=True)
    assert again.load_report.missing == [] == again.load_report.unused
    a, b = zoo_outputs(backbone, tiny_batch), zoo_outputs(again, tiny_batch)
    for k in a:
        np.testing.assert_array_equal(b[k], a[k], err_msg=k)
    assert zoo.Tokenizer.from_preset(str(tmp_path / "g")).vocab == tiny_vocab[0]


# ------------------------------------------------------------------------------------------------ errors
def test_missing_folder(tmp_path):
    missing = tmp_path / "no_such_checkpoint"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        zoo.BertBackbone.from_preset(str(missing))


def test_unknown_layout_lists_files(tmp_path):
    (tmp_path / "weights.npz").write_bytes(b"0")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CheckpointError, match="unknown checkpoint layout") as e:
        zoo.BertBackbone.from_preset(str(tmp_path))
    assert "weights.npz" in str(e.value) and "notes.txt" in str(e.value) and str(tmp_path) in str(e.value)


def test_config_without_weights(tmp_path, tiny_google, tiny_hf):
    shutil.copy(tiny_google / "bert_config.json", tmp_path / "bert_config.json")
    with pytest.raises(CheckpointError, match=r"bert_config\.json found but no \*\.ckpt\.index"):
        zoo.BertBackbone.from_preset(str(tmp_path))
    hf = tmp_path / "hf"
    hf.mkdir()
    shutil.copy(tiny_hf["dir"] / "config.json", hf / "config.json")
    with pytest.raises(CheckpointError, match=r"config\.json found but no model\.safetensors"):
        zoo.BertBackbone.from_preset(str(hf))


@pytest.mark.parametrize("field", ["num_attention_heads", "hidden_size", "vocab_size"])
def test_missing_config_field(tmp_path, tiny_google, field):
    folder = copy_google(tiny_google, tmp_path / "g", config_edit=lambda c: c.pop(field))
    with pytest.raises(CheckpointError) as e:
        zoo.BertBackbone.from_preset(str(folder))
    message = str(e.value)
    assert str(folder / "bert_config.json") in message and field in message, message


def test_wrong_shape_names_file_variable_and_shapes(tmp_path, tiny_google, tiny_arrays):
    arrays = dict(tiny_arrays)
    name = "bert/encoder/layer_0/attention/self/query/kernel"
    arrays[name] = arrays[name][:, :16].copy()
    folder = copy_google(tiny_google, tmp_path / "g", arrays=arrays)
    with pytest.raises(CheckpointError) as e:
        zoo.BertBackbone.from_preset(str(folder))
    message = str(e.value)
    for part in (str(folder / "bert_model.ckpt"), name, "(32, 16)", "(32, 32)"):
        assert part in message, (part, message)


def test_wrong_shape_in_safetensors_names_the_file(tmp_path, tiny_hf):
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "hf"
    shutil.copytree(tiny_hf["dir"], folder)
    state = load_file(str(folder / "model.safetensors"))
    state["bert.embeddings.token_type_embeddings.weight"] = np.zeros((3, 32), "float32")
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError) as e:
        zoo.BertBackbone.from_preset(str(folder))
    message = str(e.value)
    for part in (str(folder / "model.safetensors"), "bert/embeddings/token_type_embeddings", "(3, 32)", "(2, 32)"):
        assert part in message, (part, message)


def test_missing_encoder_variable_names_file_and_variable(tmp_path, tiny_google, tiny_arrays):
    name = "bert/encoder/layer_1/output/dense/bias"
    arrays = {k: v for k, v in tiny_arrays.items() if k != name}
    folder = copy_google(tiny_google, tmp_path / "g", arrays=arrays)
    with pytest.raises(CheckpointError) as e:
        zoo.BertBackbone.from_preset(str(folder))
    assert str(folder / "bert_model.ckpt") in str(e.value) and name in str(e.value)


def test_unused_and_optimizer_variables_reported(tmp_path, tiny_google, tiny_arrays, tiny_batch, tiny_reference, caplog):
    arrays = dict(tiny_arrays)
    arrays["bert/encoder/layer_0/extra_adapter/kernel"] = np.ones((32, 4), "float32")
    arrays["bert/embeddings/word_embeddings/adam_m"] = np.zeros_like(arrays["bert/embeddings/word_embeddings"])
    arrays["bert/embeddings/word_embeddings/adam_v"] = np.zeros_like(arrays["bert/embeddings/word_embeddings"])
    arrays["global_step"] = np.array(7, "int64")
    folder = copy_google(tiny_google, tmp_path / "g", arrays=arrays)
    with logs(caplog, "extra_adapter"):
        backbone = zoo.BertBackbone.from_preset(str(folder), with_mlm=True)
    report = backbone.load_report
    assert report.unused == ["bert/encoder/layer_0/extra_adapter/kernel", *NSP]
    assert report.optimizer_state == 3 and report.missing == []
    assert "optimizer-state" in report.summary()
    out = zoo_outputs(backbone, tiny_batch)
    assert_outputs_close(out, tiny_reference, tiny_batch["padding_mask"], TOL, label="google + extras")


def test_missing_pooler_in_google_folder(tmp_path, tiny_google, tiny_arrays, caplog):
    arrays = {k: v for k, v in tiny_arrays.items() if not k.startswith("bert/pooler/")}
    folder = copy_google(tiny_google, tmp_path / "g", arrays=arrays)
    with logs(caplog, WARN_MISSING_POOLER, logging.WARNING):
        backbone = zoo.BertBackbone.from_preset(str(folder))
    assert sorted(backbone.load_report.missing) == POOLER


def test_keep_tokens_out_of_range(tiny_google, tiny_vocab):
    with pytest.raises(CheckpointError, match="keep_tokens"):
        load_quietly(tiny_google, keep_tokens=[0, 1, len(tiny_vocab[0]) + 5])


# ------------------------------------------------------------------------------------------------ presets, .keras
@pytest.fixture(scope="module")
def tiny_backbone(tiny_hf):
    return load_quietly(tiny_hf["dir"], with_mlm=True)


def test_preset_round_trip(tmp_path, tiny_backbone, tiny_hf, tiny_batch, caplog):
    tok = zoo.Tokenizer.from_preset(str(tiny_hf["dir"]))
    target = tmp_path / "my_preset"
    assert save_preset(tiny_backbone, tok, str(target)) == str(target)
    assert {p.name for p in target.iterdir()} >= {"zoo_config.json", "model.weights.h5", "vocab.txt",
                                                  "tokenizer_config.json"}
    want = zoo_outputs(tiny_backbone, tiny_batch)
    texts = ["我在中国，你好！", "Hello WORLD", "[MASK]是"]

    model, tok2 = load_saved(str(target)), zoo.Tokenizer.from_preset(str(target))
    assert isinstance(model, zoo.BertBackbone) and model.with_mlm
    got = zoo_outputs(model, tiny_batch)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    for t in texts:
        assert tok2.encode(t, "的") == tok.encode(t, "的")

    with no_warning_logged(caplog):
        again = zoo.BertBackbone.from_preset(str(target), with_mlm=True)
    for k, v in zoo_outputs(again, tiny_batch).items():
        np.testing.assert_array_equal(v, want[k], err_msg=k)
    assert zoo.Tokenizer.from_preset(str(target)).vocab == tok.vocab
    np.testing.assert_array_equal(load_saved(str(target))(tiny_batch)["pooled_output"], want["pooled_output"])

    # saving over an existing preset replaces it and leaves no temporary folder behind
    save_preset(tiny_backbone, tok, str(target), metadata={"note": "second"})
    config = json.loads((target / "zoo_config.json").read_text())
    assert config["format"] == "zoo-preset" and config["metadata"]["note"] == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_preset"]


def test_keras_file_round_trip(tmp_path, tiny_backbone, tiny_batch, caplog):
    import keras

    path = str(tmp_path / "m.keras")
    tiny_backbone.save(path)
    want = zoo_outputs(tiny_backbone, tiny_batch)
    loaded = keras.saving.load_model(path)  # no custom_objects: `import zoo` registered the classes
    assert isinstance(loaded, zoo.BertBackbone)
    for k, v in zoo_outputs(loaded, tiny_batch).items():
        np.testing.assert_array_equal(v, want[k], err_msg=k)
    with no_warning_logged(caplog):
        backbone = zoo.BertBackbone.from_preset(path, with_mlm=True)
    assert backbone.load_report.missing == [] and backbone.load_report.source == path
    for k, v in zoo_outputs(backbone, tiny_batch).items():
        np.testing.assert_array_equal(v, want[k], err_msg=k)
    with pytest.raises(FileNotFoundError):
        load_saved(str(tmp_path / "absent.keras"))


def test_not_a_preset(tmp_path):
    (tmp_path / "zoo_config.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(CheckpointError, match="not a zoo preset"):
        load_saved(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no zoo preset of that name"):
        load_saved("no-such-preset-name")


def test_independent_mapping_covers_the_model(tiny_hf):
    """Guard for the test helper itself: the mapping names every tensor of BertForPreTraining exactly once."""
    state = tiny_hf["state"]
    pairs = hf_google_pairs(2)
    mapped = {h for h, _, _ in pairs}
    assert len(mapped) == len(pairs) == len({g for _, g, _ in pairs})
    assert mapped == set(state) - {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}


def test_preset_manifest_catches_changed_truncated_and_missing_files(tmp_path):
    """zoo_config.json lists each file's sha256 and size; loading checks them and names the file that differs."""
    from helpers import tiny_sentence_encoder

    folder = tmp_path / "enc"
    tiny_sentence_encoder(seed=3).save_to_preset(folder)
    manifest = json.loads((folder / "zoo_config.json").read_text())["files"]
    assert {"model.weights.h5", "vocab.txt"} <= set(manifest)
    zoo.SentenceEncoder.from_preset(folder)  # intact: loads

    weights = folder / "model.weights.h5"
    original = weights.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.weights\.h5: sha256 differs"):
        zoo.SentenceEncoder.from_preset(folder)
    weights.write_bytes(bytes(data[:-100]))
    with pytest.raises(CheckpointError, match=r"model\.weights\.h5: \d+ bytes, zoo_config\.json says"):
        zoo.from_preset(folder)
    weights.write_bytes(original)
    (folder / "vocab.txt").unlink()
    with pytest.raises(CheckpointError, match=r"vocab\.txt: file missing"):
        zoo.BertBackbone.from_preset(folder)
