"""tools/gpu_run.py end to end on CPU with tiny sizes (JAX, bfloat16 mixed precision): pretraining, the general
model, five tasks, a preset with its card; and its model FLOPs count."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import zoo
from helpers import CJK_CHARS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))


def write_tasks(folder, seed=0, sizes=(96, 48, 48)):
    """The five tasks as flat ``TASK.split.data`` files of the synthetic 4-group task (STS-B graded 0-5)."""
    chars = list(dict.fromkeys(CJK_CHARS))[:160]
    groups = [chars[i::4] for i in range(4)]
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    for task in ("LCQMC", "BQ", "ATEC", "STS-B", "PAWSX"):
        for split, n in zip(("train", "valid", "test"), sizes):
            with open(os.path.join(folder, f"{task}.{split}.data"), "w", encoding="utf-8") as f:
                for i in range(n):
                    label = i % 2
                    g1 = int(rng.integers(4))
                    g2 = g1 if label else int((g1 + rng.integers(1, 4)) % 4)
                    score = label * 5 if task == "STS-B" else label
                    f.write(f"{''.join(rng.choice(groups[g1], 6))}\t{''.join(rng.choice(groups[g2], 6))}\t{score}\n")
    os.makedirs(os.path.join(folder, "corpus"))
    with open(os.path.join(folder, "corpus", "docs.txt"), "w", encoding="utf-8") as f:
        for k in range(60):
            f.write("".join("".join(rng.choice(groups[k % 4], 7)) + "。" for _ in range(5)) + "\n")


def test_training_flops_count_the_layers_and_the_mlm_head(monkeypatch):
    import keras

    monkeypatch.setenv("KERAS_BACKEND", keras.backend.backend())  # the script's default (jax) stays out of here
    from gpu_run import encoder_flops, training_flops

    dims = {"layers": 4, "hidden": 256, "intermediate": 1024, "vocab": 21128}
    # one 4-layer pass over 2 x 16 tokens, by hand: per token 8 H^2 + 4 H I + 4 T H
    per_token = 8 * 256 ** 2 + 4 * 256 * 1024 + 4 * 16 * 256
    assert encoder_flops(2, 16, dims) == 4 * 2 * 16 * per_token
    pairs = {"token_ids": np.zeros((8, 16), "int32")}
    assert training_flops(pairs, dims) == 3 * encoder_flops(8, 16, dims)
    masked = {"token_ids": np.zeros((8, 16), "int32"), "mlm_positions": np.zeros((8, 3), "int32")}
    assert training_flops(masked, dims) == 3 * (encoder_flops(8, 16, dims) + 2 * 24 * (256 ** 2 + 256 * 21128))
    # close to the 6 x parameters x tokens rule for the layers' matrices at short lengths
    layer_params = 4 * (4 * 256 ** 2 + 2 * 256 * 1024)
    assert training_flops(pairs, dims) == pytest.approx(6 * layer_params * 8 * 16, rel=0.05)


@pytest.mark.slow
def test_gpu_run_end_to_end_on_cpu_with_tiny_sizes(tmp_path):
    from helpers import save_tiny_preset

    write_tasks(tmp_path / "data")
    save_tiny_preset(tmp_path / "preset")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    command = [sys.executable, os.path.join(REPO, "tools", "gpu_run.py"), "--output", "run", "--data-dir", "data",
               "--checkpoint", "preset", "--pretrain-steps", "10", "--pretrain-batch-size", "8",
               "--pretrain-maxlen", "32", "--pretrain-flags", "--limit-train 40", "--epochs", "1", "--batch-size", "16",
               "--maxlen", "16", "--bi-encoder-flags", "--limit-train 48 --limit-eval 48", "--warmup-steps", "1",
               "--peak-tflops", "1", "--no-progress"]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    preset = tmp_path / "run" / "preset"
    record = json.loads((preset / "gpu_run.json").read_text(encoding="utf-8"))
    assert record["precision"] == "mixed_bfloat16" and set(record["scores"]) == {"ATEC", "BQ", "LCQMC", "PAWSX",
                                                                                   "STS-B"}
    for name in ("pretraining", "bi-encoder"):
        speed = record["stages"][name]
        assert speed["steps_measured"] >= 1 and speed["steps_per_second"] > 0 and 0 < speed["mfu"] < 1
    assert "MFU" in done.stdout and "steps/s" in done.stdout
    card = (preset / "README.md").read_text(encoding="utf-8")
    assert "## Scores" in card and "PAWSX (transfer" in card and "/tmp" not in card and REPO not in card
    model = zoo.SentenceEncoder.from_preset(preset)  # a float32 model, loadable anywhere
    assert model.backbone.dtype_policy.name == "float32"
    assert model.encode(["你好"]).shape == (1, 32)
