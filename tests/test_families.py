"""BERT's relatives (RoFormer, ALBERT, ELECTRA, ERNIE): tiny random models written by transformers' own classes
(``save_pretrained``) and TF1 checkpoints written with the public releases' variable names load with
``BertBackbone.from_preset`` as their family and give transformers' hidden states, pooled vectors (cls, mean, the
pooler) and MLM logits within 1e-5 on a padded batch with two segments."""

from __future__ import annotations

import json

import numpy as np
import pytest

import torch_reference
import zoo
from helpers import max_diff, state_of, write_google_checkpoint
from zoo.errors import CheckpointError

TOL = 1e-5
BASE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)

# name -> (transformers config class, model class, config, zoo class, expected missing heads, has pooler, has MLM)
FAMILIES = {
    "roformer": ("RoFormerConfig", "RoFormerForMaskedLM", dict(type_vocab_size=2, hidden_act="gelu"),
                 "RoFormerBackbone", True, False),
    "albert": ("AlbertConfig", "AlbertForPreTraining", dict(type_vocab_size=2, embedding_size=16,
                                                            hidden_act="gelu_new"), "AlbertBackbone", False, True),
    "electra": ("ElectraConfig", "ElectraForPreTraining", dict(type_vocab_size=2, embedding_size=16,
                                                               hidden_act="gelu"), "ElectraBackbone", True, False),
    "electra-generator": ("ElectraConfig", "ElectraForMaskedLM", dict(type_vocab_size=2, embedding_size=16,
                                                                      hidden_act="gelu"), "ElectraBackbone", True,
                          False),
    "ernie": ("ErnieConfig", "ErnieForPreTraining", dict(type_vocab_size=4, use_task_id=True, task_type_vocab_size=3,
                                                         hidden_act="gelu", layer_norm_eps=1e-5), "ErnieBackbone",
              False, True),
}
HAS_MLM = {"roformer", "albert", "electra-generator", "ernie"}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_model(request, tmp_path_factory, tiny_vocab, tiny_batch):
    """(name, transformers folder, its outputs and state) of one family's tiny random model."""
    name = request.param
    config_class, model_class, extra = FAMILIES[name][:3]
    tokens, _ = tiny_vocab
    folder = tmp_path_factory.mktemp(f"hf_{name}")
    config = {**BASE, **extra, "vocab_size": len(tokens)}
    bin_folder = tmp_path_factory.mktemp(f"bin_{name}")
    out = torch_reference.run("build_family", config_class=config_class, model=model_class, config=config,
                              folder=str(folder), bin_folder=str(bin_folder), seed=1, scale=0.05, batch=tiny_batch)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return {"name": name, "folder": folder, "bin_folder": bin_folder, "config": config, "outputs": out,
            "state": state_of(out)}


def zoo_outputs(backbone, batch):
    from keras import ops

    out = backbone(batch, training=False)
    result = {k: ops.convert_to_numpy(v) for k, v in out.items() if k != "hidden_states"}
    for i, h in enumerate(out.get("hidden_states", [])):
        result[f"hidden_state_{i}"] = ops.convert_to_numpy(h)
    return result


def check_parity(backbone, family_model, batch, label):
    """Every output transformers gives equals zoo's within TOL at the real positions; returns the max-diffs."""
    want = family_model["outputs"]
    got = zoo_outputs(backbone, batch)
    keys = ["sequence_output"] + [k for k in want if k.startswith("hidden_state_")]
    keys += [k for k in ("pooled_output", "mlm_logits") if k in want]
    diffs = {k: max_diff(got[k], want[k], batch["padding_mask"]) for k in keys}
    print(f"{label}: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
    for k, v in diffs.items():
        assert v <= TOL, f"{label}: {k} differs from transformers by {v:.2e}"
    return diffs


def load(path, name, **kwargs):
    backbone = zoo.BertBackbone.from_preset(str(path), with_mlm=name in HAS_MLM, output_hidden_states=True, **kwargs)
    assert type(backbone).__name__ == FAMILIES[name][3]
    return backbone


def test_transformers_folder_matches(family_model, tiny_batch):
    name = family_model["name"]
    backbone = load(family_model["folder"], name)
    check_parity(backbone, family_model, tiny_batch, f"{name} transformers folder")
    missing = backbone.load_report.missing
    if FAMILIES[name][4]:  # no pooler in the family's checkpoints: reported, left random
        assert set(missing) == {"bert/pooler/dense/kernel", "bert/pooler/dense/bias"}, missing
    else:
        assert not missing, missing


def test_pytorch_model_bin_folder_matches(family_model, tiny_batch):
    """The same weights as ``pytorch_model.bin`` (read without torch) give the same outputs."""
    name = family_model["name"]
    check_parity(load(family_model["bin_folder"], name), family_model, tiny_batch, f"{name} pytorch_model.bin")


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sentence_vectors_match(family_model, tiny_batch, pooling):
    """SentenceEncoder on each family: its vectors are transformers' last layer pooled (padding excluded)."""
    encoder = zoo.SentenceEncoder.from_preset(str(family_model["folder"]), pooling=pooling)
    from keras import ops

    got = ops.convert_to_numpy(encoder(tiny_batch, training=False))
    hidden, mask = family_model["outputs"]["sequence_output"], tiny_batch["padding_mask"][:, :, None]
    want = hidden[:, 0] if pooling == "cls" else (hidden * mask).sum(1) / mask.sum(1)
    assert max_diff(got, want) <= TOL


# family -> (transformers config class, base model class, config): the bare classes, as save_pretrained writes them
# (and as a sentence-transformers folder holds its model): no MLM head, no family prefix on the ALBERT names
BARE = {"bert": ("BertConfig", "BertModel", dict(type_vocab_size=2, hidden_act="gelu")),
        "roformer": ("RoFormerConfig", "RoFormerModel", FAMILIES["roformer"][2]),
        "albert": ("AlbertConfig", "AlbertModel", FAMILIES["albert"][2]),
        "electra": ("ElectraConfig", "ElectraModel", FAMILIES["electra"][2]),
        "ernie": ("ErnieConfig", "ErnieModel", FAMILIES["ernie"][2])}


@pytest.mark.parametrize("name", list(BARE))
def test_a_bare_base_model_folder_loads(name, tiny_vocab, tiny_batch, tmp_path):
    """``AlbertModel(...).save_pretrained(DIR)`` (and each other family's base class) loads as its family and gives
    transformers' hidden states and pooled vectors within 1e-5."""
    config_class, model_class, extra = BARE[name]
    tokens, _ = tiny_vocab
    folder = tmp_path / "hf"
    out = torch_reference.run("build_family", config_class=config_class, model=model_class,
                              config={**BASE, **extra, "vocab_size": len(tokens)}, folder=str(folder), seed=2,
                              scale=0.05, batch=tiny_batch)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    backbone = zoo.BertBackbone.from_preset(str(folder), output_hidden_states=True)
    assert type(backbone).__name__ == (FAMILIES[name][3] if name in FAMILIES else "BertBackbone")
    check_parity(backbone, {"outputs": out}, tiny_batch, f"bare {model_class}")
    assert not [n for n in backbone.load_report.unused if not n.endswith("position_ids")], backbone.load_report.unused


# ------------------------------------------------------------------------------------------------ TF1 releases
def albert_tf1_arrays(state):
    """Google ALBERT release names (written here independently of zoo's table)."""
    g = "bert/encoder/transformer/group_0/inner_group_0"
    h = "albert.encoder.albert_layer_groups.0.albert_layers.0"
    dense = {"attention.query": "attention_1/self/query", "attention.key": "attention_1/self/key",
             "attention.value": "attention_1/self/value", "attention.dense": "attention_1/output/dense",
             "ffn": "ffn_1/intermediate/dense", "ffn_output": "ffn_1/intermediate/output/dense"}
    norms = {"attention.LayerNorm": "LayerNorm", "full_layer_layer_norm": "LayerNorm_1"}
    arrays = {f"bert/embeddings/{k}": state[f"albert.embeddings.{k}.weight"]
              for k in ("word_embeddings", "position_embeddings", "token_type_embeddings")}
    arrays.update({"bert/embeddings/LayerNorm/gamma": state["albert.embeddings.LayerNorm.weight"],
                   "bert/embeddings/LayerNorm/beta": state["albert.embeddings.LayerNorm.bias"],
                   "bert/encoder/embedding_hidden_mapping_in/kernel":
                       state["albert.encoder.embedding_hidden_mapping_in.weight"].T,
                   "bert/encoder/embedding_hidden_mapping_in/bias": state["albert.encoder.embedding_hidden_mapping_in.bias"],
                   "bert/pooler/dense/kernel": state["albert.pooler.weight"].T,
                   "bert/pooler/dense/bias": state["albert.pooler.bias"],
                   "cls/predictions/transform/dense/kernel": state["predictions.dense.weight"].T,
                   "cls/predictions/transform/dense/bias": state["predictions.dense.bias"],
                   "cls/predictions/transform/LayerNorm/gamma": state["predictions.LayerNorm.weight"],
                   "cls/predictions/transform/LayerNorm/beta": state["predictions.LayerNorm.bias"],
                   "cls/predictions/output_bias": state["predictions.bias"],
                   "cls/seq_relationship/output_weights": state["sop_classifier.classifier.weight"],
                   "cls/seq_relationship/output_bias": state["sop_classifier.classifier.bias"]})
    for hf, tf1 in dense.items():
        arrays[f"{g}/{tf1}/kernel"] = state[f"{h}.{hf}.weight"].T
        arrays[f"{g}/{tf1}/bias"] = state[f"{h}.{hf}.bias"]
    for hf, tf1 in norms.items():
        arrays[f"{g}/{tf1}/gamma"] = state[f"{h}.{hf}.weight"]
        arrays[f"{g}/{tf1}/beta"] = state[f"{h}.{hf}.bias"]
    return arrays


def bert_style_tf1_arrays(state, hf_prefix, tf1_prefix, layers):
    """BERT-style release names (bert4keras' RoFormer: ``bert/``; ELECTRA: ``electra/``)."""
    arrays = {}
    for k in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        if f"{hf_prefix}.embeddings.{k}.weight" in state:
            arrays[f"{tf1_prefix}/embeddings/{k}"] = state[f"{hf_prefix}.embeddings.{k}.weight"]
    arrays[f"{tf1_prefix}/embeddings/LayerNorm/gamma"] = state[f"{hf_prefix}.embeddings.LayerNorm.weight"]
    arrays[f"{tf1_prefix}/embeddings/LayerNorm/beta"] = state[f"{hf_prefix}.embeddings.LayerNorm.bias"]
    if f"{hf_prefix}.embeddings_project.weight" in state:
        arrays[f"{tf1_prefix}/embeddings_project/kernel"] = state[f"{hf_prefix}.embeddings_project.weight"].T
        arrays[f"{tf1_prefix}/embeddings_project/bias"] = state[f"{hf_prefix}.embeddings_project.bias"]
    dense = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
             "intermediate.dense", "output.dense")
    for i in range(layers):
        h, g = f"{hf_prefix}.encoder.layer.{i}", f"{tf1_prefix}/encoder/layer_{i}"
        for d in dense:
            arrays[f"{g}/{d.replace('.', '/')}/kernel"] = state[f"{h}.{d}.weight"].T
            arrays[f"{g}/{d.replace('.', '/')}/bias"] = state[f"{h}.{d}.bias"]
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            arrays[f"{g}/{n.replace('.', '/')}/gamma"] = state[f"{h}.{n}.weight"]
            arrays[f"{g}/{n.replace('.', '/')}/beta"] = state[f"{h}.{n}.bias"]
    if "cls.predictions.bias" in state:
        for part, leaf in (("transform.dense", None), ("transform.LayerNorm", None)):
            norm = "LayerNorm" in part
            arrays[f"cls/predictions/{part.replace('.', '/')}/{'gamma' if norm else 'kernel'}"] = \
                state[f"cls.predictions.{part}.weight"] if norm else state[f"cls.predictions.{part}.weight"].T
            arrays[f"cls/predictions/{part.replace('.', '/')}/{'beta' if norm else 'bias'}"] = \
                state[f"cls.predictions.{part}.bias"]
        arrays["cls/predictions/output_bias"] = state["cls.predictions.bias"]
    return arrays


# family -> (arrays of its TF1 release, checkpoint prefix, config file name)
TF1_RELEASES = {
    "albert": (lambda s, n: albert_tf1_arrays(s), "model.ckpt-best", "albert_config.json"),
    "roformer": (lambda s, n: bert_style_tf1_arrays(s, "roformer", "bert", n), "bert_model.ckpt", "bert_config.json"),
    "electra": (lambda s, n: bert_style_tf1_arrays(s, "electra", "electra", n), "electra_small",
                "small_discriminator_config.json"),
}


def test_tf1_release_matches(family_model, tiny_batch, tiny_vocab, tmp_path):
    name = family_model["name"]
    if name not in TF1_RELEASES:
        pytest.skip(f"{name} was not released as a TF1 checkpoint")
    arrays_of, prefix, config_name = TF1_RELEASES[name]
    arrays = {k: np.ascontiguousarray(v, "float32")
              for k, v in arrays_of(family_model["state"], BASE["num_hidden_layers"]).items()}
    config = {k: v for k, v in family_model["config"].items() if k != "model_type"}
    folder = write_google_checkpoint(arrays, tmp_path / name, config, tiny_vocab[0], prefix=prefix,
                                     config_name=config_name)
    backbone = load(folder, name)
    check_parity(backbone, family_model, tiny_batch, f"{name} TF1 release")
    assert not backbone.load_report.unused or name == "albert", backbone.load_report.unused  # ALBERT: its SOP head


def test_families_round_trip_through_a_zoo_preset(family_model, tiny_batch, tmp_path):
    """A family's backbone saved as a zoo preset loads back as the same family with the same outputs."""
    name = family_model["name"]
    backbone = load(family_model["folder"], name)
    backbone.save_to_preset(tmp_path / "preset")
    again = zoo.BertBackbone.from_preset(str(tmp_path / "preset"), with_mlm=name in HAS_MLM,
                                         output_hidden_states=True)
    assert type(again) is type(backbone)
    first, second = zoo_outputs(backbone, tiny_batch), zoo_outputs(again, tiny_batch)
    assert max(max_diff(first[k], second[k]) for k in first) == 0.0


def test_first_token_only_equals_full_model(family_model, tiny_batch):
    """The [CLS]-only last layer (cls-pooled encoders, cross-encoders) is exact on every family."""
    from keras import ops

    backbone = load(family_model["folder"], family_model["name"])
    full = backbone(tiny_batch, training=False)
    first = backbone(tiny_batch, training=False, first_token_only=True)
    assert max_diff(ops.convert_to_numpy(first["sequence_output"][:, 0]),
                    ops.convert_to_numpy(full["sequence_output"][:, 0])) <= 1e-6


# ------------------------------------------------------------------------------------------------ errors
def test_unsupported_architecture_is_named(tmp_path):
    for model_type in ("nezha", "xlm-roberta"):
        folder = tmp_path / model_type
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": model_type, **BASE, "vocab_size": 10}))
        (folder / "model.safetensors").write_bytes(b"")
        with pytest.raises(CheckpointError, match=rf"{model_type}.*not supported.*bert, roformer, albert, electra, "
                                                  r"ernie"):
            zoo.BertBackbone.from_preset(str(folder))


def test_family_class_refuses_another_family(family_model):
    other = zoo.RoFormerBackbone if family_model["name"] != "roformer" else zoo.ErnieBackbone
    family = family_model["name"].split("-")[0]
    with pytest.raises(CheckpointError, match=f"holds a {family} checkpoint, not {other.family}"):
        other.from_preset(str(family_model["folder"]))


def test_albert_with_several_groups_is_refused(tmp_path):
    folder = tmp_path / "albert"
    folder.mkdir()
    config = {**BASE, "vocab_size": 10, "model_type": "albert", "embedding_size": 16, "num_hidden_groups": 2}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="num_hidden_groups=2"):
        zoo.BertBackbone.from_preset(str(folder))


def test_other_families_are_not_written_as_bert(family_model, tmp_path):
    backbone = load(family_model["folder"], family_model["name"])
    with pytest.raises(CheckpointError, match="BERT only"):
        zoo.save_google_checkpoint(backbone, str(tmp_path / "g"))
    assert not (tmp_path / "g").exists()


# ------------------------------------------------------------------------------------------------ task models
@pytest.mark.slow
@pytest.mark.parametrize("family", ["RoFormerBackbone", "AlbertBackbone", "ErnieBackbone"])
def test_simbert_generation_on_each_family(family):
    """SimBERT (UniLM) on a RoFormer (RoFormer-Sim), ALBERT or ERNIE backbone: cached decoding (keys rotated at
    their positions, embeddings projected, task-type row added) gives what re-running the whole model gives."""
    import keras
    from keras import ops

    from helpers import synthetic_vocab

    keras.utils.set_random_seed(3)
    tok = zoo.Tokenizer(synthetic_vocab())
    extra = {"embedding_dim": 16} if family == "AlbertBackbone" else {}
    bb = getattr(zoo, family)(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=128, dropout=0.0, with_mlm=True,
                              pooler_activation="linear", **extra)
    for w in bb.weights:  # a sharper random model, so that decoding is not a near-uniform coin toss
        if w.path.endswith("kernel") or w.path.endswith("embeddings"):
            w.assign(ops.convert_to_numpy(w) * 4.0)
    simbert = zoo.SimBERT(bb, tok, maxlen=24)
    cached, full = simbert.decoder(use_cache=True, maxlen=8), simbert.decoder(use_cache=False, maxlen=8)
    for text in ("今天天气很好", "我们在中国说的话是什么"):  # each step's distribution, cached vs whole model
        states = cached._start(text, 2), full._start(text, 2)
        for _ in range(4):
            with_cache, without = cached._logprobs(states[0]), full._logprobs(states[1])
            assert np.abs(with_cache - without).max() < 1e-4
            step = np.stack([np.argmax(without[0]), np.argsort(without[1])[-2]]).astype("int32")[:, None]
            for state in states:
                state["generated"] = np.concatenate([state["generated"], step], axis=1)
    seen = set()
    for text in ("今天天气很好", "我们在中国说的话是什么"):
        greedy = cached.greedy(text)
        assert greedy == full.greedy(text)
        assert cached.beam_search(text, topk=3) == full.beam_search(text, topk=3)
        seen.update(greedy)
    assert len(seen) >= 3, "the test model decodes a constant: the comparison would be too weak"


@pytest.mark.slow
def test_bi_encoder_fine_tunes_from_each_family_on_the_command_line(family_model, tmp_path):
    """``zoo train bi-encoder --checkpoint FOLDER`` on each family's transformers folder: trains, keeps the family,
    and its saved model loads back and encodes."""
    from helpers import word_order_task
    from zoo.cli import main

    if family_model["name"] == "electra-generator":
        pytest.skip("the same backbone as the ELECTRA discriminator's (its MLM head is not used by a bi-encoder)")

    word_order_task(tmp_path / "data" / "LCQMC", sizes=(32, 16, 16))
    main(["train", "bi-encoder", "--tasks", "LCQMC", "--data-dir", str(tmp_path / "data"), "--checkpoint",
          str(family_model["folder"]), "--pooling", "mean", "--epochs", "1", "--batch-size", "8", "--maxlen", "16",
          "--eval-batch-size", "32", "--no-progress", "--no-jit-compile", "--output", str(tmp_path / "run")])
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert np.isfinite(results["test_spearman"])
    encoder = zoo.SentenceEncoder.from_preset(str(tmp_path / "run"))
    assert type(encoder.backbone).__name__ == FAMILIES[family_model["name"]][3]
    assert encoder.encode(["今天天气很好"]).shape == (1, BASE["hidden_size"])


@pytest.mark.slow
def test_export_and_encode_on_each_family(family_model, tmp_path, capsys):
    """``zoo export`` of each family: the SavedModel (strings in) gives ``encode``'s vectors; ONNX, whose fused
    writer takes BERT only, is refused with the reason; ``encode``'s default runs on Keras and says why."""
    import tensorflow as tf

    from zoo.cli import main

    if family_model["name"] == "electra-generator":
        pytest.skip("the same backbone as the ELECTRA discriminator's (its MLM head is not exported)")
    texts = ["今天天气很好", "我们在中国说的话是什么", "hello"]
    encoder = zoo.SentenceEncoder.from_preset(str(family_model["folder"]), pooling="mean", maxlen=16)
    want = encoder.encode(texts, engine="fp32")
    np.testing.assert_allclose(encoder.encode(texts), want, atol=1e-6)  # auto: Keras fp32 for these families
    encoder.save_to_preset(tmp_path / "model")
    assert main(["export", "--model", str(tmp_path / "model"), "--output", str(tmp_path / "out"),
                 "--maxlen", "16"]) == 0
    model = tf.saved_model.load(str(tmp_path / "out" / "default" / "1"))
    got = model.signatures["serving_default"](text=tf.constant(texts))["embedding"].numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    capsys.readouterr()
    assert main(["export", "--model", str(tmp_path / "model"), "--output", str(tmp_path / "out"),
                 "--format", "onnx", "--name", "onnx"]) != 0
    assert "BERT backbone" in capsys.readouterr().err


@pytest.mark.slow
def test_cross_encoder_and_pretraining_on_each_family(family_model, tmp_path):
    """A CrossEncoder scores on each family; a family with an MLM head continues pretraining (``zoo pretrain``'s
    job, 5 MLM steps) and its saved preset loads back as the same family."""
    from helpers import CJK_CHARS
    from zoo.jobs.pretrain import PretrainConfig, run

    name = family_model["name"]
    scorer = zoo.CrossEncoder.from_preset(str(family_model["folder"]), head="cosent", maxlen=16)
    assert type(scorer.backbone).__name__ == FAMILIES[name][3]
    assert np.isfinite(scorer.score([("今天天气很好", "今天天气不错")])).all()
    if name not in HAS_MLM:
        return
    rng = np.random.default_rng(0)
    chars = [c for c in dict.fromkeys(CJK_CHARS) if c in set(scorer.tokenizer.vocab)][:40]
    docs = ["。".join("".join(rng.choice(chars, 8)) for _ in range(4)) + "。" for _ in range(40)]
    (tmp_path / "corpus.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    results = run(PretrainConfig(objective="mlm", checkpoint=str(family_model["folder"]), nsp=False,
                                 corpus=(str(tmp_path / "corpus.txt"),), task_texts=(), batch_size=8, maxlen=32,
                                 output=str(tmp_path / "run"), steps=5, jit_compile=False, progress=False))
    assert np.isfinite(results["curve"][-1]["train_loss"]) and results["curve"][-1]["masked_accuracy"] >= 0
    again = zoo.BertBackbone.from_preset(str(tmp_path / "run"), with_mlm=True)
    assert type(again).__name__ == FAMILIES[name][3]
