"""Every file zoo reads, damaged every way: a zoo error naming the file, or (where the damage cannot matter) the
same outputs; never a raw library exception, never different outputs without an error.

The matrix: formats (zoo preset, .keras file, Google TF1 checkpoint, transformers safetensors / pytorch_model.bin,
training state, exported SavedModel, search index) x damage (truncated, 50 flipped bytes, empty, missing, and
for JSON files a valid JSON of the wrong shape). Known limits, asserted as such: formats without a checksum
(safetensors tensor data, a third-party vocab.txt or config.json whose damage still parses) cannot reveal flipped
bytes; zoo's own formats all carry sha256 manifests.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

import zoo
from helpers import tiny_sentence_encoder
from zoo.errors import ZooError

pytestmark = pytest.mark.slow  # kills and resumes jobs, damages every file format

DAMAGES = ["truncated", "flipped", "empty", "missing", "wrong_json"]


def damage(path: Path, how: str, seed=0):
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":  # 50 bytes flipped in the middle half of the file
        rng = np.random.default_rng(seed)
        b = bytearray(data)
        lo, hi = len(b) // 4, max(len(b) // 4 + 1, 3 * len(b) // 4)
        for i in rng.choice(np.arange(lo, hi), size=min(50, hi - lo), replace=False):
            b[i] ^= 0xFF
        path.write_bytes(bytes(b))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "missing":
        path.unlink()
    elif how == "wrong_json":
        path.write_text("[1, 2, 3]", encoding="utf-8")


# --------------------------------------------------------------------------------------- the artifacts
@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """One intact copy of each format, and a probe per format: load it and return numbers to compare."""
    root = tmp_path_factory.mktemp("integrity")
    encoder = tiny_sentence_encoder(seed=5)
    texts = ["今天天气很好", "hello", "我们"]
    encoder.save_to_preset(root / "preset")
    encoder.save(str(root / "enc.keras"))
    zoo.save_google_checkpoint(encoder.backbone, root / "google", encoder.tokenizer)

    from safetensors.numpy import save_file

    from zoo.checkpoints import backbone_arrays, write_bert_config
    from zoo.paths import HF_CONFIG

    hf = root / "hf"
    hf.mkdir()
    arrays = backbone_arrays(encoder.backbone)  # Google-named; written back with transformers names
    save_file({_hf_name(k): np.ascontiguousarray(v.T if _transposed(k) else v) for k, v in arrays.items()},
              str(hf / "model.safetensors"))
    write_bert_config(encoder.backbone, str(hf / HF_CONFIG))
    shutil.copy(root / "preset" / "vocab.txt", hf / "vocab.txt")

    from zoo.models import build_pair_trainer
    from zoo.train.state import save_state

    trainer = build_pair_trainer(encoder, "cosent")
    trainer.compile(optimizer=keras.optimizers.Adam(1e-3), loss=zoo.losses.CoSENTLoss())
    trainer.optimizer.build(trainer.trainable_variables)
    save_state(root / "state", trainer, {"epoch": 0, "step": 3})

    from zoo.export.saved_model import export_saved_model

    export_saved_model(encoder, root / "export" / "1")

    from zoo.retrieval.base import SemanticIndex

    SemanticIndex(encoder).add(texts=texts * 4).save(root / "index")
    return {"root": root, "encoder": encoder, "texts": texts, "trainer": trainer, "intact": {}}


def _hf_name(google):
    return _HF_NAMES[google]


def _transposed(google):
    return google.endswith("kernel")


def _build_hf_names(num_layers=2):
    """Google name -> transformers name, by inverting zoo's own reader on the transformers names."""
    from zoo.checkpoints.mapping import hf_to_google

    names = ["bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
             "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
             "bert.embeddings.LayerNorm.bias", "bert.pooler.dense.weight", "bert.pooler.dense.bias"]
    for i in range(num_layers):
        p = f"bert.encoder.layer.{i}."
        for part in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                     "intermediate.dense", "output.dense"):
            names += [p + part + ".weight", p + part + ".bias"]
        for part in ("attention.output.LayerNorm", "output.LayerNorm"):
            names += [p + part + ".weight", p + part + ".bias"]
    out = {}
    for name in names:
        target = hf_to_google(name)
        if target is not None:
            out[target[0]] = name
    return out


_HF_NAMES = _build_hf_names()


def probe(kind, path: Path, art):
    """Load ``path`` as format ``kind``; return arrays that show whether the loaded thing behaves as saved."""
    texts = art["texts"]
    if kind in ("preset", "keras"):
        return zoo.from_preset(path).encode(texts)
    if kind in ("google", "hf"):
        backbone = zoo.BertBackbone.from_preset(path)
        tokenizer = zoo.Tokenizer.from_preset(path)
        return np.asarray(backbone(tokenizer(texts, maxlen=16))["sequence_output"])
    if kind == "state":
        from zoo.train.state import load_state

        load_state(path, art["trainer"])
        return np.concatenate([np.ravel(keras.ops.convert_to_numpy(v)) for v in art["trainer"].variables])
    if kind == "export":
        from zoo.serving.model import ServedModel

        model = ServedModel("default", 1, str(path))
        return model.signatures["serving_default"]({"text": np.array([t.encode() for t in texts], object)})[
            "embedding"]
    if kind == "index":
        from zoo.retrieval.base import SemanticIndex

        index = SemanticIndex.load(path, art["encoder"])
        scores, rows = index.search_vectors(art["encoder"].encode(texts), topk=3)
        return np.concatenate([scores.ravel(), rows.ravel(), [hash(tuple(index.texts))]])
    raise ValueError(kind)


# (format, folder or file inside root, file to damage relative to it, damages that must raise). Damage outside
# that set must raise or leave the outputs identical, except where the format has no checksum (UNDETECTABLE).
ALL = set(DAMAGES) - {"wrong_json"}
UNDETECTABLE = {("hf", "model.safetensors", "flipped")}
CASES = [
    ("preset", "preset", "model.weights.h5", ALL),
    ("preset", "preset", "vocab.txt", ALL),
    ("preset", "preset", "zoo_config.json", set(DAMAGES)),
    ("keras", "enc.keras", ".", ALL),
    ("google", "google", "bert_model.ckpt.data-00000-of-00001", ALL),
    ("google", "google", "bert_model.ckpt.index", ALL),
    ("google", "google", "bert_config.json", set(DAMAGES)),
    ("hf", "hf", "model.safetensors", ALL - {"flipped"}),  # no checksum in the format: UNDETECTABLE
    ("hf", "hf", "config.json", set(DAMAGES)),
    ("state", "state", "state.npz", ALL),
    ("state", "state", "state.json", set(DAMAGES)),
    ("export", "export/1", "saved_model.pb", ALL),
    ("export", "export/1", "variables/variables.data-00000-of-00001", ALL),
    ("export", "export/1", "zoo_manifest.json", set(DAMAGES) - {"missing"}),  # optional: exports from before it
    ("index", "index", "vectors.npy", ALL),
    ("index", "index", "texts.json", ALL),
    ("index", "index", "index.json", set(DAMAGES)),
]


MATRIX = [(how, *case) for how in DAMAGES for case in CASES if how != "wrong_json" or case[2].endswith(".json")]


@pytest.mark.parametrize("how,kind,where,name,caught", MATRIX, ids=[f"{m[0]}-{m[1]}:{m[3]}" for m in MATRIX])
def test_damaged_file_gives_a_zoo_error_naming_it(artifacts, tmp_path, kind, where, name, caught, how):
    src = artifacts["root"] / where
    work = tmp_path / where
    if src.is_dir():
        shutil.copytree(src, work)
    else:
        work.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, work)
    intact = artifacts["intact"].get(kind)
    if intact is None:  # once per format: the undamaged copy's outputs
        intact = artifacts["intact"][kind] = probe(kind, work, artifacts)
    target = work if name == "." else work / name
    damage(target, how)
    try:
        got = probe(kind, work, artifacts)
    except ZooError as e:
        assert target.name in str(e) or (how == "missing" and str(work) in str(e)), str(e)
        return
    except FileNotFoundError as e:  # a missing file named in the message is a clear error too
        assert how == "missing" and target.name in str(e), str(e)
        return
    assert how not in caught, f"{how} {target} loaded without an error"
    if (kind, name, how) not in UNDETECTABLE:
        np.testing.assert_array_equal(got, intact, err_msg=f"{how} {target}: different outputs without an error")


def test_safetensors_has_no_checksum_so_flipped_data_changes_outputs_silently(artifacts, tmp_path):
    """The documented limit: safetensors stores no checksum, so flipped tensor bytes cannot be detected by any
    reader; zoo's presets (sha256 manifest) can. Convert a downloaded checkpoint once with ``save_preset``."""
    work = tmp_path / "hf"
    shutil.copytree(artifacts["root"] / "hf", work)
    intact = probe("hf", work, artifacts)
    damage(work / "model.safetensors", "flipped")
    try:
        got = probe("hf", work, artifacts)
    except ZooError:
        return  # flips landed in the header this time: caught
    assert not np.array_equal(got, intact)


# ------------------------------------------------------------------- crafted pytorch_model.bin files
def _pickle_global_bytes(module, name):
    return f"c{module}\n{name}\n".encode()


def _write_raw_bin(path, offset, size, stride, storage_numel=6, global_module="torch._utils",
                   global_name="_rebuild_tensor_v2"):
    """Protocol-2 pickle written opcode by opcode: {'w': GLOBAL(args)} with a persistent storage id."""
    def tup(items):
        return b"(" + b"".join(items) + b"t"

    def num(v):
        return b"I" + str(v).encode() + b"\n"

    pid = tup([b"X" + len(s).to_bytes(4, "little") + s for s in (b"storage",)] +
              [_pickle_global_bytes("torch", "FloatStorage"), b"X\x01\x00\x00\x000", b"X\x03\x00\x00\x00cpu",
               num(storage_numel)])
    args = tup([pid + b"Q", num(offset), tup([num(v) for v in size]), tup([num(v) for v in stride]), b"\x89",
                b"}"])
    body = b"\x80\x02}X\x01\x00\x00\x00w" + _pickle_global_bytes(global_module, global_name) + args + b"Rs."
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", body)
        z.writestr("archive/data/0", np.arange(storage_numel, dtype="float32").tobytes())
    return path


def test_torch_zip_reader_reads_a_well_formed_crafted_file(tmp_path):
    from zoo.checkpoints.torch_zip import read_torch_zip

    state = read_torch_zip(str(_write_raw_bin(tmp_path / "ok.bin", 0, (2, 3), (3, 1))))
    np.testing.assert_array_equal(state["w"], np.arange(6, dtype="float32").reshape(2, 3))
    transposed = read_torch_zip(str(_write_raw_bin(tmp_path / "t.bin", 0, (3, 2), (1, 3))))
    np.testing.assert_array_equal(transposed["w"], np.arange(6, dtype="float32").reshape(2, 3).T)


@pytest.mark.parametrize("offset,size,stride,message", [
    (5, (2, 3), (3, 1), "past its storage"),           # offset + extent beyond the 6 elements
    (0, (2, 3), (100, 1), "past its storage"),         # a stride that jumps out of the buffer
    (0, (100000, 100000), (0, 0), "past its storage"),  # a huge declared shape on a tiny storage
    (-1, (2,), (1,), "invalid offset"),
    (0, (2, 3), (1,), "invalid offset"),               # rank of size and stride differ
])
def test_crafted_torch_file_is_refused(tmp_path, offset, size, stride, message):
    from zoo.checkpoints.torch_zip import read_torch_zip
    from zoo.errors import CheckpointError

    path = _write_raw_bin(tmp_path / "bad.bin", offset, size, stride)
    with pytest.raises(CheckpointError, match=message):
        read_torch_zip(str(path))


def test_torch_file_with_an_unknown_global_is_refused(tmp_path):
    from zoo.checkpoints.torch_zip import read_torch_zip
    from zoo.errors import CheckpointError

    path = _write_raw_bin(tmp_path / "evil.bin", 0, (2,), (1,), global_module="os", global_name="system")
    with pytest.raises(CheckpointError, match="unsupported object os.system"):
        read_torch_zip(str(path))
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(CheckpointError, match="junk.bin"):
        read_torch_zip(str(junk))


# ------------------------------------------------------------------------------- SIGKILL while saving
SAVER = r"""
import sys, zoo
sys.path.insert(0, sys.argv[2])
from helpers import tiny_sentence_encoder
from zoo.retrieval import SemanticIndex
models = [tiny_sentence_encoder(seed=s) for s in (11, 12)]
texts = ["今天天气很好", "hello", "我们"]
target = sys.argv[1]
i = 0
while True:  # overwrite the same preset and index with model 11, 12, 11, ... until killed
    model = models[i % 2]
    model.save_to_preset(target + "/preset")
    SemanticIndex(model).add(texts=texts * 50).save(target + "/index")
    if i == 1:
        print("ready", file=sys.stderr, flush=True)
    i += 1
"""


def test_sigkill_while_saving_never_leaves_a_half_written_preset_or_index(tmp_path):
    """A process overwrites a preset and a search index in a loop; SIGKILL at 3 random moments. After each kill
    the preset and the index load (the old or the new version, whole) and give one of the two models' outputs."""
    import time

    import forked
    from zoo.retrieval.base import SemanticIndex

    texts = ["今天天气很好", "hello", "我们"]
    expected = [tiny_sentence_encoder(seed=s).encode(texts) for s in (11, 12)]
    tests_dir = str(Path(__file__).resolve().parent)
    (tmp_path / "saver.py").write_text(SAVER, encoding="utf-8")
    log = tmp_path / "saver.log"
    rng = np.random.default_rng(1)
    for _ in range(3):
        # a process forked from one that has imported zoo (tests/forked.py), so no 12 s import each time
        proc = forked.start(tmp_path / "saver.py", [tmp_path, tests_dir], log)
        while proc.exitcode is None and "ready" not in log.read_text():
            time.sleep(0.05)
        assert proc.exitcode is None, log.read_text()[-2000:]
        time.sleep(rng.uniform(0, 1.5))
        proc.kill()  # SIGKILL
        proc.join()
        got = zoo.from_preset(tmp_path / "preset").encode(texts)
        assert any(np.allclose(got, e, atol=1e-6) for e in expected)
        index = SemanticIndex.load(zoo.paths.resolve(str(tmp_path / "index")))
        assert len(index) == 150 and any(np.allclose(index.vectors[:3], e, atol=1e-6) for e in expected)


def test_a_kill_between_the_two_renames_of_replace_dir_loses_nothing(tmp_path):
    """The one window of ``replace_dir``: the old folder renamed away, the new one not yet in place. ``resolve``
    then finds the old copy, and the next save puts it back before replacing it (it is never deleted first)."""
    from zoo.paths import replace_dir, resolve

    target = tmp_path / "preset"
    tiny_sentence_encoder(seed=21).save_to_preset(target)
    (tmp_path / "preset").rename(tmp_path / "preset.old")  # killed right after the first rename
    assert resolve(str(target)) == str(target) + ".old"
    zoo.from_preset(target)  # still loads, from the old copy
    tmp = tmp_path / "half"
    tmp.mkdir()
    (tmp / "garbage").write_text("x")
    # a later save: the old copy comes back first, then the new folder replaces it whole
    real_rename = os.rename
    calls = []

    def rename(a, b):
        calls.append((os.path.basename(a), os.path.basename(b)))
        real_rename(a, b)

    os.rename = rename
    try:
        replace_dir(str(tmp), str(target))
    finally:
        os.rename = real_rename
    assert calls[0] == ("preset.old", "preset"), calls
    assert (target / "garbage").exists() and not (tmp_path / "preset.old").exists()


def test_a_full_disk_during_a_checkpoint_write_keeps_the_previous_checkpoint(artifacts, tmp_path, monkeypatch):
    """ENOSPC while the training state is written: a CheckpointError naming the folder, no temporary folder left,
    and the previous state still loads as it was."""
    import errno

    from zoo.errors import CheckpointError
    from zoo.train.state import load_state, save_state

    trainer = artifacts["trainer"]
    folder = tmp_path / "checkpoint"
    save_state(folder, trainer, {"epoch": 1, "step": 7})
    before = (folder / "state.npz").read_bytes()

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez", full_disk)
    with pytest.raises(CheckpointError, match=r"checkpoint: could not write the training state \(No space left"):
        save_state(folder, trainer, {"epoch": 2, "step": 0})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert (folder / "state.npz").read_bytes() == before
    assert load_state(folder, trainer) == {"epoch": 1, "step": 7}
