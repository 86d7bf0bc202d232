"""Shared fixtures and helpers for the zoo test suite.

* ``SHARED`` / ``require_shared``: the reference data and checkpoints live in ``../shared`` next to the
  repository (override with ``ZOO_SHARED``). Tests that need them skip when they are absent, except under
  ``CI=true``, where their absence fails the test.
* ``tiny_vocab`` / ``tiny_hf``: a synthetic ~300-token vocabulary and a tiny random transformers
  ``BertForPreTraining`` (hidden 32, 2 layers, 2 heads, FFN 64) saved with ``save_pretrained``; most tests
  run on these and need nothing from ``shared``.
* ``hf_google_pairs``: an independent transformers <-> Google TF1 variable-name mapping (not zoo's).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# precision="auto" (encode's default) runs the Keras model in the tests, whose expectations are Keras' outputs;
# tests/test_fused_onnx.py unsets it to test auto's own choice
os.environ.setdefault("ZOO_PRECISION", "fp32")

SHARED = Path(os.environ.get("ZOO_SHARED") or Path(os.path.abspath(__file__)).parents[2] / "shared")
BERT_VOCAB = "data/vocab/bert-base-chinese/vocab.txt"
L4 = "models/chinese_L-4_H-256_A-4"
L6 = "models/chinese_L-6_H-384_A-6"


def in_ci():
    return os.environ.get("CI", "").strip().lower() == "true"


def require_shared(*relative_paths):
    """Paths under ``SHARED``; skips the test when one is missing (fails it when ``CI=true``).

    Returns one Path for one argument, else a list of Paths.
    """
    paths = [SHARED / p for p in relative_paths] or [SHARED]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        message = f"shared reference data not found: {missing} (shared folder {SHARED}; set ZOO_SHARED)"
        if in_ci():
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    return paths[0] if len(paths) == 1 else paths


def missing(message):
    """Skip (a whole module when called at its top level), or fail under CI=true, where every optional test
    package is installed, so a skip would hide a broken install."""
    if in_ci():
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_module(name, install):
    """``import name``; skips the test (or the module) when it is missing (fails it when ``CI=true``)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"{name} is not installed ({install}): {e}")


def require_installed(*names, install):
    """Skip (fail under CI=true) unless every package of ``names`` is installed, without importing them in this
    process (torch, say, runs only in subprocesses: ``LANES`` below)."""
    import importlib.util

    absent = [n for n in names if importlib.util.find_spec(n) is None]
    if absent:
        missing(f"{', '.join(absent)} not installed ({install})")


def read_pairs(path):
    """``text_a<TAB>text_b<TAB>label`` lines (senteval_cn layout) -> list of (a, b); quotes kept (bojone)."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            assert len(fields) == 3, f"{path}: bad line {line!r}"
            pairs.append((fields[0], fields[1]))
    return pairs


# ------------------------------------------------------------------------------ lanes
# The suite runs in lanes, one pytest run each (tools/run_tests.py runs them in sequence and sums them up), so that
# a process holds one native stack: the main lane's workers run TensorFlow, ONNX Runtime, faiss and grpc; Ray and
# Milvus Lite run in their own lanes; PyTorch only in subprocesses (tests/torch_reference.py), as JAX-backend
# tests do. ``pytest`` alone runs the main lane; ``pytest --lane ray`` another.
LANES = {"ray": ("test_ray_encode.py",), "milvus": ("test_milvus.py",)}
KEPT_OUT = {"main": ("torch", "ray", "pymilvus", "milvus_lite"), "ray": ("torch", "pymilvus", "milvus_lite"),
            "milvus": ("torch", "ray")}


def pytest_addoption(parser):
    parser.addoption("--lane", default="main", choices=("main", *LANES),
                     help="which lane's test files to collect (tools/run_tests.py runs every lane)")


def lane_of(path):
    return next((lane for lane, files in LANES.items() if Path(path).name in files), "main")


def pytest_ignore_collect(collection_path, config):
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return True if lane_of(collection_path) != config.getoption("lane") else None
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """With ZOO_LANE_REPORT set (tools/run_tests.py), write the run's counts there as JSON."""
    path = os.environ.get("ZOO_LANE_REPORT")
    if path and not hasattr(config, "workerinput"):
        import json

        counts = {k: len(v) for k, v in terminalreporter.stats.items() if k}
        with open(path, "w", encoding="utf-8") as f:
            json.dump({**counts, "exitstatus": int(exitstatus)}, f)


_blamed = set()


@pytest.fixture(autouse=True)
def _one_native_stack(request):
    """A test that imports a runtime kept out of its lane (torch in a TensorFlow worker, say) fails: the first one
    to do it, named with the module."""
    import sys

    lane = request.config.getoption("lane")
    yield
    loaded = [m for m in KEPT_OUT[lane] if m in sys.modules and m not in _blamed]
    if loaded:
        _blamed.update(loaded)
        pytest.fail(f"{request.node.nodeid} imported {loaded} into a {lane}-lane process (tests/conftest.py LANES: "
                    f"run it in a subprocess, as tests/torch_reference.py does, or in its own lane)", pytrace=False)


# ------------------------------------------------------------------------------ test order
# The suite runs on 2 workers (pytest-xdist, README). The longest tests (minutes: subprocess chains) start first, so
# that the short ones fill the other worker around them instead of leaving one long test alone at the end.
LONGEST_FIRST = ("test_sigkill_at_20_random_moments", "test_jax_two_devices_two_processes", "test_compare_matching",
                 "test_distill_targets_anneal", "test_sigkill_while_saving", "test_resume_continues_exactly",
                 "test_tensorflow_mirrored_two_devices", "test_multi_task_training", "test_save_load_simbert",
                 "test_pretraining_job_runs_on_jax")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item):
        return next((rank[n] for n in LONGEST_FIRST if item.name.startswith(n)), len(LONGEST_FIRST))

    items.sort(key=key)  # stable: the rest keep their order


# ------------------------------------------------------------------------------ synthetic vocabulary
CJK_CHARS = ("的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自可着没里后小么心多天"
             "而能好都然日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分"
             "将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打"
             "便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别"
             "處國語學體們這裡")  # the last ones are traditional
FULLWIDTH_PUNCT = "，。！？（）：；、“”《》【】"


def weight_products(path):
    """{name: quantized} for every MatMul of the ONNX file ``path`` that multiplies by a weight matrix; quantized:
    both its inputs come from DequantizeLinear (static QDQ int8: fixed scales, the same for every batch)."""
    import onnx

    graph = onnx.load(str(path)).graph
    weights = {w.name for w in graph.initializer}
    made_by = {o: n for n in graph.node for o in n.output}
    dequantized = {name for name, node in made_by.items() if node.op_type == "DequantizeLinear"}
    products = {}
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        weight = made_by[node.input[1]].input[0] if node.input[1] in dequantized else node.input[1]
        if weight in weights:
            products[node.name] = set(node.input) <= dequantized
    assert not any(n.op_type in ("DynamicQuantizeLinear", "MatMulInteger", "QAttention") for n in graph.node), \
        f"{path} holds dynamic (per-batch) quantization"
    return products


def tiny_sentence_encoder(seed=0):
    """A random 2-layer, 32-wide SentenceEncoder on the synthetic vocabulary ([CLS] pooling, maxlen 32)."""
    import keras

    import zoo

    keras.utils.set_random_seed(seed)
    tok = zoo.Tokenizer(synthetic_vocab())
    backbone = zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=64, dropout=0.0)
    return zoo.SentenceEncoder(backbone, tok, pooling="cls", maxlen=32)


def synthetic_vocab():
    """A small BERT-style vocabulary: specials, [unused], ASCII, CJK chars, latin word pieces, and tokens that
    bert4keras' simplified vocabulary drops (``##的``, ``中国``, ``##，``)."""
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(1, 6)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [chr(c) for c in range(33, 127) if not chr(c).isupper()]  # ASCII punctuation, digits, a-z
    tokens += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    tokens += list(FULLWIDTH_PUNCT) + ["ａ", "##ｂ", "##ｃ", "##１", "##２", "##３", "１", "é", "…"]
    tokens += list(dict.fromkeys(CJK_CHARS))
    tokens += ["hello", "world", "he", "##llo", "un", "##believ", "##able", "cafe", "bert", "##ing",
               "##ed", "the", "and", "##er", "an", "##gs", "##tro", "keras", "zoo", "to", "##day", "##10"]
    tokens += ["##的", "##是", "中国", "##，", "##!", "我们", "a.", "##。"]
    assert len(tokens) == len(set(tokens)), "synthetic vocab has duplicates"
    return tokens


@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory):
    """(tokens, path of vocab.txt) of the synthetic vocabulary."""
    tokens = synthetic_vocab()
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return tokens, path


# ------------------------------------------------------------------------------ tiny transformers model
TINY_CONFIG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                   max_position_embeddings=64, type_vocab_size=2, hidden_act="gelu")


def tiny_bert_config(vocab_size, **overrides):
    """A transformers BertConfig of the tiny model, as a dict (``torch_reference`` builds the model from it)."""
    return {"vocab_size": vocab_size, **TINY_CONFIG, **overrides}


def reference_outputs(outputs, prefix=""):
    """The backbone outputs (sequence_output, pooled_output, mlm_logits) of a ``torch_reference`` result."""
    keys = ("sequence_output", "pooled_output", "mlm_logits")
    return {k: outputs[prefix + k] for k in keys if prefix + k in outputs}


def state_of(outputs):
    """The transformers state dict (numpy) of a ``torch_reference.run("build", ...)`` result."""
    return {k[len("state/"):]: v for k, v in outputs.items() if k.startswith("state/")}


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory, tiny_vocab, tiny_batch):
    """A random tiny ``BertForPreTraining`` saved to a folder (config.json, model.safetensors, vocab.txt), built by
    transformers in a subprocess (``torch_reference``).

    Returns a dict: ``dir``; ``variants`` (the same weights as ``BertModel``, ``BertForMaskedLM`` and
    ``pytorch_model.bin`` folders); ``config`` (dict); ``state`` (its state dict as numpy arrays); ``outputs``
    (transformers' outputs on ``tiny_batch``, hidden states and the linear pooler included).
    """
    import torch_reference

    tokens, vocab_path = tiny_vocab
    folder = tmp_path_factory.mktemp("tiny_hf")
    variants = {name: folder.parent / f"{folder.name}_{name.replace('.', '_')}" for name in
                torch_reference.TINY_VARIANTS}
    config = tiny_bert_config(len(tokens))
    out = torch_reference.run("build", config=config, model="BertForPreTraining", seed=0, scale=0.05,
                              save={"hf": str(folder), "variants": {k: str(v) for k, v in variants.items()}},
                              batch=tiny_batch)
    (folder / "vocab.txt").write_text(vocab_path.read_text(encoding="utf-8"), encoding="utf-8")
    return {"dir": folder, "variants": variants, "config": config, "state": state_of(out), "outputs": out}


@pytest.fixture(scope="session")
def tiny_batch(tiny_vocab):
    """A fixed padded batch of random ids for the tiny models."""
    return random_batch(len(tiny_vocab[0]))


@pytest.fixture(scope="session")
def tiny_reference(tiny_hf):
    """transformers outputs of the tiny model on ``tiny_batch``: sequence_output, pooled_output, mlm_logits."""
    return reference_outputs(tiny_hf["outputs"])


def random_batch(vocab_size, lengths=(16, 12, 7, 3), seq_len=16, seed=0, first_special=(7, 8)):
    """A padded batch of random ids: ``[CLS] ... [SEP] ... [SEP]`` with two segments and right padding."""
    rng = np.random.default_rng(seed)
    cls_id, sep_id = first_special
    b = len(lengths)
    token_ids = np.zeros((b, seq_len), "int32")
    segment_ids = np.zeros((b, seq_len), "int32")
    padding_mask = np.zeros((b, seq_len), "int32")
    for i, n in enumerate(lengths):
        token_ids[i, :n] = rng.integers(10, vocab_size, n)
        token_ids[i, 0] = cls_id
        token_ids[i, n - 1] = sep_id
        split = max(1, n // 2)
        segment_ids[i, split:n] = 1
        padding_mask[i, :n] = 1
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def zoo_outputs(backbone, batch, **extra):
    """The outputs of a zoo backbone (inference mode) as numpy arrays."""
    from keras import ops

    out = backbone({**batch, **extra}, training=False)
    return {k: ops.convert_to_numpy(v) for k, v in out.items() if k != "hidden_states"}


def load_quietly(path, **kwargs):
    """zoo.load_backbone (its report of missing/unused variables is logged; tests check load_report)."""
    import zoo

    return zoo.BertBackbone.from_preset(str(path), **kwargs)


@contextlib.contextmanager
def logs(caplog, pattern, level=logging.INFO):
    """The block logs (zoo's one output channel) a message matching ``pattern`` at ``level`` or above."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zoo"):
        yield
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("zoo")]
    assert any(lvl >= level and re.search(pattern, m) for lvl, m in messages), (pattern, messages)


@contextlib.contextmanager
def no_warning_logged(caplog):
    """The block logs nothing at WARNING or above (a clean load)."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zoo"):
        yield
    bad = [r.getMessage() for r in caplog.records if r.name.startswith("zoo") and r.levelno >= logging.WARNING]
    assert not bad, bad


def max_diff(a, b, mask=None):
    """max |a - b| over the real (padding_mask == 1) positions for [B, T, ...] outputs."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    if mask is not None and a.ndim >= 2 and a.shape[:2] == np.shape(mask):
        keep = np.asarray(mask).astype(bool)
        a, b = a[keep], b[keep]
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def assert_outputs_close(got, want, mask, atol, keys=("sequence_output", "pooled_output", "mlm_logits"),
                         label=""):
    """Compare output dicts at the real positions; prints and returns the max-diffs."""
    diffs = {}
    for k in keys:
        assert k in got and k in want, f"{label}: output {k!r} missing (got {sorted(got)}, want {sorted(want)})"
        diffs[k] = max_diff(got[k], want[k], mask)
    print(f"{label} max |diff|: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    for k, v in diffs.items():
        assert v <= atol, f"{label}: {k} differs by {v:.3e} > {atol:g}"
    return diffs


# ------------------------------------------------------------------------------ independent name mapping
def hf_google_pairs(num_layers):
    """[(transformers state-dict name, Google TF1 variable name, transpose?)] for BertForPreTraining.

    Written from the two published layouts, independently of ``zoo.checkpoints``: torch ``Linear`` weights
    are [out, in], Google kernels [in, out]; LayerNorm weight/bias are gamma/beta.
    """
    pairs = [
        ("bert.embeddings.word_embeddings.weight", "bert/embeddings/word_embeddings", False),
        ("bert.embeddings.position_embeddings.weight", "bert/embeddings/position_embeddings", False),
        ("bert.embeddings.token_type_embeddings.weight", "bert/embeddings/token_type_embeddings", False),
        ("bert.embeddings.LayerNorm.weight", "bert/embeddings/LayerNorm/gamma", False),
        ("bert.embeddings.LayerNorm.bias", "bert/embeddings/LayerNorm/beta", False),
    ]
    dense = [("attention.self.query", "attention/self/query"), ("attention.self.key", "attention/self/key"),
             ("attention.self.value", "attention/self/value"), ("attention.output.dense", "attention/output/dense"),
             ("intermediate.dense", "intermediate/dense"), ("output.dense", "output/dense")]
    norms = [("attention.output.LayerNorm", "attention/output/LayerNorm"), ("output.LayerNorm", "output/LayerNorm")]
    for i in range(num_layers):
        h, g = f"bert.encoder.layer.{i}", f"bert/encoder/layer_{i}"
        for hs, gs in dense:
            pairs += [(f"{h}.{hs}.weight", f"{g}/{gs}/kernel", True), (f"{h}.{hs}.bias", f"{g}/{gs}/bias", False)]
        for hs, gs in norms:
            pairs += [(f"{h}.{hs}.weight", f"{g}/{gs}/gamma", False), (f"{h}.{hs}.bias", f"{g}/{gs}/beta", False)]
    pairs += [
        ("bert.pooler.dense.weight", "bert/pooler/dense/kernel", True),
        ("bert.pooler.dense.bias", "bert/pooler/dense/bias", False),
        ("cls.predictions.transform.dense.weight", "cls/predictions/transform/dense/kernel", True),
        ("cls.predictions.transform.dense.bias", "cls/predictions/transform/dense/bias", False),
        ("cls.predictions.transform.LayerNorm.weight", "cls/predictions/transform/LayerNorm/gamma", False),
        ("cls.predictions.transform.LayerNorm.bias", "cls/predictions/transform/LayerNorm/beta", False),
        ("cls.predictions.bias", "cls/predictions/output_bias", False),
        ("cls.seq_relationship.weight", "cls/seq_relationship/output_weights", False),  # [2, H] in both
        ("cls.seq_relationship.bias", "cls/seq_relationship/output_bias", False),
    ]
    return pairs


def hf_to_google_arrays(state, num_layers):
    """Google-named float32 arrays of a transformers BertForPreTraining state dict (independent mapping)."""
    return {g: np.ascontiguousarray(state[h].T if t else state[h]).astype("float32")
            for h, g, t in hf_google_pairs(num_layers)}


def write_google_checkpoint(arrays, folder, config, vocab_tokens=None, prefix="bert_model.ckpt",
                            config_name="bert_config.json"):
    """A Google TF1 folder: ``bert_config.json`` + ``bert_model.ckpt.*`` (tf.compat.v1 Saver); other releases name
    them otherwise (``prefix``, ``config_name``)."""
    import json

    import tensorflow as tf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    variables = {name: tf.Variable(a, name=name.replace("/", "_")) for name, a in arrays.items()}
    tf.compat.v1.train.Saver(var_list=variables).save(None, str(folder / prefix))
    (folder / config_name).write_text(json.dumps(config, indent=2), encoding="utf-8")
    if vocab_tokens is not None:
        (folder / "vocab.txt").write_text("\n".join(vocab_tokens) + "\n", encoding="utf-8")
    return folder


def google_config_of(hf_config):
    """A Google ``bert_config.json`` dict from a transformers BertConfig dict (``tiny_bert_config``)."""
    keys = ("hidden_act", "hidden_size", "intermediate_size", "max_position_embeddings", "num_attention_heads",
            "num_hidden_layers", "type_vocab_size", "vocab_size")
    return {"attention_probs_dropout_prob": 0.1, "hidden_dropout_prob": 0.1, "initializer_range": 0.02,
            **{k: hf_config[k] for k in keys}}


@pytest.fixture(autouse=True)
def _zoo_logger_restored():
    """Each test starts with the zoo logger (and the process's excepthook) as the test before it found them:
    ``zoo.logs.setup_cli`` (run by in-process ``zoo.cli.main``) changes both."""
    import sys

    log = logging.getLogger("zoo")
    saved = (list(log.handlers), log.level, log.propagate, sys.excepthook)
    yield
    log.handlers[:] = saved[0]
    log.setLevel(saved[1])
    log.propagate = saved[2]
    sys.excepthook = saved[3]
