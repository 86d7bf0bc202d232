"""Evaluation: Spearman / Pearson of similarity scores over a whole split; the best-on-valid callback."""

from __future__ import annotations

import numpy as np


def _check_scores(scores, labels):
    scores = np.asarray(scores, dtype="float64").reshape(-1)
    labels = np.asarray(labels, dtype="float64").reshape(-1)
    if scores.shape != labels.shape:
        raise ValueError(f"{scores.size} scores but {labels.size} labels")
    if scores.size == 0:
        raise ValueError("no scores to evaluate")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"{int(np.sum(~np.isfinite(scores)))} scores are NaN or infinite")
    return scores, labels


def spearman(scores, labels):
    """Spearman correlation between scores and gold labels (whole split at once)."""
    from scipy.stats import spearmanr

    scores, labels = _check_scores(scores, labels)
    return float(spearmanr(labels, scores).statistic)


def pearson(scores, labels):
    from scipy.stats import pearsonr

    scores, labels = _check_scores(scores, labels)
    return float(pearsonr(labels, scores).statistic)


def evaluate_encoder(encoder, dataset, batch_size=64, show_progress_bar=None):
    """Cosine scores of a SentenceEncoder on a PairDataset -> {spearman, pearson, n} (x100 like the papers)."""
    scores = encoder.similarity_pairwise(dataset.texts_a, dataset.texts_b, batch_size=batch_size)
    return {"spearman": 100 * spearman(scores, dataset.labels), "pearson": 100 * pearson(scores, dataset.labels),
            "n": len(dataset)}, scores


def _keras_callback_base():
    import keras

    return keras.callbacks.Callback


class SpearmanEvaluator(_keras_callback_base()):
    """Keras callback for ``fit``: valid Spearman after each epoch (``logs["val_spearman"]``), best weights kept.

    >>> model.fit(..., callbacks=[zoo.evaluation.SpearmanEvaluator(encoder, valid, save_to="runs/best")])

    ``encoder`` is the SentenceEncoder being trained (possibly inside ``model``). The best epoch's weights are
    restored into ``encoder`` when training ends (``restore_best=True``) and, with ``save_to``, saved as a
    preset (atomically) whenever valid improves.
    """

    def __init__(self, encoder, dataset, batch_size=128, save_to=None, restore_best=True, verbose=True):
        super().__init__()
        self.encoder, self.dataset, self.batch_size = encoder, dataset, batch_size
        self.save_to, self.restore_best, self.verbose = save_to, restore_best, verbose
        self.best, self.best_epoch, self.best_weights, self.history = -np.inf, None, None, []

    def on_epoch_end(self, epoch, logs=None):
        result, _ = evaluate_encoder(self.encoder, self.dataset, self.batch_size)
        self.history.append(result["spearman"])
        if logs is not None:
            logs["val_spearman"] = result["spearman"]
        if result["spearman"] > self.best:
            self.best, self.best_epoch = result["spearman"], epoch + 1
            self.best_weights = self.encoder.get_weights()
            if self.save_to:
                self.encoder.save(self.save_to)
        if self.verbose:
            print(f"epoch {epoch + 1}: valid Spearman {result['spearman']:.2f} (best {self.best:.2f}, "
                  f"epoch {self.best_epoch})")

    def on_train_end(self, logs=None):
        if self.restore_best and self.best_weights is not None:
            self.encoder.set_weights(self.best_weights)
