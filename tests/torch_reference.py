"""PyTorch + transformers reference outputs, computed in a subprocess.

The test workers run TensorFlow (and ONNX Runtime, faiss, grpc); they never import torch, so that one process never
holds two deep-learning runtimes (tests/conftest.py fails a test that imports torch). What the tests compare with
transformers is computed here, in a fresh interpreter, and comes back as numpy arrays:

    run("build", config={...}, model="BertForPreTraining", seed=0, scale=0.05, save={"hf": folder}, batch=batch)

Each operation takes JSON-able keyword arguments plus arrays (``batch``, ``state``) and returns a dict of arrays;
an assertion that fails here fails the calling test with this process's traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ARRAY_ARGUMENTS = ("batch", "state")


# ------------------------------------------------------------------------------------------------ the caller's side
def run(op, timeout=600, **kwargs):
    """Run operation ``op`` in a subprocess; returns its arrays (``{name: ndarray}``). Skips the test (fails it
    under CI=true) when torch or transformers is not installed."""
    from helpers import require_installed

    require_installed("torch", "transformers", install="pip install torch transformers")
    with tempfile.TemporaryDirectory(prefix="torch_reference_") as tmp:
        for name in ARRAY_ARGUMENTS:
            if kwargs.get(name) is not None:
                np.savez(os.path.join(tmp, f"{name}.npz"), **{k: np.asarray(v) for k, v in kwargs.pop(name).items()})
        with open(os.path.join(tmp, "args.json"), "w", encoding="utf-8") as f:
            json.dump({k: str(v) if isinstance(v, os.PathLike) else v for k, v in kwargs.items()}, f,
                      default=str)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        done = subprocess.run([sys.executable, os.path.abspath(__file__), op, tmp], capture_output=True, text=True,
                              timeout=timeout, env=env)
        assert done.returncode == 0, f"torch reference {op!r} failed:\n{done.stderr[-4000:]}"
        with np.load(os.path.join(tmp, "out.npz")) as out:
            return {k: out[k] for k in out.files}


# ------------------------------------------------------------------------------------------------ the subprocess
TINY_VARIANTS = ("BertModel", "BertForMaskedLM", "pytorch_model.bin")


def _randomize(model, seed, scale):
    """Perturb every parameter (biases and LayerNorm start at 0/1, which would hide mapping mistakes)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model.eval()


def _outputs(model, batch, prefix=""):
    """sequence_output, pooled_output, mlm_logits (with an MLM head), hidden_state_I and linear_pooled (the pooler's
    dense layer without tanh) of a transformers BERT on ``batch``."""
    import torch

    with torch.no_grad():
        ids, seg, mask = (torch.as_tensor(np.asarray(batch[k]), dtype=torch.long)
                          for k in ("token_ids", "segment_ids", "padding_mask"))
        bert = model.bert if hasattr(model, "bert") else model
        out = bert(input_ids=ids, token_type_ids=seg, attention_mask=mask, output_hidden_states=True)
        result = {"sequence_output": out.last_hidden_state.numpy()}
        for i, h in enumerate(out.hidden_states):
            result[f"hidden_state_{i}"] = h.numpy()
        if getattr(out, "pooler_output", None) is not None:
            result["pooled_output"] = out.pooler_output.numpy()
            result["linear_pooled"] = bert.pooler.dense(out.last_hidden_state[:, 0]).numpy()
        if hasattr(model, "cls"):
            head = model.cls.predictions if hasattr(model.cls, "predictions") else model.cls
            result["mlm_logits"] = head(out.last_hidden_state).numpy()
    return {prefix + k: v for k, v in result.items()}


def _save_variant(model, name, folder):
    """The tiny BertForPreTraining written as another transformers layout."""
    import torch
    import transformers

    os.makedirs(folder, exist_ok=True)
    if name == "pytorch_model.bin":
        model.config.to_json_file(os.path.join(folder, "config.json"))
        torch.save(model.state_dict(), os.path.join(folder, "pytorch_model.bin"))  # tied decoder.* included
        return
    m = getattr(transformers, name)(model.config).eval()
    if name == "BertModel":
        m.load_state_dict(model.bert.state_dict())
    else:  # BertForMaskedLM: no pooler, no NSP head
        state = {k: v for k, v in model.state_dict().items()
                 if not k.startswith(("bert.pooler.", "cls.seq_relationship."))}
        missing, unexpected = m.load_state_dict(state, strict=False)
        assert not missing and not unexpected, (missing, unexpected)
    m.save_pretrained(folder)


def op_build(args, batch=None, state=None):
    """A transformers BERT (``model``: a transformers class name) from ``config``: random (torch seed ``seed``, then
    every parameter perturbed by ``scale``), or holding ``state`` (transformers names; the tied MLM decoder may be
    missing). Saved with save_pretrained to ``save["hf"]``, and as each layout of ``save["variants"]``
    ({name: folder}); ``gelu_new`` (a folder): the same weights with the tanh GELU, saved there. Returns its
    ``state/NAME`` arrays and its outputs on ``batch`` (``tanh/...`` for the gelu_new copy)."""
    import torch
    import transformers

    torch.manual_seed(args.get("seed", 0))
    cls = getattr(transformers, args.get("model", "BertForPreTraining"))
    model = cls(transformers.BertConfig(**args["config"]))
    if state is not None:
        model.eval()
        missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
        assert not unexpected and set(missing) <= {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}, (
            missing, unexpected)
        if hasattr(model, "cls"):
            head = model.cls.predictions
            assert head.decoder.weight is model.bert.embeddings.word_embeddings.weight and head.decoder.bias is head.bias
    else:
        _randomize(model, args.get("seed", 0), args.get("scale", 0.05))
    save = args.get("save") or {}
    if save.get("hf"):
        model.save_pretrained(save["hf"])
    for name, folder in (save.get("variants") or {}).items():
        _save_variant(model, name, folder)
    out = {f"state/{k}": v.detach().numpy() for k, v in model.state_dict().items()}
    if batch is not None:
        out.update(_outputs(model, batch))
    if args.get("gelu_new"):
        model.config.hidden_act = "gelu_new"
        tanh = cls(model.config).eval()
        tanh.load_state_dict(model.state_dict())
        tanh.save_pretrained(args["gelu_new"])
        if batch is not None:
            out.update(_outputs(tanh, batch, prefix="tanh/"))
    return out


def op_from_pretrained(args, batch=None, state=None):
    """Outputs on ``batch`` of ``model`` (a transformers class name) loaded from the folder ``folder``."""
    import transformers

    model = getattr(transformers, args.get("model", "BertModel")).from_pretrained(args["folder"]).eval()
    return _outputs(model, batch)


def op_torch_load(args, batch=None, state=None):
    """``torch.load`` of ``path`` (weights only) as numpy arrays."""
    import torch

    return {k: v.numpy() for k, v in torch.load(args["path"], map_location="cpu", weights_only=True).items()}


def op_save_views(args, batch=None, state=None):
    """``torch.save`` to ``path`` of tensors that are views (strides, storage offsets) and of other dtypes; returns
    their values (bfloat16 widened to float32, as zoo reads it)."""
    import torch

    g = torch.Generator().manual_seed(0)
    big = torch.randn(6, 5, generator=g)
    tensors = {"transposed": big.t(), "rows": big[2:4], "column": big[:, 3], "every_other": big[::2, 1:],
               "int64": torch.arange(7), "int32": torch.arange(5, dtype=torch.int32) * 3,
               "half": torch.randn(3, 4, generator=g).half(), "double": torch.randn(2, 2, generator=g).double(),
               "bool": torch.tensor([True, False, True]), "scalar": torch.tensor(2.5),
               "bfloat16": torch.randn(2, 3, generator=g).bfloat16()}
    torch.save(tensors, args["path"])
    return {k: v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy() for k, v in tensors.items()}


def op_build_family(args, batch=None, state=None):
    """A random transformers model of another family (``model``: e.g. "AlbertForPreTraining", ``config_class``:
    e.g. "AlbertConfig", ``config``), every parameter perturbed by ``scale``, saved with save_pretrained to
    ``folder`` (and with torch.save as ``bin_folder``/pytorch_model.bin). Returns its ``state/NAME`` arrays and, on ``batch``: sequence_output, hidden_state_I, pooled_output
    (where the family has a pooler) and mlm_logits (where the model has an MLM head)."""
    import torch
    import transformers

    torch.manual_seed(args.get("seed", 0))
    config = getattr(transformers, args["config_class"])(**args["config"])
    model = getattr(transformers, args["model"])(config)
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    model = _randomize(model, args.get("seed", 0), args.get("scale", 0.05))
    with torch.no_grad():  # fixed tables (RoFormer's sinusoids) stay as the model computes them
        for name, p in model.named_parameters():
            if name in frozen:
                p.copy_(frozen[name])
    model.save_pretrained(args["folder"])
    if args.get("bin_folder"):  # the same weights as a pytorch_model.bin folder (tied copies included)
        os.makedirs(args["bin_folder"], exist_ok=True)
        model.config.to_json_file(os.path.join(args["bin_folder"], "config.json"))
        torch.save(model.state_dict(), os.path.join(args["bin_folder"], "pytorch_model.bin"))
    out = {f"state/{k}": v.detach().numpy() for k, v in model.state_dict().items()}
    with torch.no_grad():
        ids, seg, mask = (torch.as_tensor(np.asarray(batch[k]), dtype=torch.long)
                          for k in ("token_ids", "segment_ids", "padding_mask"))
        result = model.base_model(input_ids=ids, token_type_ids=seg, attention_mask=mask, output_hidden_states=True)
        hidden = result.last_hidden_state
        out["sequence_output"] = hidden.numpy()
        for i, h in enumerate(result.hidden_states):
            out[f"hidden_state_{i}"] = h.numpy()
        if getattr(result, "pooler_output", None) is not None:
            out["pooled_output"] = result.pooler_output.numpy()
        if hasattr(model, "cls"):  # BERT-style MLM head (RoFormer, ERNIE)
            head = model.cls.predictions if hasattr(model.cls, "predictions") else model.cls
            out["mlm_logits"] = head(hidden).numpy()
        elif hasattr(model, "predictions"):  # ALBERT
            out["mlm_logits"] = model.predictions(hidden).numpy()
        elif hasattr(model, "generator_predictions"):  # an ELECTRA generator
            out["mlm_logits"] = model.generator_lm_head(model.generator_predictions(hidden)).numpy()
    return out


def op_st_folder(args, batch=None, state=None):
    """sentence-transformers folders around one random tiny BERT (``config``, ``seed``, ``scale``; vocabulary
    ``vocab``, a vocab.txt), written by sentence-transformers' own classes and ``SentenceTransformer.save``, one per
    entry of ``folders``: {``name``, ``folder``, ``pooling_mode`` (a mode or a list), ``dense`` (a list of
    {``out``, ``activation``: a torch.nn class name, ``bias``}), ``normalize``, ``max_seq_length``, ``legacy``: the
    layout of older sentence-transformers releases (the Transformer in ``0_Transformer/`` with max_seq_length and
    do_lower_case in its sentence_bert_config.json, ``sentence_transformers.models.*`` module types, the
    ``pooling_mode_*`` flags, Dense weights in pytorch_model.bin)}. Each folder is loaded back with ``SentenceTransformer(folder)``; returns, per name,
    its ``encode(texts, convert_to_numpy=True)``."""
    import shutil
    import warnings

    import torch
    import transformers

    warnings.simplefilter("ignore")
    from sentence_transformers import SentenceTransformer, models

    torch.manual_seed(args.get("seed", 0))
    base = os.path.join(os.path.dirname(args["folders"][0]["folder"]), "st_base_bert")
    model = _randomize(transformers.BertModel(transformers.BertConfig(**args["config"])), args.get("seed", 0),
                       args.get("scale", 0.05))
    model.save_pretrained(base)
    shutil.copy(args["vocab"], os.path.join(base, "vocab.txt"))
    transformers.BertTokenizer(os.path.join(base, "vocab.txt"), do_lower_case=True).save_pretrained(base)
    out = {}
    for spec in args["folders"]:
        folder = spec["folder"]
        transformer = models.Transformer(base, max_seq_length=spec["max_seq_length"])
        width = transformer.get_embedding_dimension()
        modules = [transformer, models.Pooling(width, pooling_mode=spec["pooling_mode"])]
        width = modules[-1].get_embedding_dimension()
        for dense in spec.get("dense", ()):
            modules.append(models.Dense(width, dense["out"], bias=dense.get("bias", True),
                                        activation_function=getattr(torch.nn, dense["activation"])()))
            with torch.no_grad():  # a fresh layer's bias is near 0: perturb every weight
                for p in modules[-1].parameters():
                    p.add_(torch.randn(p.shape) * 0.1)
            width = dense["out"]
        if spec.get("normalize"):
            modules.append(models.Normalize())
        SentenceTransformer(modules=modules, device="cpu").save(folder)
        shutil.copy(args["vocab"], os.path.join(folder, "vocab.txt"))  # as the bge / text2vec / m3e folders have
        if spec.get("legacy"):
            _legacy_layout(folder, spec)
        loaded = SentenceTransformer(folder, device="cpu")
        out[spec["name"]] = loaded.encode(args["texts"], convert_to_numpy=True, batch_size=4)
    return out


def _legacy_layout(folder, spec):
    """Rewrite a folder saved by sentence-transformers 5+ as older releases wrote it (bge-*-zh, text2vec, m3e)."""
    inner = os.path.join(folder, "0_Transformer")
    os.makedirs(inner)
    with open(os.path.join(folder, "modules.json"), encoding="utf-8") as f:
        modules = json.load(f)
    kept = {m["path"] for m in modules if m["path"]} | {"modules.json", "README.md", "0_Transformer",
                                                         "config_sentence_transformers.json"}
    for name in os.listdir(folder):
        if name not in kept:
            os.rename(os.path.join(folder, name), os.path.join(inner, name))
    for m in modules:
        m["type"] = "sentence_transformers.models." + m["type"].rsplit(".", 1)[-1]
        m["path"] = m["path"] or "0_Transformer"
        weights = os.path.join(folder, m["path"], "model.safetensors")
        if m["type"].endswith(".Dense") and os.path.exists(weights):  # older releases wrote pytorch_model.bin
            import torch
            from safetensors.torch import load_file

            torch.save(load_file(weights), os.path.join(folder, m["path"], "pytorch_model.bin"))
            os.remove(weights)
    with open(os.path.join(folder, "modules.json"), "w", encoding="utf-8") as f:
        json.dump(modules, f)
    with open(os.path.join(inner, "sentence_bert_config.json"), "w", encoding="utf-8") as f:
        json.dump({"max_seq_length": spec["max_seq_length"], "do_lower_case": False}, f)
    config_path = os.path.join(inner, "tokenizer_config.json")
    with open(config_path, encoding="utf-8") as f:
        tokenizer_config = json.load(f)
    tokenizer_config["model_max_length"] = 512  # what bge's says; sentence_bert_config.json's length wins
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(tokenizer_config, f)
    pooling_path = os.path.join(folder, "1_Pooling", "config.json")
    with open(pooling_path, encoding="utf-8") as f:
        pooling = json.load(f)
    modes = pooling["pooling_mode"]
    modes = [modes] if isinstance(modes, str) else modes
    flags = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens", "mean": "pooling_mode_mean_tokens",
             "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
             "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}
    legacy = {"word_embedding_dimension": pooling["embedding_dimension"]}
    legacy.update({flag: mode in modes for mode, flag in flags.items()})
    with open(pooling_path, "w", encoding="utf-8") as f:
        json.dump(legacy, f)


def op_st_quantize(args, batch=None, state=None):
    """sentence-transformers' ``quantize_embeddings`` of ``batch["embeddings"]`` at each of ``args["precisions"]``,
    over ``state["ranges"]`` where given."""
    from sentence_transformers.util.quantization import quantize_embeddings

    ranges = (state or {}).get("ranges")
    return {p: quantize_embeddings(batch["embeddings"], precision=p, ranges=ranges) for p in args["precisions"]}


def op_st_encode(args, batch=None, state=None):
    """``SentenceTransformer(folder).encode(texts, **options)`` for each options dict of ``args["calls"]``."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(args["folder"], device="cpu")
    return {str(i): model.encode(args["texts"], **options) for i, options in enumerate(args["calls"])}


def op_st_paraphrases(args, batch=None, state=None):
    """sentence-transformers' ``paraphrase_mining_embeddings`` (``args["mining"]``: a list of keyword dicts) and
    ``community_detection`` (``args["communities"]``) of ``batch["embeddings"]``: pairs as [score, i, j] rows
    (``pairs{n}``); communities as their members in a row and their lengths (``members{n}``, ``lengths{n}``)."""
    import torch
    from sentence_transformers.util import community_detection, paraphrase_mining_embeddings

    embeddings, out = torch.tensor(batch["embeddings"]), {}
    for n, options in enumerate(args["mining"]):
        out[f"pairs{n}"] = np.array(paraphrase_mining_embeddings(embeddings, **options), "float64").reshape(-1, 3)
    for n, options in enumerate(args["communities"]):
        communities = community_detection(embeddings, **options)
        out[f"members{n}"] = np.array([m for c in communities for m in c], dtype="int64")
        out[f"lengths{n}"] = np.array([len(c) for c in communities], dtype="int64")
    return out


OPS = {"build": op_build, "from_pretrained": op_from_pretrained, "torch_load": op_torch_load,
       "save_views": op_save_views, "build_family": op_build_family,
       "st_folder": op_st_folder, "st_quantize": op_st_quantize, "st_encode": op_st_encode,
       "st_paraphrases": op_st_paraphrases}


def main(op, folder):
    with open(os.path.join(folder, "args.json"), encoding="utf-8") as f:
        args = json.load(f)
    arrays = {}
    for name in ARRAY_ARGUMENTS:
        path = os.path.join(folder, f"{name}.npz")
        if os.path.exists(path):
            with np.load(path) as npz:
                arrays[name] = {k: npz[k] for k in npz.files}
    out = OPS[op](args, **arrays)
    np.savez(os.path.join(folder, "out.npz"), **out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
