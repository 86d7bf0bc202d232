"""zoo's training engine: batch sources, the resumable ``fit`` on Keras' own, schedules, training state, results.

>>> run = zoo.train.fit(trainer, zoo.train.PairBatches(tok, train, 32, 64), "runs/x", epochs=1,
...                     evaluator=zoo.evaluation.SpearmanEvaluator(valid), model=encoder)
"""

from .batches import DistillBatches, MultiTaskBatches, PairBatches, SimBERTBatches, StreamingPairBatches
from .loop import Run, fit
from .results import data_files, table, task_table, write_results
from .schedules import WarmupLinear, check_warmup, learning_rate
from .state import load_state, save_state

__all__ = ["DistillBatches", "MultiTaskBatches", "PairBatches", "Run", "SimBERTBatches", "StreamingPairBatches",
           "WarmupLinear", "check_warmup", "data_files", "fit", "learning_rate", "load_state", "save_state", "table",
           "task_table", "write_results"]
