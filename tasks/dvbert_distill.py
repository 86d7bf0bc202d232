"""DvBERT, written out: distil trained cross-encoder teachers into a bi-encoder with teacher annealing.

    python tasks/dvbert_distill.py --tasks LCQMC --teacher runs/LCQMC_cross/model --objective cosent-gap \\
        --pooling cls --epochs 1 --batch-size 32 --lr 1e-4 --output runs/LCQMC_dvbert_cosent_gap

The same job as `zoo train dvbert` (zoo/jobs/dvbert.py, which explains the objectives).

Recorded run, with the teacher of tasks/train_cross_encoder.py's recorded run (written by tools/results_pages.py
from bench/results):
<!-- generated: run dvbert_4000 -->
    python tasks/dvbert_distill.py --tasks LCQMC --teacher runs/cross_encoder_4000/model --objective cosent-gap \\
        --pooling cls --epochs 1 --batch-size 32 --lr 1e-4 \\
        --checkpoint ../shared/models/chinese_L-4_H-256_A-4/google --data-dir ../shared/data --limit-train 4000 \\
        --seed 42 --output runs/dvbert_4000 --no-progress

LCQMC test Spearman 60.56 (valid 45.08); test accuracy 75.69% [75.0, 76.4] at the valid threshold; 17 min of
training on 2 CPU cores (bench/results/runs/dvbert_4000.json).
<!-- /generated -->
"""

import zoo

zoo.logs.setup_cli()  # first: the backend's start-up lines stay out of the terminal; Ctrl-C ends in one line

# ruff: noqa: E402  (imports after setup_cli)
import os
import time

import keras

from zoo.data import load_splits
from zoo.distribute import setup
from zoo.evaluation import SpearmanEvaluator, evaluate_task
from zoo.models.cross_encoder import predict_teachers
from zoo.train import distillation_trainer, fit

job = zoo.job("train dvbert")  # the flags of `zoo train dvbert`, and its results writer
config = job.parse()
t0 = time.time()
checkpoint = config.checkpoint or zoo.DEFAULT_PRESET
output = config.output or f"runs/{config.task}_dvbert"
os.makedirs(output, exist_ok=True)

# 1. Data, and the teachers' probabilities on every train pair (cached in the run folder).
data = load_splits(config.task, config.data_dir, config.limit_train, limit_eval=config.limit_eval,
                   **config.reading(config.task))
teacher_probs = predict_teachers(config.teachers, data["train"], os.path.join(output, "teacher_probs.npz"),
                                 config.progress)

# 2. The student: a bi-encoder.
# --distribute data-parallel: every device (docs: training on many devices); several TensorFlow replicas: no XLA
dist = setup(config.distribute, config.coordinator, config.num_processes, config.process_id, config.batch_size)
config.jit_compile = dist.jit_compile(config.jit_compile)
keras.utils.set_random_seed(config.seed)
student = zoo.SentenceEncoder.from_preset(checkpoint, pooling=config.pooling, maxlen=config.maxlen)

# 3. Targets annealed from the teachers to the gold labels over the run; the student's loss (--objective: the
#    softmax head against the targets, CoSENT ranked by them, or that CoSENT weighted by each pair's target gap).
batches, trainer = distillation_trainer(student, data["train"], teacher_probs, config.objective,
                                        batch_size=config.batch_size, maxlen=config.maxlen, epochs=config.epochs,
                                        lr=config.lr, warmup=config.warmup, jit_compile=config.jit_compile)

# 4. Train, keeping the best student by valid Spearman.
run = fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, evaluator=SpearmanEvaluator(data["valid"]),
          model=student, save_every=config.save_every, show_progress=config.progress,
          metadata={"job": "dvbert", "objective": config.objective, "teachers": list(config.teachers)})

# 5. Evaluate and 6. write the results.
scores = evaluate_task(zoo.SentenceEncoder.from_preset(run.model_dir), data, valid_scores=run.best_scores)
job.report(config, checkpoint, output, run, data, scores, t0)
