"""Evaluation: metrics, thresholds, and evaluators.

Units: the metric functions (``spearman``, ``accuracy``, ``best_threshold``, ``threshold_accuracy``, ...) return
fractions, as scipy and scikit-learn do; evaluators report x100, the scale of the papers and of every results file.

An **evaluator** (sentence-transformers' shape) is called on a model and returns a dict of metrics; its
``primary_metric`` (with ``greater_is_better``) selects the best model. zoo's training engine uses them, and
``zoo.train.EvaluatorCallback`` runs one inside your own ``model.fit``. This module loads no backend: the metrics
and thresholds work on numpy arrays.
"""

from __future__ import annotations

import numpy as np

from .errors import ConfigError


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
    """Spearman correlation between scores and gold labels (whole split at once).

    :param scores: the model's scores [n].
    :param labels: the gold labels [n].
    :returns: a fraction in [-1, 1].
    """
    from scipy.stats import spearmanr

    scores, labels = _check_scores(scores, labels)
    return float(spearmanr(labels, scores).statistic)


def pearson(scores, labels):
    from scipy.stats import pearsonr

    scores, labels = _check_scores(scores, labels)
    return float(pearsonr(labels, scores).statistic)


# ---------------------------------------------------------------------------------- evaluators
class Evaluator:
    """Called on a model -> {metric: value} (x100); ``primary_metric`` picks the best model.

    ```python
    evaluator = SpearmanEvaluator(zoo.data.load_task("LCQMC", "valid"))
    evaluator(encoder)             # {"spearman": ..., "pearson": ...}, x100
    ```

    A subclass sets ``primary_metric`` and ``greater_is_better`` and implements ``__call__(model)``.
    """

    name = "valid"
    primary_metric = "spearman"
    greater_is_better = True

    def __call__(self, model):
        raise NotImplementedError

    def better(self, value, best):
        """Whether ``value`` beats ``best``, in this evaluator's direction.

        :param value: a primary metric's value.
        :param best: the best so far (None: nothing to beat).
        """
        return best is None or (value > best if self.greater_is_better else value < best)


class SpearmanEvaluator(Evaluator):
    """Spearman's rank correlation (primary) and Pearson's of each pair's cosine against its gold label, x100:
    ``spearman = pearson(rank(cos(u_i, v_i)), rank(y_i))``, ties averaged (scipy).

    Inputs: a model with ``similarity_pairwise`` (SentenceEncoder, SimBERT: the cosines), or a CrossEncoder (its
    scores), and a PairDataset whose labels are 0/1 or graded (STS-B 0-5). The standard metric of Chinese STS evaluation (Su Jianlin, "CoSENT (一)", 2022: the
    Spearman of the cosines, over the whole split).

    :param dataset: a ``PairDataset`` (valid; never test for choosing).
    :param batch_size: texts per forward pass.
    :param name: the evaluator's name (a prefix in a ``MeanEvaluator``).
    """

    def __init__(self, dataset, batch_size=128, name="valid"):
        self.dataset, self.batch_size, self.name = dataset, batch_size, name

    def __call__(self, model):
        scores = pair_scores(model, self.dataset, self.batch_size)  # the Keras model itself, at fp32
        self.scores = scores  # kept for thresholds and plots
        return {"spearman": 100 * spearman(scores, self.dataset.labels),
                "pearson": 100 * pearson(scores, self.dataset.labels)}


class AccuracyEvaluator(Evaluator):
    """Accuracy (primary, x100) at the best threshold on these same pairs, and that threshold:
    ``max_t mean(1[s_i > t] == y_i)``, found by an exact sweep over the sorted scores (``best_threshold``).

    Inputs: a model with ``score(pairs)`` (a CrossEncoder) and a PairDataset with 0/1 labels. Fitted on
    valid, the threshold is then applied to test (``threshold_accuracy``), as in the LCQMC / BQ papers' accuracy.

    :param dataset: a ``PairDataset`` with 0/1 labels.
    :param batch_size: pairs per forward pass.
    :param name: the evaluator's name.
    """

    primary_metric = "accuracy"

    def __init__(self, dataset, batch_size=128, name="valid"):
        self.dataset, self.batch_size, self.name = dataset, batch_size, name

    def __call__(self, model):
        scores = model.score(list(zip(self.dataset.texts_a, self.dataset.texts_b)), batch_size=self.batch_size,
                              engine="fp32")
        self.scores = scores
        threshold, acc = best_threshold(scores, self.dataset.labels)
        return {"accuracy": 100 * acc, "threshold": threshold}


class MeanEvaluator(Evaluator):
    """Several evaluators (e.g. one per task) -> each one's metrics prefixed with its name, and the unweighted mean
    of their primary metrics as the primary metric (``mean_k m_k``: each task counts once, whatever its size).

    Inputs: {name: evaluator}, all with the same primary metric and direction.

    :param evaluators: {name: evaluator}, all with the same primary metric and direction.
    :param name: the evaluator's name.
    """

    def __init__(self, evaluators, name="valid"):
        self.evaluators, self.name = dict(evaluators), name
        first = next(iter(self.evaluators.values()))
        self.primary_metric, self.greater_is_better = first.primary_metric, first.greater_is_better

    def __call__(self, model):
        out, primaries, self.scores = {}, [], {}
        for name, evaluator in self.evaluators.items():
            metrics = evaluator(model)
            out.update({f"{name}_{k}": v for k, v in metrics.items()})
            primaries.append(metrics[evaluator.primary_metric])
            self.scores[name] = getattr(evaluator, "scores", None)
        out[self.primary_metric] = float(np.mean(primaries))
        return out


class LossEvaluator(Evaluator):
    """The mean loss (primary; lower is better) of a loss model on fixed held-out batches: ``mean_b L(batch_b)``.

    Inputs: a model whose output is its loss (``SimBERT.loss_model()``) and a batch source drawn with a fixed seed
    (e.g. ``SimBERTBatches`` of LCQMC valid's positive groups); no labels beyond the batches'.

    :param loss_model: a model whose output is its loss.
    :param batches: the held-out batch source.
    :param seed: the seed that draws the same batches at every call.
    :param name: the evaluator's name.
    """

    primary_metric = "loss"
    greater_is_better = False

    def __init__(self, loss_model, batches, seed=12345, name="valid"):
        self.loss_model, self.batches, self.seed, self.name = loss_model, batches, seed, name

    def __call__(self, model=None):
        losses = [float(np.asarray(self.loss_model.predict_on_batch(x)).reshape(-1)[0])
                  for _, x, _ in self.batches.epoch(self.seed, 0)]
        return {"loss": float(np.mean(losses))}


class MaskedTokenEvaluator(Evaluator):
    """Masked-token accuracy (primary, x100) of a pretrainer on fixed batches of held-out examples, which training
    never draws: ``mean over masked positions of 1[argmax p(token) == original token]``, the same masks at every
    call.

    Inputs: a pretrainer whose second output is the masked-token accuracy (``zoo.models.pretrainer``) and its
    ``PretrainingBatches`` (their ``held_out`` examples). Reference: Devlin et al. 2019, "BERT" (the MLM task).

    :param pretrainer: the pretraining model.
    :param batches: its ``PretrainingBatches``.
    :param seed: the seed of the held-out batches and masks, the same at every call.
    :param steps: batches measured.
    """

    name = ""
    primary_metric = "masked_accuracy"

    def __init__(self, pretrainer, batches, seed=12345, steps=4):
        if not len(batches.held_out):
            raise ConfigError("no held-out examples to measure masked-token accuracy on (the corpus is too small)")
        self.pretrainer, self.batches, self.seed, self.steps = pretrainer, batches, seed, steps

    def __call__(self, model=None):
        accs = []
        for step in range(self.steps):
            rng = np.random.default_rng([self.seed, step])
            index = self.batches.held_out[rng.integers(0, len(self.batches.held_out), self.batches.batch_size)]
            accs.append(float(np.asarray(self.pretrainer.predict_on_batch(self.batches.batch(rng, index)))[1]))
        return {"masked_accuracy": 100 * float(np.mean(accs))}


def pair_scores(model, dataset, batch_size=128):
    """Similarity scores of a model on a PairDataset: cosine for an encoder (SentenceEncoder, SimBERT), the
    cross-encoder's score otherwise."""
    if hasattr(model, "similarity_pairwise"):
        return model.similarity_pairwise(dataset.texts_a, dataset.texts_b, batch_size=batch_size, engine="fp32")
    return model.score(list(zip(dataset.texts_a, dataset.texts_b)), batch_size=batch_size, engine="fp32")


def evaluate_task(model, data, batch_size=128, valid_scores=None):
    """{valid,test}_spearman, test_pearson (x100) of ``model`` on {"valid": PairDataset, "test": ...}; for 0/1
    labels also threshold, valid_accuracy, test_accuracy and test_accuracy_ci95 (x100). ``valid_scores``: the
    model's valid scores when already computed (the training engine keeps those of the best epoch). A data set of
    yours may lack one split: valid alone gives its Spearman and the threshold with its valid accuracy; test alone
    the threshold-free figures (Spearman, Pearson).

    :param model: a SentenceEncoder, SimBERT or CrossEncoder.
    :param data: {"valid": PairDataset, "test": PairDataset} (either may be missing).
    :param batch_size: texts per forward pass.
    :param valid_scores: the model's valid scores when already computed.
    """
    scores = {}
    if "valid" in data:
        scores["valid"] = pair_scores(model, data["valid"], batch_size) if valid_scores is None else valid_scores
    if "test" in data:
        scores["test"] = pair_scores(model, data["test"], batch_size)
    if not scores:
        raise ValueError("evaluate_task: no valid or test split to score")
    out = {}
    if "valid" in scores:
        out["valid_spearman"] = 100 * spearman(scores["valid"], data["valid"].labels)
    if "test" in scores:
        out.update(test_spearman=100 * spearman(scores["test"], data["test"].labels),
                   test_pearson=100 * pearson(scores["test"], data["test"].labels))
    if "valid" in scores and all(np.isin(data[s].labels, (0, 1)).all() for s in scores):
        if "test" in scores:
            out.update(percent(threshold_accuracy(scores["valid"], data["valid"].labels, scores["test"],
                                                  data["test"].labels)))
        else:
            threshold, valid_accuracy = best_threshold(scores["valid"], data["valid"].labels)
            out.update(threshold=threshold, valid_accuracy=100 * valid_accuracy)
    return out


def evaluate_encoder(encoder, dataset, batch_size=64):
    """Cosine scores of a SentenceEncoder on a PairDataset -> ({spearman, pearson, n} x100, scores)."""
    evaluator = SpearmanEvaluator(dataset, batch_size)
    return {**evaluator(encoder), "n": len(dataset)}, evaluator.scores


# ---------------------------------------------------------------------------------- thresholds and accuracy
def _check_binary(scores, labels):
    scores, labels = _check_scores(scores, labels)
    if not np.all(np.isin(labels, (0, 1))):
        bad = labels[~np.isin(labels, (0, 1))][:5]
        raise ValueError(f"accuracy needs labels in {{0, 1}}; found {bad.tolist()}")
    return scores, labels.astype(bool)


def accuracy(scores, labels, threshold):
    """Share of pairs with ``(score > threshold) == label``.

    :param scores: the model's scores [n].
    :param labels: the 0/1 labels [n].
    :param threshold: a pair scoring above it is predicted similar.
    """
    scores, labels = _check_binary(scores, labels)
    return float(np.mean((scores > threshold) == labels))


def _sweep_table(scores, labels):
    """Candidate thresholds (below the minimum, then midpoints between neighbouring distinct scores, then the
    maximum) and the accuracy / TP / FP of ``score > t`` for each, in one sorted pass."""
    order = np.argsort(scores, kind="stable")
    s, y = scores[order], labels[order]
    distinct = np.flatnonzero(np.diff(s) > 0)  # split after these sorted positions
    cuts = np.concatenate([[-1], distinct, [len(s) - 1]])  # rows 0..cut are predicted negative
    thresholds = np.concatenate([[s[0] - 1.0], (s[distinct] + s[distinct + 1]) / 2, [s[-1]]])
    pos_total = y.sum()
    neg_below = np.concatenate([[0], np.cumsum(~y)])[cuts + 1]
    pos_below = np.concatenate([[0], np.cumsum(y)])[cuts + 1]
    tp = pos_total - pos_below
    fp = (len(y) - pos_total) - neg_below
    acc = (neg_below + tp) / len(y)
    return thresholds, acc, tp, fp


def best_threshold(scores, labels, method="sweep"):
    """Threshold t maximising the accuracy of ``score > t`` -> (t, accuracy). Fit on valid, apply to test.

    sweep (default): exact. Sort once and evaluate every midpoint between neighbouring distinct scores (plus
    "all positive" = min - 1 and "all negative" = max): O(n log n). Ties in accuracy go to the lowest threshold.
    bisect: a binary search. It walks the sorted candidates towards the side where accuracy
    rises, assuming accuracy(t) is unimodal; on a plateau or with several local maxima (overlapping classes,
    multi-modal scores) it can stop at a local optimum and miss the best threshold. O(n log n).
    powell: bojone/CoSENT's scipy Powell search on tanh(x) from x = 1 (threshold in (-1, 1)), for parity with
    the published numbers; it can stop at local optima of the step function too.
    Single-class labels give the trivial threshold (all positive or all negative, accuracy 1.0); empty input,
    length mismatch, NaN scores or labels outside {0, 1} raise ValueError.

    :param scores: the model's scores [n] (valid's).
    :param labels: the 0/1 labels [n].
    :param method: "sweep" (exact), "bisect" or "powell" (above).
    :returns: (threshold, accuracy as a fraction).
    """
    scores, labels = _check_binary(scores, labels)
    thresholds, acc, _, _ = _sweep_table(scores, labels)
    if method == "sweep":
        i = int(np.argmax(acc))
        return float(thresholds[i]), float(acc[i])
    if method == "bisect":
        lo, hi = 0, len(thresholds) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if acc[mid] < acc[mid + 1]:
                lo = mid + 1
            else:
                hi = mid
        return float(thresholds[lo]), float(acc[lo])
    if method == "powell":
        from scipy.optimize import minimize

        res = minimize(lambda x: -np.mean((scores > np.tanh(x[0])) == labels), x0=[1.0], method="Powell")
        t = float(np.tanh(res.x[0]))
        return t, float(np.mean((scores > t) == labels))
    raise ValueError(f"method must be 'sweep', 'bisect' or 'powell', got {method!r}")


def best_f1_threshold(scores, labels):
    """Threshold maximising F1 of the positive class -> (t, f1), by the same exact sweep.

    :param scores: the model's scores [n].
    :param labels: the 0/1 labels [n].
    """
    scores, labels = _check_binary(scores, labels)
    thresholds, _, tp, fp = _sweep_table(scores, labels)
    fn = labels.sum() - tp
    f1 = np.where(tp > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0)
    i = int(np.argmax(f1))
    return float(thresholds[i]), float(f1[i])


def threshold_accuracy(valid_scores, valid_labels, test_scores, test_labels):
    """Fit the threshold on valid (exact sweep), apply it to test -> {threshold, valid_accuracy, test_accuracy,
    test_accuracy_ci95} (fractions; bootstrap 95% interval).

    :param valid_scores: the model's valid scores.
    :param valid_labels: valid's 0/1 labels.
    :param test_scores: the model's test scores.
    :param test_labels: test's 0/1 labels.
    """
    threshold, valid_acc = best_threshold(valid_scores, valid_labels)
    low, high = bootstrap_accuracy_ci(test_scores, test_labels, threshold)
    return {"threshold": threshold, "valid_accuracy": valid_acc,
            "test_accuracy": accuracy(test_scores, test_labels, threshold), "test_accuracy_ci95": [low, high]}


def percent(metrics, keys=("valid_accuracy", "test_accuracy", "test_accuracy_ci95")):
    """The ``keys`` of a metrics dict x100 (fractions -> the scale of results files)."""
    scale = lambda v: [100 * x for x in v] if isinstance(v, (list, tuple)) else 100 * v  # noqa: E731
    return {k: scale(v) if k in keys else v for k, v in metrics.items()}


def bootstrap_accuracy_ci(scores, labels, threshold, n_boot=1000, seed=0, alpha=0.05):
    """Percentile bootstrap (1 - alpha) interval of accuracy at a fixed threshold -> (low, high).

    :param scores: the model's scores [n].
    :param labels: the 0/1 labels [n].
    :param threshold: the fixed threshold.
    :param n_boot: bootstrap resamples.
    :param seed: the resampling seed.
    :param alpha: one minus the interval's coverage.
    """
    scores, labels = _check_binary(scores, labels)
    correct = ((scores > threshold) == labels).astype("float64")
    rng = np.random.default_rng(seed)
    means = correct[rng.integers(0, len(correct), (n_boot, len(correct)))].mean(1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))


# ---------------------------------------------------------------------------------- retrieval
def first_relevant_ranks(rankings, relevant, k=None):
    """Per query, the 1-based rank of its first relevant item within the top ``k`` of its ranking (best first),
    or None. ``relevant``: per query, one item or a collection of items."""
    ranks = []
    for ranking, gold in zip(rankings, relevant, strict=True):
        gold = set(gold) if isinstance(gold, (set, frozenset, list, tuple)) else {gold}
        top = list(ranking)[:k] if k else list(ranking)
        ranks.append(next((i for i, item in enumerate(top, start=1) if item in gold), None))
    return ranks


def recall_at_k(rankings, relevant, k):
    """Share of the queries with a relevant item in their top ``k`` (one relevant item per query: recall@k;
    also called hit rate or success@k)."""
    return float(np.mean([r is not None for r in first_relevant_ranks(rankings, relevant, k)]))


def mrr_at_k(rankings, relevant, k):
    """Mean reciprocal rank of the first relevant item, 0 when it is not in the top ``k`` (MRR@k)."""
    return float(np.mean([1.0 / r if r else 0.0 for r in first_relevant_ranks(rankings, relevant, k)]))


def ndcg_at_k(rankings, relevant, k):
    """Mean nDCG@k with binary relevance: sum over relevant hits of 1/log2(rank+1), divided by the same sum for
    an ideal ranking (all relevant items first)."""
    values = []
    for ranking, gold in zip(rankings, relevant, strict=True):
        gold = set(gold) if isinstance(gold, (set, frozenset, list, tuple)) else {gold}
        dcg = sum(1.0 / np.log2(i + 1) for i, item in enumerate(list(ranking)[:k], start=1) if item in gold)
        ideal = sum(1.0 / np.log2(i + 1) for i in range(1, min(len(gold), k) + 1))
        values.append(dcg / ideal if ideal else 0.0)
    return float(np.mean(values))


def overlap_at_k(found, truth, k):
    """Approximate search against exact: the mean share of each query's true top ``k`` that was found
    (the "recall@k" of ANN benchmarks)."""
    return float(np.mean([len(set(list(f)[:k]) & set(list(t)[:k])) / k for f, t in zip(found, truth, strict=True)]))


# ---------------------------------------------------------------------------------- token representations
def token_self_similarity(backbone, tokenizer, texts, maxlen=64, batch_size=64, seed=0, max_pairs=200_000):
    """Anisotropy diagnostics (TaCL / TACO papers): mean cosine between last-layer token vectors of different
    tokens **within** the same sentence, and **across** different sentences ([CLS], [SEP] and padding excluded).
    High values mean token vectors crowd into a narrow cone. Returns {"intra": ..., "inter": ...}."""
    from keras import ops

    vectors, owners = [], []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(texts[start:start + batch_size], maxlen=maxlen)
        h = ops.convert_to_numpy(backbone(batch)["sequence_output"])
        mask = batch["padding_mask"].astype(bool) & ~np.isin(batch["token_ids"], list(tokenizer.special_ids))
        for row in range(len(h)):
            v = h[row][mask[row]]
            vectors.append(v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12))
            owners.append(np.full(len(v), start + row))
    intra = [float((v @ v.T)[np.triu_indices(len(v), 1)].mean()) for v in vectors if len(v) > 1]
    allv, owner = np.concatenate(vectors), np.concatenate(owners)
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, len(allv), (2, max_pairs))
    keep = owner[i] != owner[j]
    inter = float(np.mean(np.sum(allv[i[keep]] * allv[j[keep]], axis=1)))
    return {"intra": float(np.mean(intra)), "inter": inter}
