"""zoo's training engine: batch sources, the resumable ``fit`` on Keras' own, schedules, training state, results.

```python
run = zoo.train.fit(trainer, zoo.train.PairBatches(tok, train, 32, 64), "runs/x", epochs=1,
                    evaluator=zoo.evaluation.SpearmanEvaluator(valid), model=encoder)
```
"""

from .batches import DistillBatches, MultiTaskBatches, PairBatches, pair_training_batches
from .streaming import StreamingPairBatches, streamed_pairs
from .text_batches import InverseClozeBatches, MirrorBatches, SimBERTBatches
from .loop import EvaluatorCallback, Run, fit
from .optimizers import LayerDecayAdam, LayerDecayAdamW, PiecewiseLinear, training_optimizer
from .results import data_files, table, task_table, write_results
from .schedules import WarmupLinear, learning_rate
from .state import load_state, save_state
from .steps import distillation_trainer, pretraining_trainer

__all__ = ["DistillBatches", "EvaluatorCallback", "InverseClozeBatches", "LayerDecayAdam", "LayerDecayAdamW",
           "MirrorBatches", "MultiTaskBatches", "PairBatches", "PiecewiseLinear", "Run", "SimBERTBatches", "StreamingPairBatches", "WarmupLinear", "data_files", "distillation_trainer", "fit",
           "learning_rate", "load_state", "pair_training_batches", "pretraining_trainer", "save_state", "streamed_pairs", "table",
           "task_table", "training_optimizer", "write_results"]
