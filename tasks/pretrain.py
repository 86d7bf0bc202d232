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
import os
import time

import keras

from zoo.corpus import anisotropy_sentences, default_corpus, document_sources, pretraining_documents
from zoo.distribute import setup
from zoo.evaluation import MaskedTokenEvaluator, token_self_similarity
from zoo.logs import log
from zoo.pretraining_data import PretrainingBatches, PretrainingExamples, StreamingPretrainingBatches
from zoo.train import fit, pretraining_trainer

job = zoo.job("pretrain")  # the flags of `zoo pretrain`, and its results writer
config = job.parse()
t0 = time.time()
os.makedirs(config.output, exist_ok=True)

# 1. Data: de-duplicated documents (corpus + the tasks' train-split texts) -> examples; masking happens per batch.
# --distribute data-parallel: every device (docs: training on many devices); several TensorFlow replicas: no XLA
dist = setup(config.distribute, config.coordinator, config.num_processes, config.process_id, config.batch_size)
config.jit_compile = dist.jit_compile(config.jit_compile)
keras.utils.set_random_seed(config.seed)
start = config.checkpoint or zoo.DEFAULT_PRESET
tokenizer = zoo.Tokenizer.from_preset(start)
corpus = list(config.corpus) or [default_corpus()]
if config.stream:  # read lazily, one buffer of documents at a time
    batches = StreamingPretrainingBatches(tokenizer, document_sources(corpus, config.task_texts, config.data_dir),
                                          config.batch_size, config.eval_every, config.maxlen, config.nsp, config.wwm,
                                          seed=config.seed)
    docs = batches.held_out_documents
    data = {"corpus": corpus, "streamed": True, "held_out_documents": len(docs)}
else:  # in memory: --limit-train N reads only the first N documents, --limit-docs N samples N of them all
    docs = pretraining_documents(corpus, config.task_texts, config.data_dir, first=config.limit_train,
                                 sample=config.limit_docs, seed=config.seed, show_progress=config.progress)
    examples = PretrainingExamples(tokenizer, docs, maxlen=config.maxlen, nsp=config.nsp, wwm=config.wwm,
                                   seed=config.seed)
    log.info("%d documents -> %d examples", len(docs), len(examples.examples))
    batches = PretrainingBatches(examples, batch_size=config.batch_size, steps=config.eval_every)
    data = {"corpus": corpus, "documents": len(docs), "examples": len(examples.examples)}

# 2. Model: a backbone with its MLM head (new, or from a checkpoint); TaCL adds a frozen teacher copy.
taco = config.objective == "taco"
if config.config:
    layers, hidden, heads = (int(v) for v in config.config)
    backbone = zoo.BertBackbone(tokenizer.vocab_size, layers, heads, hidden, 4 * hidden, with_mlm=True,
                                output_hidden_states=taco)
else:
    backbone = zoo.BertBackbone.from_preset(start, with_mlm=True, output_hidden_states=taco)
teacher = zoo.BertBackbone.from_preset(start) if config.objective == "tacl" else None
backbone.tokenizer = tokenizer  # saved with each best backbone

# 3. Loss: MLM on the masked positions (+NSP) (+TaCL / TACO); AdamW, warm-up, linear decay, clipping.
trainer = pretraining_trainer(backbone, config.objective, config.nsp, teacher, lr=config.lr, steps=config.steps,
                              jit_compile=config.jit_compile)

# 4. Train: every --eval-every steps the held-out masked-token accuracy keeps the best backbone.
probe = anisotropy_sentences(docs, n=config.limit_eval or 1000, seed=config.seed)
anisotropy = {"start": token_self_similarity(backbone, tokenizer, probe)}
run = fit(trainer, batches, config.output, epochs=config.steps // config.eval_every, seed=config.seed,
          evaluator=MaskedTokenEvaluator(trainer, batches), save_every=config.save_every, model=backbone,
          show_progress=config.progress, unit="seq",
          metadata={"job": f"pretrain-{config.objective}", "wwm": config.wwm})

# 5. Results: the curve, anisotropy before/after, loss.png.
job.report(config, run, data, tokenizer, probe, anisotropy, t0)
