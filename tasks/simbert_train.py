"""SimBERT, written out: one UniLM-masked BERT that retrieves (the [CLS] vector) and generates (the MLM head)
similar sentences, trained jointly on groups of similar sentences.

    python tasks/simbert_train.py --data-dir ../shared/data --epochs 1 --output runs/simbert
    python tasks/simbert_train.py --groups my_groups.jsonl   # {"text": ..., "synonyms": [...]} per line

Rerunning with the same --output resumes a killed run. The same job as `zoo train simbert` (zoo/jobs/simbert.py).

Recorded run (written by tools/results_pages.py from the shipped preset's ship.json):
<!-- generated: preset zoo-simbert-zh-L4 -->
    python tasks/simbert_train.py --checkpoint ../shared/models/chinese_L-4_H-256_A-4/google \\
        --data-dir ../shared/data --tasks LCQMC,BQ,ATEC --select loss --epochs 12 --batch-size 64 --maxlen 32 \\
        --lr 1e-4 --save-every 200 --output runs/simbert_L4

Shipped as the preset zoo-simbert-zh-L4: test Spearman ATEC 36.14, BQ 47.42, LCQMC 64.75, PAWS-X 11.97, STS-B 55.17;
286 min of training on 2 CPU cores (data/presets/zoo-simbert-zh-L4/ship.json).
<!-- /generated -->
"""

import zoo

zoo.logs.setup_cli()  # first: the backend's start-up lines stay out of the terminal; Ctrl-C ends in one line

# ruff: noqa: E402  (imports after setup_cli)
import time

import keras

from zoo.data import groups_from_positive_pairs, load_splits, positive_pair_groups, training_groups
from zoo.distribute import setup
from zoo.evaluation import LossEvaluator, SpearmanEvaluator
from zoo.losses import passthrough_loss
from zoo.train import SimBERTBatches, fit

job = zoo.job("train simbert")  # the flags of `zoo train simbert`, and its results writer
config = job.parse()
t0 = time.time()
checkpoint = config.checkpoint or zoo.DEFAULT_PRESET
output = config.output or "runs/simbert"
# --distribute data-parallel: every device (docs: training on many devices); several TensorFlow replicas: no XLA
dist = setup(config.distribute, config.coordinator, config.num_processes, config.process_id, config.batch_size)
config.jit_compile = dist.jit_compile(config.jit_compile)
keras.utils.set_random_seed(config.seed)

# 1. Data: groups of similar sentences: --groups / --train (JSON lines of groups, or pairs whose positives are
#    joined), by default the connected components of the tasks' train positives; LCQMC valid, or your --valid.
reading = config.reading(config.tasks[0])
if config.groups or config.train:
    groups = training_groups(config.groups or config.train, columns=reading["columns"], labels=reading["labels"],
                             skip_bad_lines=reading["skip_bad_lines"])
    files = {"groups" if config.groups else f"{config.tasks[0]}.train": config.groups or config.train}
else:
    groups, files = positive_pair_groups(config.tasks, config.data_dir)
groups = groups[: config.limit_train] if config.limit_train else groups
selector = config.tasks[0] if config.valid else "LCQMC"
valid = load_splits(selector, config.data_dir, splits=("valid",), limit_eval=config.limit_eval,
                    **config.reading(selector))["valid"]
files[f"{selector}.valid"] = valid.path

# 2. Model: BERT with its MLM head, a linear pooler, and (by default) SimBERT's slimmed vocabulary.
model = zoo.SimBERT.from_preset(checkpoint, maxlen=config.maxlen, simplified=config.simplified_vocab)

# 3. Loss: seq2seq cross-entropy on the target sentence + in-batch similarity of the two [CLS] vectors of each
#    pair; rows [CLS] a [SEP] b [SEP] and [CLS] b [SEP] a [SEP] side by side.
trainer = model.loss_model()
trainer.compile(optimizer=keras.optimizers.AdamW(config.lr, weight_decay=config.weight_decay), loss=passthrough_loss,
                jit_compile=config.jit_compile)
batches = SimBERTBatches(model.tokenizer, groups, config.batch_size, config.maxlen)

# 4. Train, keeping the best model by LCQMC valid Spearman, or (--select loss) by the joint loss on groups of
#    LCQMC valid positives.
if config.select == "retrieval":
    evaluator = SpearmanEvaluator(valid)
else:
    evaluator = LossEvaluator(trainer, SimBERTBatches(model.tokenizer, groups_from_positive_pairs(valid),
                                                      config.batch_size, config.maxlen))
run = fit(trainer, batches, output, epochs=config.epochs, seed=config.seed, evaluator=evaluator, model=model,
          save_every=config.save_every, show_progress=config.progress, metadata={"job": "simbert"})

# 5. Evaluate (the retrieval head on test splits, gen_synonyms samples) and 6. write the results.
job.report(config, checkpoint, output, run, groups, files, t0)
