"""Autoregressive decoding for UniLM (seq2seq-masked) BERT models: greedy, beam search, random sampling.

The source ``[CLS] text [SEP]`` (segment 0) is encoded once; generated tokens (segment 1) attend to it and to
earlier generated tokens, exactly what the UniLM mask allows. With ``use_cache=True`` each layer's keys and
values are kept in fixed-size buffers, so a new token costs one position (compiled once per batch shape); with
``use_cache=False`` every step re-runs the whole sequence through the model, as bert4keras does. Both give the
same distributions. The search logic follows bert4keras' ``AutoRegressiveDecoder`` (methods.md §8.2).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from .backbones.bert import backbone_inputs
from .backbones.masks import unilm_mask
from .backbones.rotary import RotaryAttention


def _compiled(fn):
    """jit a pure keras.ops function on the current backend (eager on torch)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True, reduce_retracing=False)
    if backend == "jax":
        import jax

        return jax.jit(fn)
    return fn


class CachedUniLM:
    """Incremental UniLM decoding over a zoo BertBackbone (with its MLM head): fixed-size key/value buffers."""

    def __init__(self, backbone, max_length):
        if not backbone.with_mlm:
            raise ValueError("generation needs a backbone with its MLM head (load_backbone(..., with_mlm=True))")
        self.bb, self.max_length = backbone, max_length
        self.layers = backbone.transformer_layers
        self.heads = backbone.num_heads
        self.head_dim = backbone.hidden_dim // backbone.num_heads
        self._step = _compiled(self._step_fn)
        self._prefill = _compiled(self._prefill_fn)

    def _embed(self, token_ids, positions, segment):
        """The backbone's embedding block (``zoo.backbones.bert.embed``) at explicit ``positions`` and one segment."""
        layer = self.bb._layer_or_none
        x = layer("token_embedding")(token_ids)
        if layer("position_embedding") is not None:
            x = x + ops.take(layer("position_embedding").position_embeddings, positions, axis=0)
        x = x + layer("segment_embedding").embeddings[segment]
        if layer("task_type_embedding") is not None:
            x = x + layer("task_type_embedding").embeddings[0]
        x = layer("embeddings_layer_norm")(x)
        return layer("embeddings_projection")(x) if layer("embeddings_projection") is not None else x

    def _keys_values(self, mha, x, positions):
        """Keys and values of new positions ``x`` (rotated to ``positions`` on a rotary backbone)."""
        k, v = mha.key_dense(x), mha.value_dense(x)
        if isinstance(mha, RotaryAttention):
            k = mha.rotate(k, positions)
            v = mha.rotate(v, positions) if mha.rotary_value else v
        return k, v

    def _layer(self, layer, x, keys, values, mask, positions):
        """One post-LN transformer layer for new positions ``x`` attending to ``keys``/``values`` under ``mask``."""
        mha = layer._self_attention_layer
        q = mha.query_dense(x)
        if isinstance(mha, RotaryAttention):  # keys are rotated already: attend without rotating again
            q = mha.rotate(q, positions)
        out, _ = keras.layers.MultiHeadAttention._compute_attention(mha, q, keys, values, attention_mask=mask,
                                                                    training=False)
        x = layer._self_attention_layer_norm(x + mha.output_dense(out))
        ffn = layer._feedforward_output_dense(layer._feedforward_intermediate_dense(x))
        return layer._feedforward_layer_norm(x + ffn)

    def _logits(self, x):
        bb = self.bb
        h = bb.get_layer("mlm_layer_norm")(bb.get_layer("mlm_transform")(x))
        return bb.get_layer("mlm_bias")(bb.get_layer("token_embedding")(h, reverse=True))

    def _prefill_fn(self, token_ids, length):
        """Encode sources [R, S] (right-padded; ``length`` real tokens, S a multiple of 8 so few shapes compile).

        Returns next-token log-probs at the last real source position [R, V] and the K/V buffers
        [layers, R, max_length, heads, head_dim].
        """
        rows, padded = ops.shape(token_ids)
        positions = ops.arange(padded)
        x = self._embed(token_ids, ops.broadcast_to(positions[None], (rows, padded)), 0)
        real = ops.arange(padded) < length
        mask = ops.broadcast_to(real[None, None, :], (rows, padded, padded))
        keys, values = [], []
        pad = [[0, 0], [0, self.max_length - padded], [0, 0], [0, 0]]
        for layer in self.layers:
            k, v = self._keys_values(layer._self_attention_layer, x, positions)
            keys.append(ops.pad(k, pad))
            values.append(ops.pad(v, pad))
            x = self._layer(layer, x, k, v, mask, positions)
        last = ops.take(x, ops.reshape(length - 1, (1,)), axis=1)
        logits = ops.cast(self._logits(last)[:, 0], "float32")
        return ops.log_softmax(logits, axis=-1), ops.stack(keys), ops.stack(values)

    def _step_fn(self, token_ids, positions, slot, key_mask, keys, values):
        """Append one token per row at buffer index ``slot``; returns (log-probs [R, V], keys, values).

        ``positions`` [R]: the token's position id; ``key_mask`` [R, max_length]: the buffer slots it may see.
        """
        x = self._embed(token_ids[:, None], positions[:, None], 1)
        mask = ops.cast(key_mask[:, None, :], "bool")
        new_keys, new_values = [], []
        for i, layer in enumerate(self.layers):
            new_k, new_v = self._keys_values(layer._self_attention_layer, x, positions[:, None])
            k = ops.slice_update(keys[i], (0, slot, 0, 0), new_k)
            v = ops.slice_update(values[i], (0, slot, 0, 0), new_v)
            new_keys.append(k)
            new_values.append(v)
            x = self._layer(layer, x, k, v, mask, positions[:, None])
        logits = ops.cast(self._logits(x)[:, 0], "float32")
        return ops.log_softmax(logits, axis=-1), ops.stack(new_keys), ops.stack(new_values)


class Seq2SeqDecoder:
    """Decode from a UniLM model: ``greedy``, ``beam_search``, ``random_sample`` (bert4keras semantics).

    ``end_id`` is [SEP]; ``maxlen`` is the most tokens generated; results include the end token. Sources longer
    than ``max_source_len`` tokens are truncated. The number of rows is fixed during a search (finished beams
    and samples are masked, not dropped), so the cached step compiles once.

    :param backbone: a ``BertBackbone`` with its MLM head (SimBERT's: ``SimBERT.decoder`` builds this).
    :param tokenizer: its ``zoo.Tokenizer``.
    :param maxlen: the most tokens generated.
    :param minlen: the fewest tokens generated before a result is returned.
    :param use_cache: keep the attention keys and values of decoded tokens (faster, same output).
    :param max_source_len: the most source tokens.
    """

    def __init__(self, backbone, tokenizer, maxlen=32, minlen=1, use_cache=True, max_source_len=64):
        self.bb, self.tokenizer = backbone, tokenizer
        self.maxlen, self.minlen, self.use_cache = maxlen, minlen, use_cache
        self.max_source_len = max_source_len
        self.end_id = tokenizer.sep_id
        self.cache = CachedUniLM(backbone, max_source_len + maxlen) if use_cache else None
        self._full = None

    # -------------------------------------------------------------- the model, two ways
    def _start(self, text, rows):
        ids, _ = self.tokenizer.encode(text, maxlen=self.max_source_len)
        return {"source": np.array([ids] * rows, dtype="int32"), "generated": np.zeros((rows, 0), "int32")}

    def _logprobs(self, state):
        """Next-token log-probs [R, V] for every row, given ``state["generated"]``."""
        source, generated = state["source"], state["generated"]
        if not self.use_cache:
            return self._full_logprobs(source, generated)
        rows, length = source.shape
        padded = min(-(-length // 8) * 8, self.max_source_len)
        if generated.shape[1] == 0:
            ids = np.zeros((rows, padded), "int32")
            ids[:, :length] = source
            logp, state["keys"], state["values"] = self.cache._prefill(ids, np.int32(length))
            return np.asarray(logp)
        t = generated.shape[1]
        slot = padded + t - 1  # buffer index of the newest token; its position id is length + t - 1
        key_mask = np.zeros((rows, self.cache.max_length), "int32")
        key_mask[:, :length] = 1
        key_mask[:, padded: slot + 1] = 1
        logp, state["keys"], state["values"] = self.cache._step(
            generated[:, -1], np.full((rows,), length + t - 1, "int32"), np.int32(slot), key_mask,
            state["keys"], state["values"])
        return np.asarray(logp)

    def _full_logprobs(self, source, generated):
        if self._full is None:
            self._full = _uncached_model(self.bb)
        tokens = np.concatenate([source, generated], axis=1)
        segments = np.concatenate([np.zeros_like(source), np.ones_like(generated)], axis=1)
        batch = {"token_ids": tokens, "segment_ids": segments, "padding_mask": np.ones_like(tokens)}
        logits = np.asarray(self._full.predict_on_batch(batch), dtype="float32")[:, -1]
        return _log_softmax(logits)

    def _reorder(self, state, rows):
        state["generated"] = state["generated"][rows]
        if self.use_cache and "keys" in state:
            state["keys"] = ops.take(state["keys"], rows, axis=1)
            state["values"] = ops.take(state["values"], rows, axis=1)

    def _check_text(self, text):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"decoding needs a non-empty source text, got {text!r}")

    # -------------------------------------------------------------- searches
    def greedy(self, text):
        """The most probable token at every step.

        :param text: the source text.
        """
        return self.beam_search(text, topk=1)

    def beam_search(self, text, topk=4, min_ends=1):
        """bert4keras beam search: cumulative log-prob, no length penalty; returns the best id list.

        :param text: the source text.
        :param topk: beams.
        :param min_ends: [SEP] tokens that end a beam (bert4keras' ``min_ends``).
        """
        self._check_text(text)
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        state = self._start(text, topk)
        scores = np.full(topk, -np.inf)
        scores[0] = 0.0  # one live beam to start with, as bert4keras
        alive = topk
        for _ in range(self.maxlen):
            logp = self._logprobs(state)
            flat = (scores[:, None] + logp).ravel()
            best = np.argsort(-flat, kind="stable")[:alive]
            rows, tokens = np.divmod(best, logp.shape[1])
            rows = np.concatenate([rows, np.zeros(topk - alive, int)])  # dead rows: copies of row 0
            tokens = np.concatenate([tokens, np.zeros(topk - alive, int)])
            self._reorder(state, rows)
            state["generated"] = np.concatenate([state["generated"], tokens[:, None].astype("int32")], axis=1)
            scores = np.concatenate([flat[best], np.full(topk - alive, -np.inf)])
            ends = (state["generated"] == self.end_id).sum(1)
            if state["generated"].shape[1] >= self.minlen:
                b = int(np.argmax(scores))
                if ends[b] >= min_ends:
                    return state["generated"][b].tolist()
                finished = (ends >= min_ends) & np.isfinite(scores)
                if finished.any():  # drop finished beams, search on with fewer
                    scores = np.where(finished, -np.inf, scores)
                    order = np.argsort(-scores, kind="stable")
                    self._reorder(state, order)
                    scores = scores[order]
                    alive = int(np.isfinite(scores).sum())
        return state["generated"][int(np.argmax(scores))].tolist()

    def random_sample(self, text, n, topk=None, topp=None, temperature=1.0, min_ends=1, seed=None):
        """``n`` sampled continuations (top-k, then top-p, then sample); returns a list of ``n`` id lists.

        :param text: the source text.
        :param n: samples.
        :param topk: sample among the ``topk`` likeliest tokens (None: no such cut).
        :param topp: sample within the smallest set of tokens whose probability reaches ``topp`` (None: no cut).
        :param temperature: divides the logits before sampling.
        :param min_ends: [SEP] tokens that end a sample (bert4keras' ``min_ends``).
        :param seed: the sampling seed (None: random).
        """
        self._check_text(text)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if topk is not None and topk < 1:
            raise ValueError(f"topk must be >= 1 or None, got {topk}")
        if topp is not None and not 0 < topp <= 1:
            raise ValueError(f"topp must be in (0, 1], got {topp}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        rng = np.random.default_rng(seed)
        state = self._start(text, n)
        finished_at = np.full(n, -1)
        for step in range(self.maxlen):
            tokens = sample_tokens(_softmax(self._logprobs(state) / temperature), topk, topp, rng)
            state["generated"] = np.concatenate([state["generated"], tokens[:, None]], axis=1)
            if step + 1 >= self.minlen:
                ends = (state["generated"] == self.end_id).sum(1)
                finished_at = np.where((finished_at < 0) & (ends >= min_ends), step + 1, finished_at)
                if (finished_at >= 0).all():
                    break
        return [g[: f if f >= 0 else len(g)].tolist() for g, f in zip(state["generated"], finished_at)]


def sample_tokens(p, topk, topp, rng):
    """One token per row of probabilities ``p`` [R, V]: keep the ``topk`` largest (renormalise), then the smallest
    prefix (by probability) whose mass reaches ``topp`` (the crossing token kept), then sample.

    Only the top candidates are sorted (a partial partition, widened until it holds the top-p mass), so a step
    costs O(V) instead of a full O(V log V) sort of every row.
    """
    rows, vocab = p.shape
    if topk is None and topp is None:
        cdf = np.cumsum(p, 1)
        draws = rng.random((rows, 1)) * cdf[:, -1:]
        return np.minimum((cdf < draws).sum(1), vocab - 1).astype("int32")
    k = min(topk or 64, vocab)
    while True:
        idx = np.argpartition(-p, k - 1, axis=1)[:, :k]
        vals = np.take_along_axis(p, idx, 1)
        order = np.argsort(-vals, axis=1, kind="stable")
        idx, vals = np.take_along_axis(idx, order, 1), np.take_along_axis(vals, order, 1)
        if topk is not None:
            vals = vals / vals.sum(1, keepdims=True)
        if topp is None or topk is not None or k == vocab or (vals.sum(1) >= topp).all():
            break
        k = min(4 * k, vocab)
    if topp is not None:
        vals = np.where(np.cumsum(vals, 1) - vals < topp, vals, 0.0)
    cdf = np.cumsum(vals, 1)
    draws = rng.random((rows, 1)) * cdf[:, -1:]
    choice = np.minimum((cdf < draws).sum(1), k - 1)
    return idx[np.arange(rows), choice].astype("int32")


def _uncached_model(backbone):
    """The backbone with a UniLM mask from segment ids, returning MLM logits (the no-cache reference path)."""
    inputs = backbone_inputs()
    out = backbone({**inputs, "attention_mask": unilm_mask(inputs["segment_ids"])})
    model = keras.Model(inputs, out["mlm_logits"])
    model.jit_compile = False  # the length grows every step: XLA would recompile each time
    return model


def _softmax(logp):
    p = np.exp(logp - logp.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))
