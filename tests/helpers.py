"""Helpers the test modules share (imported as ``from helpers import ...``; no test module imports another).

* ``SHARED`` / ``require_shared``: the reference data and checkpoints live in ``../shared`` next to the
  repository (override with ``ZOO_SHARED``). Tests that need them skip when they are absent, except under
  ``CI=true``, where their absence fails the test. ``require_module`` / ``require_installed``: likewise for an
  optional package.
* The synthetic vocabulary (``synthetic_vocab``, ``CJK_CHARS``), tiny models (``tiny_sentence_encoder``,
  ``tiny_backbone``, ``save_tiny_preset``) and data (``write_synthetic_task``, ``word_order_task``).
* Checks: ``logs``, ``no_warning_logged``, ``max_diff``, ``assert_outputs_close``, ``weight_products``.
* An independent transformers <-> Google TF1 variable-name mapping (``hf_google_pairs``: not zoo's).
* Clients of a running server (``request``, ``predict``, ``grpc_stubs``, ``call``).

The fixtures built on these are in ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import re
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


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


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]


@contextlib.contextmanager
def chromium(profile_dir, width=1280, height=800):
    """A headless Chromium driven by Selenium (Debian's chromium + chromium-driver), its window ``width`` x ``height``
    px; skips the test where they are missing (fails it when ``CI=true``)."""
    import shutil

    webdriver = require_module("selenium.webdriver", "pip install selenium")
    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver_path):
        message = "chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver)"
        if in_ci():
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={profile_dir}", f"--window-size={width},{height}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    driver.set_page_load_timeout(60)
    driver.set_window_size(width, height)
    try:
        yield driver
    finally:
        driver.quit()


def weights_after_a_jax_step(script, *args, timeout=300):
    """Run ``script`` (``python -c``) on the JAX backend (CPU) with ``args``: it prints the backend last and writes
    the weights after its step to its last argument, an .npz file -> {variable path: array}."""
    import subprocess
    import sys

    require_module("jax", "pip install 'jax[cpu]'")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, env=env,
                         timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "jax"
    return dict(np.load(args[-1]))


def assert_same_weights(got, want, atol=1e-5):
    """Two {variable path: array} dicts hold the same variables, equal within ``atol``."""
    assert got.keys() == want.keys()
    for path in want:
        np.testing.assert_allclose(got[path], want[path], atol=atol, err_msg=path)


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


def write_synthetic_task(folder, seed=0, sizes=(480, 200, 200)):
    """Sentences of 6 characters from one of 4 disjoint character groups; a pair is similar (1) when both
    come from the same group. A random model scores this near chance; training must learn the groups."""
    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    groups = [chars[i::4] for i in range(4)]
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    for split, n in zip(("train", "valid", "test"), sizes):
        with open(os.path.join(folder, f"LCQMC.{split}.data"), "w", encoding="utf-8") as f:
            for i in range(n):
                label = i % 2
                g1 = int(rng.integers(4))
                g2 = g1 if label else int((g1 + rng.integers(1, 4)) % 4)
                a = "".join(rng.choice(groups[g1], 6))
                b = "".join(rng.choice(groups[g2], 6))
                f.write(f"{a}\t{b}\t{label}\n")


def save_tiny_preset(path, dropout=0.0, seed=1):
    """A random 2-layer, 32-wide backbone on the synthetic task's 160 characters, saved as a preset."""
    import keras

    import zoo
    from zoo.presets import save_preset

    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
    keras.utils.set_random_seed(seed)
    bb = zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=32, dropout=dropout)
    save_preset(bb, zoo.Tokenizer(vocab), path)


def request(server, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=60)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=headers or {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def predict(server, body, path="/v1/models/default:predict"):
    return request(server, "POST", path, body)


def grpc_stubs(server):
    import grpc
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    return (prediction_service_pb2_grpc.PredictionServiceStub(channel),
            model_service_pb2_grpc.ModelServiceStub(channel))


KEY = "sk-zoo-test"


def call(server, method, path, body=None, key=KEY):
    conn = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=60)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


# a meta-path finder that makes importing TensorFlow, Keras or JAX fail: the command must not need them
NO_BACKEND = """
import sys
class NoBackend:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras", "jax", "tensorflow_serving", "tensorflow_text"):
            raise ImportError(f"the light runtime imported {name}")
sys.meta_path.insert(0, NoBackend())
"""


# ------------------------------------------------------------------ word-order negatives and in-batch ranking
PEOPLE = ["我", "你", "他", "我们", "老人", "女子", "工人", "先生"]


ROLE_TEMPLATES = ["{}给{}打电话", "{}比{}高", "{}问{}", "{}教{}"]


def word_order_task(folder, sizes=(64, 40, 40), seed=0):
    """LCQMC-style files of role sentences ('A给B打电话'): a paraphrase adds 了; a non-paraphrase puts the same
    people in another template, so that word order never decides a label. Every sentence has a word-order
    rewrite (B给A打电话)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in zip(("train", "valid", "test"), sizes):
        lines = []
        for i in range(n):
            t, u = rng.choice(len(ROLE_TEMPLATES), 2, replace=False)
            x, y = rng.choice(PEOPLE, 2, replace=False)
            a = ROLE_TEMPLATES[t].format(x, y)
            b = a + "了" if i % 2 else ROLE_TEMPLATES[u].format(x, y)
            lines.append(f"{a}\t{b}\t{i % 2}\n")
        (folder / f"LCQMC.{split}.data").write_text("".join(lines), encoding="utf-8")


# ------------------------------------------------------------------------------ fused ONNX graphs of tiny models
GRAPH_TOLERANCE = 1e-5  # tiny models: float32 round-off is ~1e-6
GRAPH_TEXTS = ["今天天气很好", "", "hello world", "他说：你是谁？我不知道。", "我们在中国" * 40, "好", "中国人民",
               "bert 和 keras"]


def graph_batch():
    """A padded batch of the synthetic vocabulary's ids: right padding, segments 0 and 1."""
    return random_batch(len(synthetic_vocab()), lengths=(16, 12, 7, 3, 1 + 1), seq_len=16)


def tiny_backbone(seed=0, **kwargs):
    """A random 2-layer backbone with every weight perturbed (LayerNorm at 1/0 and zero biases would hide a
    mistake) and LayerNorm epsilon 1e-3, so that a graph ignoring the model's epsilon shows."""
    import keras

    import zoo

    keras.utils.set_random_seed(seed)
    backbone = zoo.BertBackbone(len(synthetic_vocab()), 2, 2, 32, 64, max_sequence_length=64, dropout=0.0,
                                layer_norm_epsilon=1e-3, **kwargs)
    rng = np.random.default_rng(seed)
    for w in backbone.weights:
        w.assign(w.numpy() + rng.normal(0, 0.1, w.shape).astype("float32"))
    return backbone


def run_graph(graph, batch):
    """An ONNX ModelProto run by ONNX Runtime on a batch of ids -> its first output."""
    import onnxruntime as ort

    from zoo.inference.sessions import ID_INPUTS

    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {k: np.asarray(batch[k], "int32") for k in ID_INPUTS})[0]


def ops_of(graph):
    return {n.op_type for n in graph.graph.node}


def lcqmc_texts(n):
    """The first ``n`` texts of the embedded LCQMC test split."""
    import gzip

    with gzip.open(REPO / "data" / "LCQMC" / "LCQMC.test.data.gz", "rt", encoding="utf-8") as f:
        return [s for line, _ in zip(f, range(n // 2)) for s in line.rstrip("\n").split("\t")[:2]]



def tiny_train_config(root, output, **kw):
    """A ``zoo train bi-encoder`` config on ``tiny_setup``'s task and preset (2 epochs, no XLA)."""
    from zoo.jobs.bi_encoder import BiEncoderConfig

    base = dict(tasks=("LCQMC",), objective="cosent", checkpoint=str(root / "preset"), data_dir=str(root / "data"),
                epochs=2, batch_size=16, maxlen=16, lr=2e-3, output=str(output), progress=False,
                jit_compile=False, eval_batch_size=64)
    return BiEncoderConfig(**{**base, **kw})


# ------------------------------------------------------------------------------ the suite's order
DURATIONS = Path(__file__).with_name("durations.json")  # seconds per test of a recorded run (conftest.py)
LONG = 30.0  # seconds: within a test file, tests at least this long run first, longest first


def recorded_durations(path=DURATIONS):
    """{test id: seconds} of the recorded run (empty when there is none)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}


def longest_first(items, durations):
    """``items`` reordered: test files by their recorded seconds in all, longest first, each file's tests together
    (its module-scoped fixtures, a server or a trained model, are then set up once per worker, not again after every
    test of another file in between); within a file, tests recorded at ``LONG`` seconds or more first, longest
    first, the rest as they were (stable sorts)."""
    def file_of(item):
        return item.nodeid.split("::")[0]

    totals = {}
    for item in items:
        totals[file_of(item)] = totals.get(file_of(item), 0.0) + durations.get(item.nodeid, 0.0)

    def key(item):
        seconds = durations.get(item.nodeid, 0.0)
        return -totals[file_of(item)], file_of(item), -seconds if seconds >= LONG else 0.0

    return sorted(items, key=key)


def recipe_job(path):
    """(job, the ``honours`` of its ``job.parse`` call or None, the recipe's syntax tree) of a recipe in tasks/."""
    import ast

    import zoo
    import zoo.config

    path = Path(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    command, honours = None, None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "job" and isinstance(node.func.value, ast.Name) and node.func.value.id == "zoo":
                command = node.args[0].value
            elif node.func.attr == "parse" and isinstance(node.func.value, ast.Name) and node.func.value.id == "job":
                for keyword in node.keywords:
                    if keyword.arg == "honours":
                        honours = eval(compile(ast.Expression(keyword.value), str(path), "eval"),
                                       {"zoo": zoo, **vars(zoo.config)})
    assert command, f"{path.name} takes no zoo.job(...)"
    return zoo.job(command), honours, tree


# ------------------------------------------------------------------------------ commands in the manual
def shell_commands(code):
    """The simple commands of a bash block as word lists: continuation lines joined, split at newlines, ``&&``,
    ``;`` and ``|``, leading ``VAR=value`` assignments dropped."""
    import shlex

    joined = re.sub(r"\\\n\s*", " ", code)
    commands = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = []
        for token in [*lexer, ";"]:
            if token in (";", "&&", "||", "|", "&"):
                while words and re.match(r"^[A-Za-z_][A-Za-z_0-9]*=", words[0]):
                    words = words[1:]
                if words:
                    commands.append(words)
                words = []
            else:
                words.append(token)
    return commands


def check_command_flags(words):
    """SystemExit (argparse's own, code 2) when a ``zoo ...``, ``python -m zoo ...`` or ``python tasks/NAME.py ...``
    command names a flag or a choice its parser does not take (the command is parsed, not run; values are not
    checked beyond argparse). Returns what was checked ("zoo", "recipe") or None for another command."""
    import argparse

    import zoo.cli
    from zoo.config import add_flags

    if words[:3] == ["python", "-m", "zoo"]:
        words = ["zoo", *words[3:]]
    if words[0] == "zoo":
        argv = words[1:]
        zoo.cli.build_parser(argv).parse_args(argv)
        return "zoo"
    if words[0] == "python" and len(words) > 1 and re.fullmatch(r"tasks/\w+\.py", words[1]):
        job, _, _ = recipe_job(REPO / words[1])
        parser = argparse.ArgumentParser(prog=words[1])
        add_flags(parser, job.config_class)
        parser.parse_args(words[2:])
        return "recipe"
    return None
