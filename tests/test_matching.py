"""Threshold selection, accuracy intervals and cross-encoders."""

from unittest import mock

import numpy as np
import pytest

import zoo
from helpers import synthetic_vocab
from zoo.evaluation import accuracy, best_f1_threshold, best_threshold, bootstrap_accuracy_ci, threshold_accuracy
from zoo.presets import load_saved, save_preset


pytestmark = pytest.mark.slow  # trains cross-encoders and bi-encoders

def brute_force(scores, labels):
    s = np.unique(scores)
    candidates = np.concatenate([[s[0] - 1.0], (s[:-1] + s[1:]) / 2, [s[-1]]])
    accs = [np.mean((scores > t) == labels) for t in candidates]
    return candidates[int(np.argmax(accs))], max(accs)


@pytest.mark.parametrize("seed", range(20))
def test_sweep_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    labels = rng.integers(0, 2, n)
    scores = np.round(rng.normal(labels * 0.3, 0.5), 1 if seed % 2 else 6)  # odd seeds: many ties
    t, acc = best_threshold(scores, labels)
    bt, bacc = brute_force(scores, labels)
    assert acc == pytest.approx(bacc) and t == pytest.approx(bt)
    assert accuracy(scores, labels, t) == pytest.approx(acc)


def test_methods_agree_on_separated_data():
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1], 200)
    scores = np.concatenate([rng.uniform(-0.9, 0.1, 200), rng.uniform(0.4, 0.95, 200)])
    results = {m: best_threshold(scores, labels, m) for m in ("sweep", "bisect", "powell")}
    for t, acc in results.values():
        assert acc == 1.0 and 0.1 <= t < 0.4


def test_bisect_can_miss_the_optimum():
    # accuracy has two local maxima: bisection (documented as unimodal-only) stops at the worse one
    labels = np.array([0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1])
    scores = np.arange(len(labels), dtype=float)
    t_sweep, acc_sweep = best_threshold(scores, labels, "sweep")
    t_bisect, acc_bisect = best_threshold(scores, labels, "bisect")
    assert (t_sweep, acc_sweep) == (0.5, pytest.approx(8 / 12))
    assert acc_bisect == pytest.approx(7 / 12)


def test_edge_cases():
    assert best_threshold([0.2, 0.5], [1, 1]) == (pytest.approx(-0.8), 1.0)  # all positive
    t, acc = best_threshold([0.2, 0.5], [0, 0])
    assert acc == 1.0 and not any(np.array([0.2, 0.5]) > t)
    t, acc = best_threshold([0.3, 0.3, 0.3], [0, 1, 1])  # all tied: one split only
    assert acc == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="no scores"):
        best_threshold([], [])
    with pytest.raises(ValueError, match="3 scores but 2 labels"):
        best_threshold([1, 2, 3], [0, 1])
    with pytest.raises(ValueError, match="NaN"):
        best_threshold([0.1, float("nan")], [0, 1])
    with pytest.raises(ValueError, match="labels in"):
        best_threshold([0.1, 0.2], [0, 3])
    with pytest.raises(ValueError, match="method"):
        best_threshold([0.1, 0.2], [0, 1], "newton")


def test_f1_threshold_and_bootstrap():
    scores = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    labels = np.array([0, 1, 0, 1, 1, 1])
    t, f1 = best_f1_threshold(scores, labels)
    best = max((2 * np.sum((scores > c) & (labels == 1)) /
                (np.sum(scores > c) + labels.sum()), c) for c in [0.0, 0.15, 0.25, 0.35, 0.45, 0.55, 0.6])
    assert f1 == pytest.approx(best[0])
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 2000)
    scores = labels + rng.normal(0, 0.8, 2000)
    lo, hi = bootstrap_accuracy_ci(scores, labels, 0.5)
    acc = accuracy(scores, labels, 0.5)
    assert lo < acc < hi and hi - lo < 0.06
    # fitted on valid, applied to test: a threshold that is perfect on valid and costs accuracy on test
    fitted = threshold_accuracy(np.array([0.1, 0.2, 0.8, 0.9]), np.array([0, 0, 1, 1]),
                                np.array([0.1, 0.3, 0.6, 0.9]), np.array([0, 1, 1, 1]))
    assert fitted["threshold"] == pytest.approx(0.5) and fitted["valid_accuracy"] == 1.0
    assert fitted["test_accuracy"] == 0.75 and fitted["test_accuracy_ci95"][0] < 0.75 < fitted["test_accuracy_ci95"][1]


@pytest.fixture(scope="module")
def cross():
    import keras

    keras.utils.set_random_seed(0)
    tok = zoo.Tokenizer(synthetic_vocab())
    bb = zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=128, dropout=0.0)
    return zoo.CrossEncoder(bb, tok, maxlen=32)


def test_cross_encoder_predict_order_and_round_trips(cross, tmp_path):
    import keras

    pairs = [("今天天气很好", "今天天气不错"), ("我们", "他们在中国说的话" * 3), ("hello", "world")]
    scores = cross.score(pairs, batch_size=2)
    assert scores.shape == (3,) and np.all((scores > 0) & (scores < 1))
    one_by_one = np.array([cross.score([p])[0] for p in pairs])
    np.testing.assert_allclose(scores, one_by_one, atol=1e-5)
    cross.save_to_preset(tmp_path / "ce")
    np.testing.assert_allclose(zoo.CrossEncoder.from_preset(tmp_path / "ce").score(pairs), scores, atol=1e-6)
    for model in (zoo.from_preset(tmp_path / "ce"), load_saved(tmp_path / "ce"), load_saved(tmp_path / "ce")):
        assert isinstance(model, zoo.CrossEncoder)  # with its tokenizer, whichever verb loaded it
        np.testing.assert_allclose(model.score(pairs), scores, atol=1e-6)
    cross.save(str(tmp_path / "ce.keras"))
    np.testing.assert_allclose(keras.saving.load_model(str(tmp_path / "ce.keras")).score(pairs), scores, atol=1e-6)
    with pytest.raises(ValueError, match="pair 1"):
        cross.score([("好", "好"), ("", "好")])


def test_score_is_the_head_spec_and_predict_is_keras(cross):
    """score() serves the HeadSpec's meaning (P(similar) = softmax(logits)[1]); predict is Keras' on ids (its
    own keywords work), not a CrossEncoder override: raw pairs only pass through the task's preprocessor first
    (``Task.predict``) and give the same logits."""
    pairs = [("今天天气很好", "今天天气不错"), ("我们", "他们")]
    assert cross.head_spec() == zoo.heads.HeadSpec.score("softmax") and cross.head_spec().pairs
    ids = {k: np.asarray(v) for k, v in cross.tokenizer([a for a, _ in pairs], [b for _, b in pairs],
                                                        maxlen=32).items()}
    logits = cross.predict(ids, verbose=0, batch_size=2)
    assert logits.shape == (2, 2)
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(cross.score(pairs, engine="fp32"), p[:, 1], atol=1e-5)
    assert type(cross).predict is zoo.Task.predict and zoo.Task.predict.__qualname__ == "Task.predict"
    np.testing.assert_allclose(cross.predict(pairs, verbose=0), logits, atol=1e-5)
    spec = zoo.heads.HeadSpec.score("cosent")
    np.testing.assert_allclose(spec.serve_numpy(logits), logits[:, 0])
    np.testing.assert_allclose(spec.logits(spec.serve_numpy(logits)), logits[:, 0])
    softmax = cross.head_spec()
    np.testing.assert_allclose(softmax.logits(softmax.serve_numpy(logits)), logits[:, 1] - logits[:, 0], atol=1e-4)
    np.testing.assert_allclose(np.asarray(softmax.serve(logits)), softmax.serve_numpy(logits), atol=1e-6)
    assert zoo.heads.HeadSpec.from_record(softmax.to_record()) == softmax
    with pytest.raises(ValueError, match="head"):
        zoo.heads.HeadSpec.score("regression")


def test_zero_segments_option(cross):
    rows = cross.encode_pairs(["今天"], ["天气"])
    assert rows[0][1] == [0, 0, 0, 0, 1, 1, 1]
    cross.zero_segments = True
    try:
        assert cross.encode_pairs(["今天"], ["天气"])[0][1] == [0] * 7
    finally:
        cross.zero_segments = False


@pytest.mark.parametrize("head", ["softmax", "cosent"])
def test_cross_encoder_job_learns(tmp_path, head):
    """A signal a tiny cross-encoder learns in a few steps: the pair is "similar" when b is written with the first
    half of the character set (the job's plumbing is what is tested here)."""
    import keras

    from helpers import CJK_CHARS
    from zoo.jobs.cross_encoder import CrossEncoderConfig as CrossConfig, run as train_cross_encoder

    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    halves = chars[:80], chars[80:]
    rng = np.random.default_rng(0)
    (tmp_path / "data").mkdir()
    for split, n in (("train", 960), ("valid", 200), ("test", 200)):
        with open(tmp_path / "data" / f"LCQMC.{split}.data", "w", encoding="utf-8") as f:
            for i in range(n):
                label = i % 2
                a = "".join(rng.choice(chars, 6))
                b = "".join(rng.choice(halves[0 if label else 1], 6))
                f.write(f"{a}\t{b}\t{label}\n")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
    keras.utils.set_random_seed(1)
    save_preset(zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=40, dropout=0.0),
                    zoo.Tokenizer(vocab), tmp_path / "preset")
    results = train_cross_encoder(CrossConfig(tasks=("LCQMC",), head=head, checkpoint=str(tmp_path / "preset"),
                                              data_dir=str(tmp_path / "data"), epochs=2, batch_size=16, maxlen=32,
                                              lr=1e-3, output=str(tmp_path / "run"), progress=False,
                                              jit_compile=False))
    accs = [e["valid_accuracy"] for e in results["epochs"]]
    assert max(accs[1:]) > accs[0] + 15, accs
    assert results["test_accuracy"] > 80 and results["test_spearman"] > 50
    low, high = results["test_accuracy_ci95"]
    assert f"{results['test_accuracy']:.2f} [{low:.1f}, {high:.1f}]" in (tmp_path / "run" / "results.md").read_text()


def test_compare_matching_end_to_end(tmp_path):
    """Two tasks (PAWSX as transfer from LCQMC) -> table with intervals, JSON, PNGs."""
    import json
    import shutil

    import keras

    from helpers import CJK_CHARS
    from helpers import write_synthetic_task
    from zoo.jobs.compare import CompareConfig, run as compare_matching

    data = tmp_path / "data"
    write_synthetic_task(str(data), sizes=(320, 120, 120))
    for split in ("valid", "test"):
        shutil.copy(data / f"LCQMC.{split}.data", data / f"PAWSX.{split}.data")
    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
    keras.utils.set_random_seed(1)
    save_preset(zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=40, dropout=0.0),
                    zoo.Tokenizer(vocab), tmp_path / "preset")
    out = tmp_path / "compare"
    compare_matching(CompareConfig(tasks=("LCQMC", "PAWSX"), checkpoint=str(tmp_path / "preset"),
                                   data_dir=str(data), output=str(out), bi_lr=2e-3, cross_lr=1e-3, progress=False,
                                   jit_compile=False))
    results = json.loads((out / "results.json").read_text())
    assert len(results["rows"]) == 6
    for row in results["rows"]:
        low, high = row["test_accuracy_ci95"]
        assert low <= row["test_accuracy"] <= high
    assert {r["trained_on"] for r in results["rows"] if r["task"] == "PAWSX"} == {"LCQMC"}
    assert not (out / "PAWSX").exists()  # no PAWSX training: the LCQMC models were reused
    for name in ("LCQMC_scores.png", "LCQMC_threshold.png", "PAWSX_scores.png", "PAWSX_threshold.png"):
        assert (out / name).stat().st_size > 10_000
    for row in results["rows"]:  # the pictures' data, kept so that tools/results_pages.py can draw them again
        plot = row["plot"]
        assert plot["threshold"] == row["threshold"] and len(plot["accuracy_by_threshold"]["test"]) == 100
        assert sum(plot["test_histogram"]["similar"]) + sum(plot["test_histogram"]["not_similar"]) == 120
    table = (out / "results.md").read_text()
    assert "PAWSX (transfer from LCQMC)" in table and "Interact (cross-encoder) accuracy" in table
    test_labels = np.array([int(line.rsplit("\t", 1)[1]) for line in (data / "LCQMC.test.data").read_text().split("\n")
                            if line])
    majority = results["baselines"]["LCQMC"]["majority_class"]
    assert results["baselines"]["LCQMC"]["test_accuracy"] == pytest.approx(100 * np.mean(test_labels == majority))
    assert "Baseline: valid's majority class predicted for every test pair, accuracy" in table
    assert "it falls below 50 where test's majority label differs from valid's" in table  # the definition


def test_distill_targets_anneal_and_job_runs(tmp_path):
    """lambda goes 0 -> 1 over all steps: first batch = teacher probabilities, last batch = gold one-hot."""
    import json

    import keras

    from helpers import CJK_CHARS
    from helpers import write_synthetic_task
    from zoo.data.tasks import load_task
    from zoo.jobs.cross_encoder import CrossEncoderConfig as CrossConfig, run as train_cross_encoder
    from zoo.jobs.dvbert import DvBERTConfig, run as train_dvbert
    from zoo.models.cross_encoder import predict_teachers
    from zoo.train import DistillBatches
    from zoo.train import PairBatches

    data = tmp_path / "data"
    write_synthetic_task(str(data), sizes=(96, 60, 60))
    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
    tok = zoo.Tokenizer(vocab)
    train = load_task("LCQMC", "train", str(data))
    probs = np.random.default_rng(0).dirichlet([1, 1], size=(len(train), 2)).astype("float32")
    batches = DistillBatches(PairBatches(tok, train, 16, 16, np.arange(len(train), dtype="float32")),
                             train.labels, probs, epochs=2)
    first = next(iter(batches.epoch(0, 0)))
    last = list(batches.epoch(0, 1))[-1]
    order = batches.pairs.epoch_batches(0, 0)[0]
    np.testing.assert_allclose(first[2], probs[order], atol=1e-6)
    last_index = batches.pairs.epoch_batches(0, 1)[-1]
    np.testing.assert_allclose(last[2], np.eye(2)[train.labels[last_index].astype(int)][:, None, :].repeat(2, 1),
                               atol=1e-6)
    scores = DistillBatches(batches.pairs, train.labels, probs, epochs=2, as_score=True)
    middle = dict((step, y) for step, _, y in scores.epoch(0, 1))[0]  # lambda = len / (total - 1)
    lam = len(batches) / (batches.total - 1)
    index = batches.pairs.epoch_batches(0, 1)[0]
    np.testing.assert_allclose(middle, lam * train.labels[index] + (1 - lam) * probs[index, :, 1].mean(1), atol=1e-6)

    keras.utils.set_random_seed(1)
    save_preset(zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=40, dropout=0.0), tok,
                    tmp_path / "preset")
    train_cross_encoder(CrossConfig(checkpoint=str(tmp_path / "preset"), data_dir=str(data), maxlen=32,
                                    output=str(tmp_path / "teacher"), progress=False, jit_compile=False))
    results = train_dvbert(DvBERTConfig(teachers=(str(tmp_path / "teacher" / "model"),) * 2,
                                        checkpoint=str(tmp_path / "preset"), data_dir=str(data), epochs=2,
                                        maxlen=16, lr=2e-3, output=str(tmp_path / "dv"), progress=False,
                                        jit_compile=False))
    assert [e["epoch"] for e in results["epochs"]] == [0, 1, 2]
    assert json.loads((tmp_path / "dv" / "results.json").read_text())["test_accuracy"] == results["test_accuracy"]
    student = zoo.SentenceEncoder.from_preset(tmp_path / "dv" / "model")
    assert student.pooling == "mean"
    ranked = train_dvbert(DvBERTConfig(teachers=(str(tmp_path / "teacher" / "model"),), objective="cosent-gap",
                                       pooling="cls", checkpoint=str(tmp_path / "preset"), data_dir=str(data),
                                       epochs=1, maxlen=16, lr=2e-3, output=str(tmp_path / "dv_cosent"),
                                       progress=False, jit_compile=False))
    assert ranked["config"]["objective"] == "cosent-gap" and np.isfinite(ranked["test_spearman"])
    low, high = ranked["test_accuracy_ci95"]
    assert low <= ranked["test_accuracy"] <= high
    assert zoo.SentenceEncoder.from_preset(tmp_path / "dv_cosent" / "model").pooling == "cls"
    table = (tmp_path / "dv_cosent" / "results.md").read_text()
    assert "DvBERT (cosent-gap, cls)" in table and f"{ranked['test_accuracy']:.2f} [{low:.1f}, {high:.1f}]" in table
    # the teachers' train probabilities are cached for a resumed run: a hit loads no teacher
    cache = tmp_path / "dv_cosent" / "teacher_probs.npz"
    with np.load(cache) as cached:
        probs = cached["probs"]
    assert probs.shape == (len(train), 1, 2)
    with mock.patch("zoo.models.cross_encoder.CrossEncoder.from_preset", side_effect=AssertionError("cache missed")):
        np.testing.assert_array_equal(
            predict_teachers((str(tmp_path / "teacher" / "model"),), train, str(cache), progress=False), probs)
        other = load_task("LCQMC", "valid", str(data))  # other pairs: predicted afresh, not served stale
        with pytest.raises(AssertionError, match="cache missed"):
            predict_teachers((str(tmp_path / "teacher" / "model"),), other, str(cache), progress=False)
    with pytest.raises(ValueError, match="objective"):
        train_dvbert(DvBERTConfig(teachers=(str(tmp_path / "teacher" / "model"),), objective="mse"))
