"""Evaluate any saved model on any task: Spearman of its scores against the gold labels, and for 0/1 tasks the
accuracy on test at the threshold fitted on valid (with a bootstrap interval). ``zoo evaluate``."""

from __future__ import annotations

import dataclasses
import os
import time

from ..choices import POOLINGS
from ..config import DataOptions, option
from ..data.tasks import TASKS, load_splits
from ..errors import ConfigError
from .common import check_checkpoint, check_tasks


@dataclasses.dataclass
class EvaluateConfig(DataOptions):
    """Evaluate a saved model on the valid and test splits of one or more tasks."""

    model: str = option(None, "a run folder, zoo preset (folder or name), .keras file or checkpoint folder",
                        required=True)
    tasks: tuple = option(("LCQMC",), f"tasks to evaluate on: {', '.join(TASKS)}, or folders of yours under "
                                      "--data-dir (or --valid and --test)")
    pooling: str | None = option(None, "pooling when MODEL is a checkpoint, not a saved model (default: cls)",
                                 choices=POOLINGS)
    maxlen: int | None = option(None, "tokens per text (default: the model's)")
    batch_size: int = option(128, "texts per model call")
    limit_eval: int | None = option(None, "score the first N pairs of each valid and test split only (quick trials)")
    output: str | None = option(None, "folder for results.json and results.md (default: none written)")

    def __post_init__(self):
        self.check_data(trains=False)
        check_tasks(self.tasks, config=self)
        if self.limit_eval is not None and self.limit_eval < 1:
            raise ConfigError(f"--limit-eval must be >= 1, got {self.limit_eval}")
        check_checkpoint(self.model, "--model")


def run(config: EvaluateConfig):
    """Scores of ``--model`` on each task; results.json and results.md in ``--output`` when given."""
    from ..evaluation import evaluate_task
    from ..models import from_preset
    from ..train.results import data_files, write_results

    t0 = time.time()
    model = from_preset(config.model, pooling=config.pooling, maxlen=config.maxlen)
    per_task, files = {}, {}
    for task in config.tasks:
        data = load_splits(task, config.data_dir, splits=config.present(("valid", "test")), limit_eval=config.limit_eval,
                           **config.reading(task))
        per_task[task] = evaluate_task(model, data, config.batch_size)
        files.update({f"{task}.{s}": f for s, f in data_files(data).items()})
    results = {"config": dataclasses.asdict(config), "model_class": type(model).__name__, "data_files": files,
               "tasks": per_task, "seconds": time.time() - t0}
    if config.output:
        os.makedirs(config.output, exist_ok=True)
        results = write_results(config.output, results, markdown(results))
    return results


def markdown(results):
    """The model and its per-task table."""
    from ..train.results import task_table

    return f"{results['model_class']} from {results['config']['model']}\n\n" + task_table(results["tasks"])
