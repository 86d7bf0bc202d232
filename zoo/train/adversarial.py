"""Adversarial training on the word embeddings (FGM, Miyato et al. 2017; bert4keras' ``adversarial_training``).

Each step: the loss's gradient g on the token-embedding table gives the perturbation r = epsilon * g / ||g||; a
second forward and backward pass runs with the table at E + r; the table goes back to E and the optimizer applies
the sum of both passes' gradients. One extra forward and backward pass per step: about twice a plain step's time.
A train step for TensorFlow (the table is moved and moved back in place) and JAX (stateless: the second pass takes a
perturbed copy of the variables); other backends are refused.
"""

from __future__ import annotations

import keras

from ..errors import ConfigError

EMBEDDING_TABLE = "token_embedding/embeddings"


def adversarial(trainer, epsilon):
    """``trainer`` (an uncompiled functional training model) with FGM's train step at ``epsilon`` (e.g. 1.0, as
    bert4keras' example), on the same layers and variables; ``trainer`` itself when ``epsilon`` is None."""
    if epsilon is None:
        return trainer
    return AdversarialTrainer(trainer.inputs, trainer.outputs, epsilon=epsilon, name=trainer.name)


class AdversarialTrainer(keras.Model):
    """A functional training model whose train step adds FGM on its one trainable token-embedding table."""

    def __init__(self, inputs, outputs, epsilon=1.0, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        if not epsilon > 0:
            raise ConfigError(f"adversarial epsilon must be > 0 (e.g. 1.0), got {epsilon}")
        if keras.backend.backend() not in ("tensorflow", "jax"):
            raise ConfigError(f"adversarial training (FGM) has a train step for TensorFlow and JAX, not for the "
                              f"{keras.backend.backend()} backend")
        self.epsilon = float(epsilon)
        self.table_index = self._table_index()

    def _table_index(self):
        found = [i for i, v in enumerate(self.trainable_variables) if v.path.endswith(EMBEDDING_TABLE)]
        if len(found) != 1:
            raise ConfigError(f"adversarial training perturbs one trainable token-embedding table "
                              f"({EMBEDDING_TABLE}); this model has {len(found)}")
        return found[0]

    def train_step(self, *args):
        if keras.backend.backend() == "jax":
            return self._jax_train_step(*args)
        return self._tensorflow_train_step(*args)

    # ------------------------------------------------------------------ TensorFlow: move the table, move it back
    def _tensorflow_train_step(self, data):
        import tensorflow as tf

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        weights = self.trainable_weights
        batch_rows = tf.shape(tf.nest.flatten(x)[0])[0]

        def gradients(track):
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
                if track:
                    self._loss_tracker.update_state(loss, sample_weight=batch_rows)
                scaled = self.optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, weights)
            return y_pred, [tf.zeros_like(w) if g is None else tf.convert_to_tensor(g) for g, w in zip(grads, weights)]

        y_pred, clean = gradients(track=True)
        table = weights[self.table_index]
        delta = perturbation(clean[self.table_index], self.epsilon, tf.norm)
        table.assign_add(delta)
        _, perturbed = gradients(track=False)
        table.assign_sub(delta)
        self.optimizer.apply_gradients(zip([a + b for a, b in zip(clean, perturbed)], weights))
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    # ------------------------------------------------------------------ JAX: a perturbed copy of the variables
    def _jax_train_step(self, state, data):
        import jax
        import jax.numpy as jnp

        trainable, non_trainable, optimizer_variables, metrics_variables = state
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)
        (_, (loss, y_pred, non_trainable, new_metrics)), clean = grad_fn(
            trainable, non_trainable, metrics_variables, x, y, sample_weight, training=True,
            optimizer_variables=optimizer_variables)
        delta = perturbation(clean[self.table_index], self.epsilon, jnp.linalg.norm)
        moved = list(trainable)
        moved[self.table_index] = trainable[self.table_index] + delta
        # the second pass starts from the first's non-trainable state (new dropout masks) and its metrics are dropped
        (_, (_, _, non_trainable, _)), perturbed = grad_fn(
            moved, non_trainable, metrics_variables, x, y, sample_weight, training=True,
            optimizer_variables=optimizer_variables)
        grads = [a + b for a, b in zip(clean, perturbed)]
        trainable, optimizer_variables = self.optimizer.stateless_apply(optimizer_variables, grads, trainable)
        logs, new_metrics = self._update_metrics_variables(new_metrics, loss, x, y, y_pred, sample_weight)
        return logs, (trainable, non_trainable, optimizer_variables, new_metrics)


def perturbation(gradient, epsilon, norm):
    """FGM's step on the embedding table: ``epsilon`` times the gradient's direction (bert4keras' 1e-8 guard)."""
    return epsilon * gradient / (norm(gradient) + 1e-8)
