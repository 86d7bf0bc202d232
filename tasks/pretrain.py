"""Continued pretraining (or from scratch), written out: MLM (+NSP), TaCL or TACO on raw text.

    python tasks/pretrain.py --objective tacl --wwm --from chinese_L-4_H-256_A-4 --steps 2000 --output runs/tacl
    python tasks/pretrain.py --objective mlm --config 4,256,4 --steps 2000 --output runs/scratch

Rerunning with the same --output resumes. The same job as `zoo pretrain` (zoo/jobs/pretrain.py).
"""

import os
import time

import zoo  # noqa: I001  (first: it imports Keras with TensorFlow's start-up lines silenced)
import keras

from zoo.config import parse
from zoo.corpus import anisotropy_sentences, document_sources
from zoo.evaluation import token_self_similarity
from zoo.jobs.common import setup_distribution
from zoo.jobs.pretrain import BackbonePreset, MaskedTokenEvaluator, PretrainConfig, corpus_paths, documents, report
from zoo.logs import log, setup_cli
from zoo.losses import first_output_loss
from zoo.pretraining_data import PretrainingBatches, PretrainingExamples, StreamingPretrainingBatches
from zoo.models.pretrainer import build_pretrainer
from zoo.train import WarmupLinear, fit

setup_cli()
config = parse(PretrainConfig)
t0 = time.time()
os.makedirs(config.output, exist_ok=True)

# 1. Data: de-duplicated documents (corpus + the tasks' train-split texts) -> examples; masking happens per batch.
setup_distribution(config)  # --distribute data-parallel: every device (README: many GPUs / hosts)
keras.utils.set_random_seed(config.seed)
start = config.start or zoo.DEFAULT_PRESET
tokenizer = zoo.Tokenizer.from_preset(start)
if config.stream:  # read lazily, one buffer of documents at a time (README: many GPUs / hosts)
    corpus = corpus_paths(config)
    batches = StreamingPretrainingBatches(tokenizer, document_sources(corpus, config.task_texts, config.data_dir),
                                          config.batch_size, config.eval_every, config.maxlen, config.nsp, config.wwm,
                                          seed=config.seed)
    docs = batches.held_out_documents
    data = {"corpus": corpus, "streamed": True, "held_out_documents": len(docs)}
else:
    corpus, docs = documents(config)
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

# 3. Loss: MLM on the masked positions (+NSP) (+TaCL / TACO); AdamW, warm-up, linear decay, clipping.
trainer = build_pretrainer(backbone, config.objective, config.nsp, teacher)
trainer.compile(optimizer=keras.optimizers.AdamW(WarmupLinear(config.lr, int(0.1 * config.steps), config.steps),
                                                 weight_decay=0.01, clipnorm=1.0),
                loss=first_output_loss, jit_compile=config.jit_compile)

# 4. Train: every --eval-every steps the held-out masked-token accuracy keeps the best backbone.
probe = anisotropy_sentences(docs, seed=config.seed)
anisotropy = {"start": token_self_similarity(backbone, tokenizer, probe)}
run = fit(trainer, batches, config.output, epochs=config.steps // config.eval_every, seed=config.seed,
          evaluator=MaskedTokenEvaluator(trainer, batches), save_every=config.save_every,
          model=BackbonePreset(backbone, tokenizer, {"job": f"pretrain-{config.objective}", "wwm": config.wwm}),
          show_progress=config.progress, unit="seq")

# 5. Results: the curve, anisotropy before/after, loss.png.
report(config, run, data, tokenizer, probe, anisotropy, t0)
