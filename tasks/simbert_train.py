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

job = zoo.job("train simbert")  # the flags of `zoo train simbert`, and its steps
config = job.parse()
steps = job.steps
t0 = time.time()

# 0. Start: the distribution (--distribute data-parallel: every device), the seed, the run folder.
checkpoint, output = steps.start(config)

# 1. Data: groups of similar sentences: --groups / --train (JSON lines of groups, or pairs whose positives are
#    joined), by default the connected components of the tasks' train positives; LCQMC valid, or your --valid.
groups, files, valid = steps.data(config)

# 2. Model: BERT with its MLM head, a linear pooler, and (by default) SimBERT's slimmed vocabulary.
model = steps.model(config, checkpoint)

# 3. Loss: seq2seq cross-entropy on the target sentence + in-batch similarity of the two [CLS] vectors of each
#    pair; rows [CLS] a [SEP] b [SEP] and [CLS] b [SEP] a [SEP] side by side.
trainer = steps.trainer(config, model)
batches = steps.batches(config, model, groups)

# 4. Train, keeping the best model by LCQMC valid Spearman, or (--select loss) by the joint loss on groups of
#    LCQMC valid positives.
run = steps.train(config, trainer, batches, steps.evaluator(config, model, trainer, valid), model, output)

# 5. Evaluate (the retrieval head on test splits, gen_synonyms samples) and write the results.
steps.report(config, checkpoint, output, run, groups, files, t0)
