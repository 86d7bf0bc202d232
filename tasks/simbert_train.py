"""SimBERT, written out: one UniLM-masked BERT that retrieves (the [CLS] vector) and generates (the MLM head)
similar sentences, trained jointly on groups of similar sentences.

    python tasks/simbert_train.py --data-dir ../shared/data --epochs 1 --output runs/simbert
    python tasks/simbert_train.py --groups my_groups.jsonl   # {"text": ..., "synonyms": [...]} per line

Rerunning with the same --output resumes a killed run. The same job as `zoo train simbert` (zoo/jobs/simbert.py).
"""

import time

import zoo  # noqa: I001  (first: it imports Keras with TensorFlow's start-up lines silenced)
import keras

from zoo.config import parse
from zoo.data import groups_from_positive_pairs, load_splits
from zoo.evaluation import LossEvaluator, SpearmanEvaluator
from zoo.jobs.common import setup_distribution
from zoo.jobs.simbert import SimBERTBatches, SimBERTConfig, report, training_groups
from zoo.logs import setup_cli
from zoo.losses import passthrough_loss
from zoo.train import fit

setup_cli()
config = parse(SimBERTConfig)
t0 = time.time()
checkpoint = config.checkpoint or zoo.DEFAULT_PRESET
output = config.output or "runs/simbert"
setup_distribution(config)  # --distribute data-parallel: every device (README: many GPUs / hosts)
keras.utils.set_random_seed(config.seed)

# 1. Data: groups of similar sentences (by default the connected components of the tasks' train positives).
groups, files = training_groups(config)
groups = groups[: config.limit_groups] if config.limit_groups else groups
valid = load_splits("LCQMC", config.data_dir, splits=("valid",))["valid"]
files["LCQMC.valid"] = valid.path

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
report(config, checkpoint, output, run, groups, files, t0)
