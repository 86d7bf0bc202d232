"""End-to-end bi-encoder training on a tiny synthetic task: learning, results files, kill-and-resume."""

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

import forked
import zoo
from helpers import tiny_train_config as config, write_synthetic_task
from helpers import CJK_CHARS
from zoo.jobs.bi_encoder import BiEncoderConfig as TrainConfig, run as train_bi_encoder
from zoo.evaluation import Evaluator
from zoo.presets import save_preset

pytestmark = pytest.mark.slow  # every test trains a model or runs a job

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))








def test_training_raises_valid_spearman_and_writes_results(tiny_setup, tmp_path, monkeypatch):
    """... and creates no variable inside the traced training step (the optimizer's are built before it: variables
    created while tracing make TensorFlow trace the step twice, seconds of start-up)."""
    import tensorflow as tf
    from keras.src.backend.common.variables import Variable

    created_in_trace, real_init = [], Variable.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        if tf.inside_function():
            created_in_trace.append(self.path)

    monkeypatch.setattr(Variable, "__init__", init)
    results = train_bi_encoder(config(tiny_setup, tmp_path / "run"))
    assert created_in_trace == []
    start, *trained = [e["valid_spearman"] for e in results["epochs"]]
    assert results["epochs"][0]["epoch"] == 0
    assert max(trained) > start + 20, results["epochs"]
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    for key in ("command", "versions", "data_files", "epochs", "valid_spearman", "test_spearman", "seconds",
                "threshold", "valid_accuracy", "test_accuracy", "test_accuracy_ci95"):  # binary task: accuracy too
        assert key in saved
    assert saved["test_accuracy_ci95"][0] <= saved["test_accuracy"] <= saved["test_accuracy_ci95"][1]
    assert len(saved["data_files"]["train"]["sha256"]) == 64
    flags = set(next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo", encoding="utf-8")
                      if line.startswith("flags")), [])) if os.path.exists("/proc/cpuinfo") else set()
    kind = ("AVX-512 VNNI" if "avx512_vnni" in flags else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags
            else "other")  # this machine's, read here from /proc/cpuinfo
    assert saved["machine"]["cores"] == len(os.sched_getaffinity(0)) and saved["machine"]["cpu_kind"] == kind
    assert "| LCQMC | cosent |" in (tmp_path / "run" / "results.md").read_text()
    low, high = saved["test_accuracy_ci95"]
    assert f"{saved['test_accuracy']:.2f} [{low:.1f}, {high:.1f}]" in (tmp_path / "run" / "results.md").read_text()
    best = zoo.SentenceEncoder.from_preset(tmp_path / "run" / "model")
    assert best.tokenizer is not None and best.maxlen == 16


def test_matryoshka_dims_flag_trains_and_is_checked(tiny_setup, tmp_path):
    results = train_bi_encoder(config(tiny_setup, tmp_path / "m", epochs=1, matryoshka_dims=("8",)))
    assert list(results["config"]["matryoshka_dims"]) == [8]
    assert results["epochs"][-1]["valid_spearman"] > results["epochs"][0]["valid_spearman"]
    with pytest.raises(zoo.ConfigError, match="matryoshka"):
        config(tiny_setup, tmp_path / "x", matryoshka_dims=("x",))
    with pytest.raises(zoo.ConfigError, match="matryoshka"):
        config(tiny_setup, tmp_path / "x", objective="sbert", matryoshka_dims=("8",))


def test_sbert_objective_trains(tiny_setup, tmp_path):
    results = train_bi_encoder(config(tiny_setup, tmp_path / "sbert", objective="sbert", epochs=1))
    assert results["epochs"][1]["valid_spearman"] > results["epochs"][0]["valid_spearman"] + 10


def test_warmup_linear_schedule_and_flag(tiny_setup, tmp_path):
    """--warmup: 0 -> peak over the warm-up steps, then linearly to 0 at the last step; default constant lr."""
    from keras import ops

    from zoo.train import WarmupLinear, learning_rate

    schedule = learning_rate(1.0, 0.1, 100)
    assert isinstance(schedule, WarmupLinear)
    values = [float(ops.convert_to_numpy(schedule(step))) for step in (0, 5, 10, 55, 100, 120)]
    np.testing.assert_allclose(values, [0, 0.5, 1, 0.5, 0, 0], atol=1e-6)
    assert learning_rate(1e-3, None, 100) == 1e-3
    for bad in (-0.1, 1.0, 10):
        with pytest.raises(ValueError, match=r"^warmup is a share of the training steps in \[0, 1\)"):
            learning_rate(1e-3, bad, 100)
    results = train_bi_encoder(config(tiny_setup, tmp_path / "warm", epochs=1, warmup=0.2))
    assert results["config"]["warmup"] == 0.2
    assert results["epochs"][1]["valid_spearman"] > results["epochs"][0]["valid_spearman"] + 10
    constant = train_bi_encoder(config(tiny_setup, tmp_path / "constant", epochs=1))  # the flag must matter
    warm = np.load(tmp_path / "warm" / "checkpoint" / "state.npz")
    const = np.load(tmp_path / "constant" / "checkpoint" / "state.npz")
    assert constant["config"]["warmup"] is None
    assert max(float(np.max(np.abs(warm[k] - const[k]))) for k in warm.files if k.startswith("v")) > 1e-3


def test_resume_continues_exactly(tiny_setup, tmp_path, monkeypatch, caplog):
    """2 epochs in one go == 1 epoch, stop, rerun with epochs=2 on the same output, with dropout on: the rerun
    resumes (it trains one epoch's steps, not two) and ends with the same variables, optimizer state included
    (max abs difference <= 1e-6), and the same scores."""
    keras.utils.set_random_seed(3)
    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
    bb = zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=32, dropout=0.1)
    save_preset(bb, zoo.Tokenizer(vocab), tmp_path / "preset")
    run = {"checkpoint": str(tmp_path / "preset")}
    straight = train_bi_encoder(config(tiny_setup, tmp_path / "straight", **run))
    train_bi_encoder(config(tiny_setup, tmp_path / "resumed", epochs=1, **run))

    from zoo.train import loop
    steps = []
    original = loop.StateCheckpoint.on_train_batch_end
    monkeypatch.setattr(loop.StateCheckpoint, "on_train_batch_end",
                        lambda self, batch, logs=None: (steps.append(batch), original(self, batch, logs))[1])
    with caplog.at_level("INFO", logger="zoo"):
        resumed = train_bi_encoder(config(tiny_setup, tmp_path / "resumed", epochs=2, **run))
    assert "resuming from" in caplog.text and "epoch 2, step 0" in caplog.text
    assert len(steps) == 480 // 16, f"the rerun trained {len(steps)} steps instead of one epoch's 30"
    assert [e["epoch"] for e in resumed["epochs"]] == [0, 1, 2]
    np.testing.assert_allclose([e["valid_spearman"] for e in resumed["epochs"]],
                               [e["valid_spearman"] for e in straight["epochs"]], atol=1e-6)
    a, b = (np.load(tmp_path / d / "checkpoint" / "state.npz") for d in ("straight", "resumed"))
    assert a.files == b.files
    worst = max(float(np.max(np.abs(a[k].astype("float64") - b[k]))) for k in a.files if a[k].size)
    assert worst <= 1e-6, worst


def test_spearman_evaluator_callback_keeps_best(tiny_setup):
    """The Keras callback for users' own fit loops: logs val_spearman, restores the best epoch's weights."""
    from zoo.data.tasks import load_task
    from zoo.evaluation import SpearmanEvaluator, evaluate_encoder
    from zoo.train import EvaluatorCallback
    from zoo.losses import CoSENTLoss
    from zoo.models import build_pair_trainer
    from zoo.train import PairBatches

    encoder = zoo.SentenceEncoder.from_preset(str(tiny_setup / "preset"), maxlen=16)
    train = load_task("LCQMC", "train", str(tiny_setup / "data"))
    valid = load_task("LCQMC", "valid", str(tiny_setup / "data"))
    trainer = build_pair_trainer(encoder, "cosent")
    trainer.compile(optimizer=keras.optimizers.Adam(2e-3), loss=CoSENTLoss(), jit_compile=False)
    batches = PairBatches(encoder.tokenizer, train, 16, 16, length_buckets=False)
    steps = [(x, y) for _, x, y in batches.epoch(0, 0)][:4]

    def forever():
        while True:
            yield from steps

    callback = EvaluatorCallback(SpearmanEvaluator(valid), encoder, verbose=False)
    history = trainer.fit(forever(), steps_per_epoch=4, epochs=3, verbose=0, shuffle=False, callbacks=[callback])
    assert history.history["val_spearman"] == callback.history
    assert callback.best == max(callback.history)
    assert evaluate_encoder(encoder, valid)[0]["spearman"] == pytest.approx(callback.best, abs=1e-3)

    # Trained on inverted labels, the model unlearns: valid falls, so the best epoch is not the last one, and
    # the end of fit must put the best weights back.
    def inverted():
        while True:
            yield from ((x, 1 - y) for x, y in steps)

    callback = EvaluatorCallback(SpearmanEvaluator(valid), encoder, verbose=False)
    trainer.fit(inverted(), steps_per_epoch=4, epochs=3, verbose=0, shuffle=False, callbacks=[callback])
    assert callback.best_epoch < 3 and callback.history[-1] < callback.best - 1, callback.history
    assert evaluate_encoder(encoder, valid)[0]["spearman"] == pytest.approx(callback.best, abs=0.05)  # not the last


def test_training_job_runs_on_jax(tiny_setup, tmp_path):
    """The GPU path: the same job under KERAS_BACKEND=jax learns the synthetic task."""
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    cmd = [sys.executable, os.path.join(REPO, "tasks", "train_bi_encoder.py"), "--tasks", "LCQMC",
           "--checkpoint", str(tiny_setup / "preset"), "--data-dir", str(tiny_setup / "data"), "--epochs", "1",
           "--batch-size", "16", "--maxlen", "16", "--lr", "2e-3", "--output", str(tmp_path / "jax"), "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "jax" / "results.json").read_text())
    assert results["versions"]["keras_backend"] == "jax"
    assert results["epochs"][1]["valid_spearman"] > results["epochs"][0]["valid_spearman"] + 20


def test_multi_task_training_selects_by_mean_valid_and_reports_each_task(tiny_setup, tmp_path):
    """Several tasks -> one model on the union of their train splits; each batch from one task (or mixed, with
    graded labels scaled); selection by the mean valid Spearman; per-task test results and transfer tasks."""
    from zoo.train import MultiTaskBatches, PairBatches

    data = tmp_path / "data"
    write_synthetic_task(str(data / "LCQMC"), seed=0)
    write_synthetic_task(str(data / "BQ"), seed=1)
    for split in ("train", "valid", "test"):  # the second task's files under its own name, graded labels
        src = data / "BQ" / f"LCQMC.{split}.data"
        lines = [line.rsplit("\t", 1) for line in src.read_text(encoding="utf-8").splitlines()]
        (data / "BQ" / f"BQ.{split}.data").write_text(
            "".join(f"{t}\t{5 * int(y)}\n" for t, y in lines), encoding="utf-8")
        src.unlink()
    tok = zoo.Tokenizer.from_preset(str(tiny_setup / "preset"))
    from zoo.data.tasks import load_task

    parts = [PairBatches(tok, load_task(t, "train", str(data)), 16, 16) for t in ("LCQMC", "BQ")]
    multi = MultiTaskBatches(parts)
    assert len(multi) == len(parts[0]) + len(parts[1]) and multi.n == parts[0].n + parts[1].n
    seen = [set(np.unique(y).tolist()) for _, _, y in multi.epoch(0, 0)]
    assert all(s <= {0.0, 1.0} or s <= {0.0, 5.0} for s in seen)  # one task per batch
    assert any(s == {0.0, 5.0} for s in seen) and any(s == {0.0, 1.0} for s in seen)
    for batching in ("task", "mixed"):
        results = train_bi_encoder(config(tiny_setup, tmp_path / batching, tasks=("LCQMC", "BQ"), data_dir=str(data),
                                          epochs=1, batching=batching, eval_tasks=("LCQMC",)))
        assert set(results["tasks"]) == {"LCQMC", "BQ"}
        first = results["epochs"][0]["valid_spearman"]
        assert results["epochs"][1]["valid_spearman"] > first + 10
        assert results["valid_spearman"] == pytest.approx(
            np.mean([results["tasks"][t]["valid_spearman"] for t in ("LCQMC", "BQ")]), abs=1e-6)
        assert "test_accuracy" in results["tasks"]["LCQMC"] and "test_accuracy" not in results["tasks"]["BQ"]
        assert "| BQ |" in (tmp_path / batching / "results.md").read_text()


def test_the_start_is_a_candidate_for_the_best_model(tiny_setup, tmp_path):
    """Training on inverted labels makes valid worse: the saved best model is the starting checkpoint (epoch 0)."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "valid", "test"):
        lines = (tiny_setup / "data" / f"LCQMC.{split}.data").read_text(encoding="utf-8").splitlines()
        if split == "train":
            lines = [f"{a}\t{b}\t{1 - int(y)}" for a, b, y in (line.split("\t") for line in lines)]
        (data / f"LCQMC.{split}.data").write_text("\n".join(lines) + "\n", encoding="utf-8")
    results = train_bi_encoder(config(tiny_setup, tmp_path / "run", data_dir=str(data), epochs=1))
    start, trained = [e["valid_spearman"] for e in results["epochs"]]
    assert trained < start - 5 and results["best_epoch"] == 0
    start_model = zoo.SentenceEncoder.from_preset(str(tiny_setup / "preset"), maxlen=16)
    best = zoo.SentenceEncoder.from_preset(tmp_path / "run" / "model")
    np.testing.assert_allclose(best.encode(["的一是", "不了人"]), start_model.encode(["的一是", "不了人"]), atol=1e-6)
    assert results["valid_spearman"] == pytest.approx(start, abs=1e-4)


def test_library_errors_name_parameters_not_flags(tmp_path, monkeypatch):
    """Below the jobs zoo speaks in Python parameters (fit, the schedules, the data folder, streamed pair files,
    the distribution); the flags stay in the jobs' own messages."""
    import zoo.data.tasks
    from zoo.train import fit, learning_rate
    from zoo.train.streaming import pair_files

    with pytest.raises(zoo.ConfigError, match=r"^epochs and save_every must be >= 1, got 0 and 500$"):
        fit(None, None, str(tmp_path / "never"), epochs=0)
    with pytest.raises(zoo.ConfigError, match=r"^epochs and save_every must be >= 1, got 1 and 0$"):
        fit(None, None, str(tmp_path / "never"), epochs=1, save_every=0)
    assert not (tmp_path / "never").exists()
    with pytest.raises(zoo.ConfigError, match=r"^warmup is a share"):
        learning_rate(1e-3, 1.5, 10)
    with pytest.raises(zoo.ConfigError, match=r"^paths: .*nope\.data not found$"):
        pair_files([tmp_path / "nope.data"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(zoo.ConfigError, match=r"^paths: no files in"):
        pair_files(tmp_path / "empty")
    monkeypatch.setattr(zoo.data.tasks, "DATA_DIR", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match=r"no BQ data in .*; pass data_dir$"):
        zoo.data.resolve_data_dir("BQ")
    with pytest.raises(zoo.ConfigError, match=r"^--epochs must be >= 1, got 0$"):  # the job's flag
        TrainConfig(epochs=0)


def test_limit_eval_and_one_valid_pass_per_evaluation(tiny_setup, tmp_path, monkeypatch):
    """--limit-eval cuts valid and test; the final evaluation reuses the best epoch's valid scores, so valid is
    encoded once per evaluation (before training and after each epoch), not again at the end."""
    calls = []
    original = zoo.SentenceEncoder.similarity_pairwise

    def counting(self, a, b, batch_size=64, **kwargs):
        calls.append(len(a))
        return original(self, a, b, batch_size, **kwargs)

    monkeypatch.setattr(zoo.SentenceEncoder, "similarity_pairwise", counting)
    results = train_bi_encoder(config(tiny_setup, tmp_path / "run", epochs=1, limit_eval=50))
    assert results["data_files"]["valid"]["pairs"] == 50 == results["data_files"]["test"]["pairs"]
    assert calls == [50, 50, 50]  # valid before training, valid after epoch 1, test


def test_sigkill_at_20_random_moments_resumes_to_the_unkilled_result(tiny_setup, tmp_path):
    """SIGKILL a training job (dropout on, checkpoints every 3 steps) at 20 random moments (two chains of 10,
    side by side; half of them anywhere in the first half of a run, half within 0.5 s after a run's next checkpoint),
    some inside checkpoint writes (this also covers the old single-kill test: the rerun says it
    resumes from OUTPUT/checkpoint and its history runs through every epoch); rerunning resumes each time, and each
    finished run's weights, optimizer state and scores equal those of a run never killed (max abs difference of
    every variable <= 1e-6)."""
    keras.utils.set_random_seed(2)
    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
    bb = zoo.BertBackbone(len(vocab), 2, 2, 32, 64, max_sequence_length=32, dropout=0.1)
    save_preset(bb, zoo.Tokenizer(vocab), tmp_path / "preset")

    script = os.path.join(REPO, "tasks", "train_bi_encoder.py")

    def flags(out):
        return ["--tasks", "LCQMC", "--checkpoint", tmp_path / "preset", "--data-dir", tiny_setup / "data", "--epochs",
                "2", "--batch-size", "16", "--maxlen", "16", "--lr", "2e-3", "--save-every", "3", "--no-progress",
                "--no-jit-compile", "--output", out]

    def started(proc, log_file):
        """Seconds until the job's first log line (imports done) or its exit."""
        start = time.time()
        while proc.exitcode is None and "[zoo]" not in log_file.read_text():
            time.sleep(0.05)
        return time.time() - start

    # every run is a process forked from one that has imported zoo (tests/forked.py: no 12 s TensorFlow import each)
    proc = forked.start(script, flags(tmp_path / "unkilled"), tmp_path / "unkilled.log")
    start = time.time()
    started(proc, tmp_path / "unkilled.log")
    working = time.time() - start
    proc.join(600)
    assert proc.exitcode == 0, (tmp_path / "unkilled.log").read_text()[-2000:]
    working = 1.3 * (time.time() - start - working)  # after start-up; two chains share the cores: 1.3x slower

    def checkpoint_version(out):
        """Changes whenever a checkpoint is written (the folder is replaced atomically)."""
        try:
            st = os.stat(out / "checkpoint")
            return st.st_ino, st.st_mtime_ns
        except FileNotFoundError:
            return None

    def kill_chain(out, kills_wanted, seed):
        """Run, SIGKILL at a random moment after start-up, rerun ... ``kills_wanted`` times, then finish."""
        rng, kills, resumes, log_file = np.random.default_rng(seed), 0, 0, out.parent / f"{out.name}.log"
        while kills < kills_wanted:
            proc = forked.start(script, flags(out), log_file)
            before = checkpoint_version(out)
            started(proc, log_file)
            if rng.uniform() < 0.5:  # anywhere in the first half: restore, tracing, steps, writes, evaluation
                delay = rng.uniform(0.0, 0.5) * working
            else:
                # within 0.5 s after this run's next checkpoint: the chain moves on whatever the load on the
                # cores (the other xdist worker can slow these runs far more than the reference run), and a run
                # killed late seldom finishes first (the steps after tracing are fast: a finished run means
                # starting the chain over)
                while proc.exitcode is None and checkpoint_version(out) == before:
                    time.sleep(0.02)
                delay = rng.uniform(0.0, 0.5)
            proc.join(delay)
            if proc.exitcode is None:
                proc.kill()  # SIGKILL
                proc.join()
                kills += 1
            resumes += f"resuming from {out / 'checkpoint'}" in log_file.read_text()
            if proc.exitcode == 0:  # it finished before the kill: start over to reach the kills wanted
                print(f"{out.name}: a run finished before its kill; starting over")
                shutil.rmtree(out)
        assert forked.run(script, flags(out), log_file) == 0, log_file.read_text()[-2000:]
        return resumes

    # 20 kills in two chains of 10 run side by side (the subprocesses' start-up is mostly one core's work)
    chains = [tmp_path / "killed", tmp_path / "killed_2"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        resumes = sum(pool.map(kill_chain, chains, [10, 10], [0, 1]))
    assert resumes >= 5, f"only {resumes} of 20 restarts resumed from a checkpoint"
    for out in chains:
        killed_state = np.load(out / "checkpoint" / "state.npz")
        unkilled_state = np.load(tmp_path / "unkilled" / "checkpoint" / "state.npz")
        assert killed_state.files == unkilled_state.files
        worst = max(float(np.max(np.abs(killed_state[k].astype("float64") - unkilled_state[k])))
                    for k in killed_state.files if killed_state[k].size)
        assert worst <= 1e-6, worst
        a, b = (json.loads((d / "results.json").read_text()) for d in (out, tmp_path / "unkilled"))
        assert [e["epoch"] for e in a["epochs"]] == [0, 1, 2]
        assert a["test_spearman"] == pytest.approx(b["test_spearman"], abs=1e-6)
        assert [e["valid_spearman"] for e in a["epochs"]] == pytest.approx(
            [e["valid_spearman"] for e in b["epochs"]], abs=1e-6)


def test_a_kill_between_the_last_step_and_the_epoch_evaluation_resumes(tiny_setup, tmp_path, monkeypatch):
    """The window a random SIGKILL found: the epoch's last step saved (step == steps per epoch) but the epoch not
    yet evaluated. The rerun evaluates that epoch, goes on, and ends as an uninterrupted run does."""
    from zoo.train import loop

    unkilled = train_bi_encoder(config(tiny_setup, tmp_path / "unkilled", save_every=5))
    real = loop.EpochEnd.on_epoch_end

    def killed(self, epoch, logs=None):
        raise KeyboardInterrupt  # stands in for SIGKILL right after the step-30 checkpoint

    monkeypatch.setattr(loop.EpochEnd, "on_epoch_end", killed)
    with pytest.raises(KeyboardInterrupt):
        train_bi_encoder(config(tiny_setup, tmp_path / "killed", save_every=5))
    saved = json.loads((tmp_path / "killed" / "checkpoint" / "state.json").read_text())["progress"]
    assert (saved["epoch"], saved["step"]) == (0, 30)
    monkeypatch.setattr(loop.EpochEnd, "on_epoch_end", real)
    resumed = train_bi_encoder(config(tiny_setup, tmp_path / "killed", save_every=5))
    assert [e["valid_spearman"] for e in resumed["epochs"]] == pytest.approx(
        [e["valid_spearman"] for e in unkilled["epochs"]], abs=1e-6)
    assert resumed["test_spearman"] == pytest.approx(unkilled["test_spearman"], abs=1e-6)


# ------------------------------------------------------------------------------ EMA and gradient accumulation
class Improving(Evaluator):
    """Every call scores higher (so every epoch is kept) and records the first weight of the model it measured."""

    name = "valid"

    def __init__(self):
        self.seen = []

    def __call__(self, model):
        self.seen.append(np.array(model.trainable_variables[0].numpy()))
        return {"spearman": float(len(self.seen))}


def ema_run(tmp_path, name, epochs, batches, seed=3):
    from helpers import tiny_sentence_encoder
    from zoo.models import build_pair_trainer
    from zoo.train import fit

    encoder = tiny_sentence_encoder(seed)
    trainer = build_pair_trainer(encoder, "cosent")
    trainer.compile(optimizer=keras.optimizers.Adam(1e-2, use_ema=True, ema_momentum=0.5),
                    loss=zoo.losses.CoSENTLoss(), jit_compile=False)
    evaluator = Improving()
    fit(trainer, batches, str(tmp_path / name), epochs=epochs, seed=1, evaluator=evaluator, model=encoder,
        show_progress=False)
    return trainer, evaluator


def test_ema_evaluates_and_keeps_the_average_trains_on_the_raw_weights_and_resumes(tmp_path):
    """--ema-momentum (Keras' use_ema): the evaluator measures and OUTPUT/model keeps the moving average, training
    goes on from the raw weights (they differ), the starting point is measured on the weights themselves (the
    averages are set at the first step: before it they are zeros), and a run resumed after its first epoch ends with
    the same average and raw weights as one never stopped."""
    from helpers import tiny_sentence_encoder
    from zoo.data.pair_files import PairDataset
    from zoo.train import PairBatches

    texts = ["今天天气不错", "今天天气很好", "花呗怎么开通", "如何开通花呗", "借呗怎么还款", "信用卡逾期"] * 4
    data = PairDataset(texts[0::2], texts[1::2], np.array([1, 0, 1] * 4, "float32"))
    batches = PairBatches(tiny_sentence_encoder().tokenizer, data, 4, 16)
    trainer, evaluator = ema_run(tmp_path, "whole", 2, batches)
    optimizer = trainer.optimizer
    raw = np.array(optimizer._trainable_variables[0].numpy())
    average = np.array(optimizer._model_variables_moving_average[0].numpy())
    assert np.abs(raw - average).max() > 1e-4  # training kept the raw weights
    np.testing.assert_allclose(evaluator.seen[-1], average, atol=1e-6)  # the last epoch was measured on the average
    start = np.array(tiny_sentence_encoder(3).trainable_variables[0].numpy())
    np.testing.assert_allclose(evaluator.seen[0], start, atol=1e-6)  # before any step: the weights (no average yet)
    kept = zoo.SentenceEncoder.from_preset(tmp_path / "whole" / "model")
    np.testing.assert_allclose(kept.trainable_variables[0].numpy(), average, atol=1e-6)  # and kept

    ema_run(tmp_path, "resumed", 1, batches)
    resumed, _ = ema_run(tmp_path, "resumed", 2, batches)  # a new process's trainer, resumed from epoch 1
    for a, b in ((resumed.optimizer._trainable_variables[0], raw),
                 (resumed.optimizer._model_variables_moving_average[0], average)):
        np.testing.assert_allclose(np.array(a.numpy()), b, atol=1e-6)


def test_gradient_accumulation_equals_one_big_batch_for_a_per_pair_loss():
    """``gradient_accumulation_steps=2`` over two batches of 4 pairs gives the update of one batch of 8 (cosine MSE,
    a mean over pairs; no dropout); the flags are checked before any data is read."""
    from helpers import tiny_sentence_encoder
    from zoo.models import build_pair_trainer

    rng = np.random.default_rng(0)
    texts = ["今天天气不错", "今天天气很好", "花呗怎么开通", "如何开通花呗", "借呗怎么还款", "信用卡逾期", "你好", "再见"]
    a, b = rng.permutation(texts), rng.permutation(texts)
    ids = tiny_sentence_encoder().tokenizer([x for pair in zip(a, b) for x in pair], maxlen=16)
    y = rng.uniform(size=8).astype("float32")
    after = {}
    for steps in (1, 2):
        encoder = tiny_sentence_encoder(seed=5)
        trainer = build_pair_trainer(encoder, "cosine_mse")
        options = {"gradient_accumulation_steps": steps} if steps > 1 else {}
        trainer.compile(optimizer=keras.optimizers.SGD(50.0, **options), loss=zoo.losses.CosineMSELoss(),
                        jit_compile=False)
        if steps == 1:
            trainer.train_on_batch(ids, y)
        else:
            for half in (slice(0, 8), slice(8, 16)):
                trainer.train_on_batch({k: v[half] for k, v in ids.items()}, y[half.start // 2:half.stop // 2])
        after[steps] = [np.array(v.numpy()) for v in trainer.trainable_variables]
    assert max(np.abs(x - y).max() for x, y in zip(after[1], after[2])) < 1e-5
    assert max(np.abs(x - y).max() for x, y in zip(after[1], [np.array(v.numpy()) for v in
                                                              tiny_sentence_encoder(seed=5).trainable_variables])) > 1e-3
    assert TrainConfig(gradient_accumulation_steps=4, ema_momentum=0.999, layer_decay=0.9,
                       lr_schedule=("1000:1,2000:0.1",)).optimizer_options() == {
        "ema_momentum": 0.999, "gradient_accumulation_steps": 4, "layer_decay": 0.9,
        "lr_schedule": {1000: 1.0, 2000: 0.1}, "loss_scale": False}
    for bad, flag in [({"ema_momentum": 1.0}, "--ema-momentum"), ({"gradient_accumulation_steps": 0},
                                                                   "--gradient-accumulation-steps"),
                      ({"ema_momentum": 0.99, "distribute": "data-parallel"}, "--ema-momentum"),
                      ({"layer_decay": 1.5}, "--layer-decay"), ({"lr_schedule": ("1000:1,two:0.1",)}, "--lr-schedule")]:
        with pytest.raises(zoo.ConfigError, match=flag):
            TrainConfig(**bad)


def test_layer_decay_scales_each_layers_steps_and_the_piecewise_schedule_follows_its_points():
    """--layer-decay: per-variable step sizes (the top layer 1, each layer below ``decay`` times the one above, the
    embeddings below the lowest, heads 1): one Adam step moves each variable by exactly its factor times plain
    Adam's step. --lr-schedule: bert4keras' piecewise-linear factors of the peak rate."""
    from helpers import tiny_sentence_encoder
    from zoo.models import build_pair_trainer
    from zoo.train.optimizers import PiecewiseLinear, layer_factors, training_optimizer

    encoder = tiny_sentence_encoder(seed=5)
    factors = layer_factors(encoder.trainable_variables, 0.5)
    assert factors["transformer_layer_1/feedforward_output_dense/kernel"] == 1.0
    assert factors["transformer_layer_0/self_attention_layer/query/kernel"] == 0.5
    assert factors["token_embedding/embeddings"] == 0.25 and "pooler_dense/kernel" not in factors
    ids = encoder.tokenizer(["今天天气不错", "今天天气很好", "花呗怎么开通", "如何开通花呗"], maxlen=16)
    y = np.array([1.0, 0.0], "float32")
    moved = {}
    for decay in (None, 0.5):
        encoder = tiny_sentence_encoder(seed=5)
        before = {v.path: np.array(v.numpy()) for v in encoder.trainable_variables}
        trainer = build_pair_trainer(encoder, "cosent")
        trainer.compile(optimizer=training_optimizer("adam", 1e-3, layer_decay=decay), loss=zoo.losses.CoSENTLoss(),
                        jit_compile=False)
        trainer.train_on_batch(ids, y)
        moved[decay] = {v.path: np.array(v.numpy()) - before[v.path] for v in encoder.trainable_variables}
    for path, step in moved[None].items():
        np.testing.assert_allclose(moved[0.5][path], factors.get(path, 1.0) * step, rtol=1e-4, atol=2e-7)  # float32 ulps of weights near 1
    schedule = PiecewiseLinear(1e-3, {1000: 1, 2000: 0.1})
    got = [float(schedule(step)) for step in (0, 500, 1000, 1500, 2000, 3000)]
    np.testing.assert_allclose(got, [0.0, 5e-4, 1e-3, 5.5e-4, 1e-4, 1e-4], rtol=1e-5, atol=1e-9)
    config = training_optimizer("adamw", 1e-3, lr_schedule={0: 1, 10: 0}).get_config()["learning_rate"]
    assert config["class_name"] == "PiecewiseLinear" and config["config"] == {"peak": 1e-3, "points": {0: 1.0, 10: 0.0}}


def test_zoo_jit_compile_0_trains_without_xla(tiny_setup, tmp_path, monkeypatch):
    """``ZOO_JIT_COMPILE=0`` turns the default XLA compilation off on TensorFlow, as ``--no-jit-compile``; unset, XLA
    stays on, and on JAX (whose data-parallel step needs its compiled all-reduce) it is ignored."""
    assert config(tiny_setup, tmp_path / "xla", jit_compile=True).jit_compile is True
    monkeypatch.setenv("ZOO_JIT_COMPILE", "0")
    assert config(tiny_setup, tmp_path / "no_xla", jit_compile=True).jit_compile is False
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert config(tiny_setup, tmp_path / "jax", jit_compile=True).jit_compile is True
