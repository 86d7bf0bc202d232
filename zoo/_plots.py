"""The pictures of a compare run, drawn from the compact record its ``results.json`` keeps: ``zoo compare`` draws
them into its run folder, ``tools/results_pages.py`` into the manual, with the same functions. Imports numpy only
(the caller passes matplotlib's pyplot), so the results tool loads this file by path, without the zoo package."""

from __future__ import annotations

import numpy as np


def _rounded(values):
    return [float(f"{v:.6g}") for v in values]


def score_plot_record(valid_scores, valid_labels, test_scores, test_labels, threshold, bins=50, points=100):
    """What one model's two pictures need, small enough for results.json: the threshold fitted on valid, test
    scores' histogram by label (``bins`` bins) and accuracy (%) against the threshold on valid and test at
    ``points`` thresholds."""
    v, vy, s, y = (np.asarray(a, dtype=float) for a in (valid_scores, valid_labels, test_scores, test_labels))
    edges = np.linspace(min(s.min(), threshold), max(s.max(), threshold), bins + 1)
    grid = np.linspace(min(v.min(), s.min()), max(v.max(), s.max()), points)

    def accuracy(scores, labels):
        return [round(100 * float(np.mean((scores > g) == (labels == 1))), 2) for g in grid]

    return {"threshold": float(threshold),
            "test_histogram": {"edges": _rounded(edges), "similar": np.histogram(s[y == 1], edges)[0].tolist(),
                               "not_similar": np.histogram(s[y == 0], edges)[0].tolist()},
            "accuracy_by_threshold": {"thresholds": _rounded(grid), "valid": accuracy(v, vy), "test": accuracy(s, y)}}


def draw_scores(plt, task, plots, path, dpi=110):
    """``path`` (TASK_scores.png): per model of ``plots`` ({model: score_plot_record}), the histograms of its test
    scores by label, the threshold fitted on valid marked."""
    fig, axes = plt.subplots(1, len(plots), figsize=(5 * len(plots), 3.6), squeeze=False)
    for ax, (model, p) in zip(axes[0], plots.items()):
        h = p["test_histogram"]
        ax.stairs(h["similar"], h["edges"], fill=True, alpha=0.6, label="similar (1)")
        ax.stairs(h["not_similar"], h["edges"], fill=True, alpha=0.6, label="not similar (0)")
        ax.axvline(p["threshold"], color="k", ls="--", label=f"threshold {p['threshold']:.3f}")
        ax.set_title(f"{task} test: {model}")
        ax.set_xlabel("score")
        ax.set_ylabel("test pairs")
        ax.legend(fontsize=7)
    _save(plt, fig, path, dpi)


def draw_thresholds(plt, task, plots, path, dpi=110):
    """``path`` (TASK_threshold.png): per model, accuracy against the threshold on valid and test, the threshold
    fitted on valid marked."""
    fig, axes = plt.subplots(1, len(plots), figsize=(5 * len(plots), 3.6), squeeze=False)
    for ax, (model, p) in zip(axes[0], plots.items()):
        curve = p["accuracy_by_threshold"]
        ax.plot(curve["thresholds"], curve["valid"], label="valid")
        ax.plot(curve["thresholds"], curve["test"], label="test")
        ax.axvline(p["threshold"], color="k", ls="--", label="fitted on valid")
        ax.set_title(f"{task}: {model}")
        ax.set_xlabel("threshold")
        ax.set_ylabel("accuracy %")
        ax.legend(fontsize=7)
    _save(plt, fig, path, dpi)


def _save(plt, fig, path, dpi):
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, metadata={"Software": None})
    plt.close(fig)
