"""Cached in-batch negatives (GradCache, Gao et al. 2021; sentence-transformers' CachedMultipleNegativesRankingLoss):
a ranking-loss batch of many texts in the memory of a few.

The in-batch ranking loss couples every text of a batch, so its batch cannot be split into independent parts; its
gradient can. Each step: (1) the batch's embeddings, ``mini_batch_size`` texts at a time, without keeping
activations; (2) the loss on all of them and its gradient with respect to the embeddings (small: [rows, d]);
(3) each mini-batch again, now with gradients, back-propagating its slice of (2) into the weights; the sum is the
batch's gradient. Step (3) replays each mini-batch's random state from (1), so its dropout masks are the same and
the gradient is the one of the loss computed in (1). Cost: one more forward pass per step (about 1.3x a plain
step); peak memory: one mini-batch's activations plus the batch's embeddings. A train step for TensorFlow (a
``tf.while_loop``: the batch is padded to whole mini-batches by repeating its last row, whose gradient is zero) and
JAX (stateless: each mini-batch's random state is passed again); other backends are refused.
"""

from __future__ import annotations

import keras

from ..errors import ConfigError


def cached(trainer, mini_batch_size):
    """``trainer`` (an uncompiled functional in-batch training model: texts -> their embeddings) with GradCache's
    train step, ``mini_batch_size`` texts per forward pass; ``trainer`` itself when ``mini_batch_size`` is None."""
    if mini_batch_size is None:
        return trainer
    return CachedTrainer(trainer.inputs, trainer.outputs, mini_batch_size=mini_batch_size, name=trainer.name)


class CachedTrainer(keras.Model):
    """A functional in-batch training model whose train step computes the batch in mini-batches (GradCache)."""

    def __init__(self, inputs, outputs, mini_batch_size=64, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        if int(mini_batch_size) != mini_batch_size or mini_batch_size < 2:
            raise ConfigError(f"cached mini-batch size must be an integer >= 2, got {mini_batch_size}")
        if keras.backend.backend() not in ("tensorflow", "jax"):
            raise ConfigError(f"cached in-batch negatives (GradCache) have a train step for TensorFlow and JAX, not "
                              f"for the {keras.backend.backend()} backend")
        self.mini_batch_size = int(mini_batch_size)

    def train_step(self, *args):
        if keras.backend.backend() == "jax":
            return self._jax_train_step(*args)
        return self._tensorflow_train_step(*args)

    def _seed_states(self):
        """The random states of the model's dropout layers (SeedGenerator variables)."""
        return [v for v in self.non_trainable_variables if "seed_generator" in v.path]

    # ------------------------------------------------------------------ TensorFlow: a while loop over mini-batches
    def _tensorflow_train_step(self, data):
        import tensorflow as tf

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        weights, seeds, m = self.trainable_weights, self._seed_states(), self.mini_batch_size
        rows = tf.shape(tf.nest.flatten(x)[0])[0]
        parts = (rows + m - 1) // m
        padded = tf.nest.map_structure(lambda t: tf.gather(t, tf.minimum(tf.range(parts * m), rows - 1)), x)

        def part(i):  # gathered, not sliced: XLA needs the static size m
            return tf.nest.map_structure(lambda t: tf.gather(t, i * m + tf.range(m)), padded)

        def embed(i, embeddings, states):  # (1): no activations kept; each part's random state recorded
            states = [s.write(i, v.value) for s, v in zip(states, seeds)]
            return i + 1, embeddings.write(i, tf.stop_gradient(self(part(i), training=True))), states

        _, embeddings, states = tf.while_loop(
            lambda i, *_: i < parts, embed,
            (0, tf.TensorArray(self.compute_dtype, size=parts),
             [tf.TensorArray(v.dtype, size=parts) for v in seeds]), parallel_iterations=1)  # one part at a time
        embeddings = embeddings.concat()
        with tf.GradientTape() as tape:  # (2): the loss of the whole batch, and its gradient on the embeddings
            tape.watch(embeddings)
            y_pred = embeddings[:rows]
            loss = self._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
            scaled = self.optimizer.scale_loss(loss)
        upstream = tape.gradient(scaled, embeddings)  # zero on the padding rows
        self._loss_tracker.update_state(loss, sample_weight=rows)

        def backward(i, total):  # (3): each part again with its random state, its slice of the gradient
            for state, variable in zip(states, seeds):
                variable.assign(state.read(i))
            with tf.GradientTape() as inner:
                surrogate = tf.reduce_sum(self(part(i), training=True) * tf.gather(upstream, i * m + tf.range(m)))
            grads = inner.gradient(surrogate, weights)
            return i + 1, [t + (tf.zeros_like(w) if g is None else tf.convert_to_tensor(g))
                           for t, g, w in zip(total, grads, weights)]

        _, grads = tf.while_loop(lambda i, *_: i < parts, backward, (0, [tf.zeros_like(w) for w in weights]),
                                 parallel_iterations=1)
        self.optimizer.apply_gradients(zip(grads, weights))
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    # ------------------------------------------------------------------ JAX: each part's state passed again
    def _jax_train_step(self, state, data):
        import jax
        import jax.numpy as jnp

        trainable, non_trainable, optimizer_variables, metrics_variables = state
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        rows, m = jax.tree_util.tree_leaves(x)[0].shape[0], self.mini_batch_size
        parts = [jax.tree_util.tree_map(lambda t, a=a: t[a:a + m], x) for a in range(0, rows, m)]
        before, embeddings = [], []
        for part in parts:  # (1)
            before.append(non_trainable)
            out, non_trainable = self.stateless_call(trainable, non_trainable, part, training=True)
            embeddings.append(jax.lax.stop_gradient(out))
        embeddings = jnp.concatenate(embeddings)

        def batch_loss(y_pred):  # (2)
            loss, (_, _, new_metrics) = self.stateless_compute_loss(
                trainable, non_trainable, metrics_variables, x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                training=True)
            mapping = list(zip(self.optimizer.variables, optimizer_variables))
            with keras.StatelessScope(state_mapping=mapping):
                return self.optimizer.scale_loss(loss), (loss, new_metrics)

        (_, (loss, new_metrics)), upstream = jax.value_and_grad(batch_loss, has_aux=True)(embeddings)
        grads = [jnp.zeros_like(v) for v in trainable]
        for i, (part, seeds) in enumerate(zip(parts, before)):  # (3)
            def surrogate(variables, part=part, seeds=seeds, i=i):
                out, _ = self.stateless_call(variables, seeds, part, training=True)
                return jnp.sum(out * upstream[i * m:(i + 1) * m])

            grads = [t + g for t, g in zip(grads, jax.grad(surrogate)(trainable))]
        trainable, optimizer_variables = self.optimizer.stateless_apply(optimizer_variables, grads, trainable)
        logs, new_metrics = self._update_metrics_variables(new_metrics, loss, x, y, embeddings, sample_weight)
        return logs, (trainable, non_trainable, optimizer_variables, new_metrics)
