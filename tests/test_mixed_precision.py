"""--mixed-precision: bf16 (Keras' mixed_bfloat16: bfloat16 arithmetic on float32 weights) where the machine computes
bfloat16 natively, fp16 with loss scaling on GPUs only; checked before any data is read; the kept model is saved in
float32."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

import zoo
import zoo.hardware
from zoo.presets import float32_policies


def flags(root, *extra, checkpoint=None):
    """A tiny bi-encoder run on ``root``'s task and preset (``checkpoint``: another one)."""
    return ["--tasks", "LCQMC", "--data-dir", str(root / "data"), "--checkpoint", checkpoint or str(root / "preset"),
            "--batch-size", "16", "--maxlen", "16", "--lr", "2e-3", "--no-progress", "--no-jit-compile",
            "--eval-batch-size", "64", "--seed", "3", *extra]


SHIPPED = "chinese_L-4_H-256_A-4"  # a preset shipped with zoo: the checkpoint check passes, the data is never read


def refusal(job, args, capsys):
    """The message with which ``job`` refuses ``args`` on the command line (argparse's error: exit status 2)."""
    with pytest.raises(SystemExit) as stopped:
        job.parse(args)
    assert stopped.value.code == 2
    return capsys.readouterr().err


def test_mixed_precision_is_checked_before_any_data_is_read(tmp_path, monkeypatch, capsys):
    """fp16 needs a GPU; bf16 a GPU or a CPU with bfloat16 instructions; neither goes with FGM's own train step or
    the cached one, nor fp16 with the moving average; a wrong value names the flag. The data folder does not exist:
    nothing was read."""
    job = zoo.job("train bi-encoder")

    def args(*extra):
        return flags(tmp_path, *extra, checkpoint=SHIPPED)

    monkeypatch.setattr(zoo.hardware, "accelerator", lambda: None)
    monkeypatch.setattr(zoo.hardware, "cpu_flags", lambda: {"avx2", "avx512f"})
    assert "fp16 needs a GPU" in refusal(job, args("--mixed-precision", "fp16"), capsys)
    assert "no bfloat16 instructions" in refusal(job, args("--mixed-precision", "bf16"), capsys)
    monkeypatch.setattr(zoo.hardware, "cpu_flags", lambda: {"avx512f", "amx_bf16"})
    assert job.parse(args("--mixed-precision", "bf16")).optimizer_options()["loss_scale"] is False
    assert "--mixed-precision with --adversarial-epsilon" in refusal(
        job, args("--mixed-precision", "bf16", "--adversarial-epsilon", "1"), capsys)
    assert "--cached-mini-batch-size with" in refusal(
        job, args("--mixed-precision", "bf16", "--in-batch-weight", "1", "--cached-mini-batch-size", "8"),
        capsys)
    monkeypatch.setattr(zoo.hardware, "accelerator", lambda: "GPU")
    assert job.parse(args("--mixed-precision", "fp16")).optimizer_options()["loss_scale"] is True
    assert "fp16 with --ema-momentum" in refusal(
        job, args("--mixed-precision", "fp16", "--ema-momentum", "0.99"), capsys)
    assert "--mixed-precision: invalid choice" in refusal(job, args("--mixed-precision", "int8"), capsys)


def test_a_preset_of_a_mixed_precision_model_computes_in_float32():
    """float32_policies turns every mixed dtype policy of a serialized model into float32 and leaves the rest."""
    config = {"class_name": "X", "config": {"dtype": {"module": "keras", "class_name": "DTypePolicy",
                                                      "config": {"name": "mixed_bfloat16"}},
                                            "layers": [{"dtype": "mixed_float16"}, {"dtype": "bfloat16"}]}}
    assert float32_policies(config) == {"class_name": "X", "config": {
        "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}},
        "layers": [{"dtype": "float32"}, {"dtype": "bfloat16"}]}}


@pytest.mark.slow
def test_bf16_trains_in_bfloat16_and_keeps_a_float32_model(tiny_setup, tmp_path):
    """With --mixed-precision bf16 the job trains in bfloat16 arithmetic (its weights end elsewhere than the float32
    run's of the same seed) on float32 variables, scores as the float32 run does within bf16's reach, saves a preset
    that computes in float32, and leaves Keras' global policy as it found it."""
    if not zoo.hardware.bf16_supported():
        pytest.skip("this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16): --mixed-precision bf16 is refused "
                    "here (tested above)")
    from zoo.cli import main

    for name, extra in (("fp32", ()), ("bf16", ("--mixed-precision", "bf16"))):
        assert main(["train", "bi-encoder", *flags(tiny_setup, *extra), "--output", str(tmp_path / name)]) == 0
    assert keras.config.dtype_policy().name == "float32"
    config = (tmp_path / "bf16" / "model" / "zoo_config.json").read_text(encoding="utf-8")
    assert "mixed_" not in config
    fp32, bf16 = (zoo.SentenceEncoder.from_preset(tmp_path / name / "model") for name in ("fp32", "bf16"))
    assert {layer.dtype_policy.name for layer in bf16._flatten_layers()} == {"float32"}
    assert all(w.dtype == np.float32 for w in bf16.get_weights())
    assert max(np.abs(a - b).max() for a, b in zip(fp32.get_weights(), bf16.get_weights())) > 1e-4
    results = {name: json.loads((tmp_path / name / "results.json").read_text()) for name in ("fp32", "bf16")}
    assert results["bf16"]["config"]["mixed_precision"] == "bf16"
    assert abs(results["bf16"]["valid_spearman"] - results["fp32"]["valid_spearman"]) < 5, results
