"""Continued pretraining (or from scratch), written out: MLM (+NSP), TaCL or TACO on raw text.

    python tasks/pretrain.py --objective tacl --wwm --checkpoint chinese_L-4_H-256_A-4 --steps 2000 --output runs/tacl
    python tasks/pretrain.py --objective mlm --config 4,256,4 --steps 2000 --output runs/scratch

Rerunning with the same --output resumes. The same job as `zoo pretrain` (zoo/jobs/pretrain.py).

Recorded run (written by tools/results_pages.py from the shipped preset's zoo_config.json):
<!-- generated: pretrained chinese_L-4_H-256_A-4_mlm1k -->
    python tasks/pretrain.py --objective mlm --wwm --no-nsp --steps 1000 --eval-every 200 --batch-size 32 \\
        --maxlen 64 --limit-docs 100000 --lr 1e-4 --data-dir ../shared/data (bench/pretraining_study.sh)

Shipped as the preset chinese_L-4_H-256_A-4_mlm1k (kept: step 800): held-out masked-token accuracy 34.93%
(data/presets/chinese_L-4_H-256_A-4_mlm1k/zoo_config.json).
<!-- /generated -->
"""

import zoo

zoo.logs.setup_cli()  # first: the backend's start-up lines stay out of the terminal; Ctrl-C ends in one line

# ruff: noqa: E402  (imports after setup_cli)
import time

job = zoo.job("pretrain")  # the flags of `zoo pretrain`, and its steps
config = job.parse()
steps = job.steps
t0 = time.time()

# 0. Start: the distribution (--distribute data-parallel: every device), the run folder, the seed.
checkpoint = steps.start(config)

# 1. Data: de-duplicated documents (corpus + the tasks' train-split texts) -> examples, masked per batch; or read
#    lazily (--stream); --limit-train N reads only the first N documents, --limit-docs N samples N of them all.
tokenizer = steps.tokenizer(config, checkpoint)
batches, docs, data = steps.batches(config, tokenizer)

# 2. Model: a backbone with its MLM head (new: --config, or from the checkpoint); TaCL adds a frozen teacher copy.
backbone, teacher = steps.model(config, checkpoint, tokenizer)

# 3. Loss: MLM on the masked positions (+NSP) (+TaCL / TACO); AdamW, warm-up, linear decay, clipping.
trainer = steps.trainer(config, backbone, teacher)

# 4. Train: every --eval-every steps the held-out masked-token accuracy keeps the best backbone; anisotropy of the
#    start measured on sentences of the text.
probe, anisotropy = steps.probe(config, backbone, tokenizer, docs)
run = steps.train(config, trainer, batches, backbone, tokenizer)

# 5. Results: the curve, anisotropy before/after, loss.png.
steps.report(config, run, data, tokenizer, probe, anisotropy, t0)
