"""Pretraining job: continue pretraining a checkpoint (or train one from scratch) with MLM (+NSP), TaCL or TACO
on raw text plus the train-split texts of the tasks; every ``eval_every`` steps the masked-token accuracy on
held-out examples picks the best backbone (the start included), saved as a preset in OUTPUT/model."""

from __future__ import annotations

import dataclasses
import os
import time

from ..choices import PRETRAINING_OBJECTIVES as OBJECTIVES
from ..config import DistributeOptions, check_positive, option
from ..data.corpus import anisotropy_sentences, default_corpus, document_sources, pretraining_documents
from ..errors import ConfigError
from ..logs import log
from ..paths import DEFAULT_PRESET
from .common import check_checkpoint, check_tasks, setup_distribution


@dataclasses.dataclass
class PretrainConfig(DistributeOptions):
    """MLM / TaCL / TACO pretraining of a BERT backbone."""

    objective: str = option("mlm", "mlm: masked LM (+NSP); tacl: + token contrast with a frozen teacher; taco: + "
                                   "token-alignment contrast", choices=OBJECTIVES)
    checkpoint: str | None = option(None, f"checkpoint to continue from (default: {DEFAULT_PRESET})",
                                    aliases=("--from",))
    config: tuple = option((), "L,H,A: train a new backbone from scratch (the vocabulary of --checkpoint)")
    corpus: tuple = option((), "corpus files or folders (default: ../shared/data/corpus)")
    task_texts: tuple = option(("LCQMC", "BQ", "STS-B"), "tasks whose train-split texts join the corpus")
    data_dir: str | None = option(None, "where the tasks' files are (as for the task jobs)")
    wwm: bool = option(False, "whole-word masking with jieba")
    nsp: bool = option(True, "no next-sentence prediction: single chunks")
    steps: int = option(1000, "training steps")
    eval_every: int = option(200, "steps between held-out evaluations (one 'epoch' each)")
    batch_size: int = option(32, "sequences per step")
    maxlen: int = option(128, "tokens per sequence")
    lr: float = option(1e-4, "peak learning rate (AdamW, 10% warm-up, linear decay)")
    limit_train: int | None = option(None, "read only the first N documents (the sources taken in turn; quick "
                                           "trials)")
    limit_docs: int | None = option(None, "train on a random sample of N documents of the whole corpus")
    limit_eval: int | None = option(None, "measure anisotropy on N sentences of the text (default 1,000; the "
                                          "held-out masked-token accuracy is always 4 batches)")
    stream: bool = option(False, "read the corpus and task texts lazily: memory holds one buffer of documents, "
                                 "whatever the corpus size (not de-duplicated)")
    output: str = option("runs/pretrain", "run folder (rerun to resume)")
    seed: int = option(42, "random seed")
    save_every: int = option(200, "steps between checkpoints")
    jit_compile: bool = option(True, "train without XLA compilation")
    progress: bool = option(True, "no progress bars")

    def __post_init__(self):
        check_positive(self, "steps", "eval_every", "batch_size", "save_every")
        check_positive(self, "limit_train", "limit_docs", "limit_eval", optional=True)
        self.eval_every = min(self.eval_every, self.steps)  # --steps 5: five steps, one evaluation
        if self.steps % self.eval_every:
            raise ConfigError(f"--steps ({self.steps}) must be a multiple of --eval-every ({self.eval_every}), "
                              f"e.g. --eval-every {self.steps} for a single evaluation at the end")
        if self.config and len(self.config) != 3:
            raise ConfigError(f"--config is L,H,A (layers, hidden size, heads), got {','.join(self.config)}")
        if self.config and self.checkpoint:
            raise ConfigError("give --checkpoint (continue) or --config (from scratch), not both")
        check_checkpoint(self.checkpoint)
        if self.task_texts:
            check_tasks(self.task_texts, "--task-texts")
        if self.stream and (self.limit_docs is not None or self.limit_train is not None):
            raise ConfigError("--limit-docs / --limit-train read the corpus into memory; they do not go with --stream")
        if self.limit_docs is not None and self.limit_train is not None:
            raise ConfigError("give --limit-train (the first N documents) or --limit-docs (a random sample), not both")


# ---------------------------------------------------------------------------------- the job's steps
# ``run`` calls them in this order, and so does the recipe (tasks/pretrain.py).
STEPS = ("start", "tokenizer", "batches", "model", "trainer", "probe", "train", "report")


def start(config):
    """The distribution (``--distribute``), the run folder, the seed -> the checkpoint to start from."""
    import keras

    setup_distribution(config)
    os.makedirs(config.output, exist_ok=True)
    keras.utils.set_random_seed(config.seed)
    return config.checkpoint or DEFAULT_PRESET


def tokenizer(config, checkpoint):
    """The checkpoint's tokenizer (a new backbone, ``--config``, uses its vocabulary too)."""
    from ..tokenizer.wordpiece import Tokenizer

    return Tokenizer.from_preset(checkpoint)


def documents(config):
    """(corpus paths, documents) of the job's settings (``zoo.data.corpus.pretraining_documents``)."""
    corpus = list(config.corpus) or [default_corpus()]
    return corpus, pretraining_documents(corpus, config.task_texts, config.data_dir, first=config.limit_train,
                                         sample=config.limit_docs, seed=config.seed, show_progress=config.progress)


def batches(config, tokenizer):
    """(batches, documents for the anisotropy probe, the data record of results.json): de-duplicated documents
    (corpus + the tasks' train-split texts) as examples in memory, or streamed (``--stream``); masking happens per
    batch."""
    from ..data.pretraining import PretrainingBatches, PretrainingExamples, StreamingPretrainingBatches

    if config.stream:
        corpus = list(config.corpus) or [default_corpus()]
        source = StreamingPretrainingBatches(tokenizer, document_sources(corpus, config.task_texts, config.data_dir),
                                             config.batch_size, config.eval_every, config.maxlen, config.nsp,
                                             config.wwm, seed=config.seed)
        log.info("streaming %d source(s); %d held-out documents", len(source.sources),
                 len(source.held_out_documents))
        return source, source.held_out_documents, {"corpus": corpus, "streamed": True,
                                                   "held_out_documents": len(source.held_out_documents)}
    corpus, docs = documents(config)
    examples = PretrainingExamples(tokenizer, docs, maxlen=config.maxlen, nsp=config.nsp, wwm=config.wwm,
                                   seed=config.seed)
    log.info("%d documents -> %d examples", len(docs), len(examples.examples))
    source = PretrainingBatches(examples, batch_size=config.batch_size, steps=config.eval_every)
    return source, docs, {"corpus": corpus, "documents": len(docs), "examples": len(examples.examples)}


def model(config, checkpoint, tokenizer):
    """(backbone with its MLM head, new (``--config L,H,A``) or from the checkpoint; TaCL's frozen teacher copy or
    None). The tokenizer is saved with each best backbone."""
    from ..backbones import BertBackbone

    taco = config.objective == "taco"
    if config.config:
        layers, hidden, heads = (int(v) for v in config.config)
        backbone = BertBackbone(tokenizer.vocab_size, layers, heads, hidden, 4 * hidden, with_mlm=True,
                                output_hidden_states=taco)
    else:
        backbone = BertBackbone.from_preset(checkpoint, with_mlm=True, output_hidden_states=taco)
    teacher = BertBackbone.from_preset(checkpoint) if config.objective == "tacl" else None
    return backbone, teacher


def trainer(config, backbone, teacher):
    """The compiled pretrainer: MLM on the masked positions (+NSP) (+TaCL / TACO); AdamW, warm-up, linear decay,
    clipping (``zoo.train.pretraining_trainer``)."""
    from ..train.steps import pretraining_trainer

    return pretraining_trainer(backbone, config.objective, config.nsp, teacher, lr=config.lr, steps=config.steps,
                               jit_compile=config.jit_compile)


def probe(config, backbone, tokenizer, docs):
    """(probe sentences of the pretraining text, {"start": the backbone's anisotropy on them})."""
    from ..evaluation import token_self_similarity

    sentences = anisotropy_sentences(docs, n=config.limit_eval or 1000, seed=config.seed)
    return sentences, {"start": token_self_similarity(backbone, tokenizer, sentences)}


def train(config, trainer, batches, backbone, tokenizer):
    """Keras fit, resumable (``zoo.train.fit``): every ``--eval-every`` steps the held-out masked-token accuracy
    keeps the best backbone (with its tokenizer) in OUTPUT/model -> the Run."""
    from ..evaluation import MaskedTokenEvaluator
    from ..train.loop import fit

    backbone.tokenizer = tokenizer  # saved with each best backbone
    return fit(trainer, batches, config.output, epochs=config.steps // config.eval_every, seed=config.seed,
               evaluator=MaskedTokenEvaluator(trainer, batches), model=backbone, save_every=config.save_every,
               show_progress=config.progress, unit="seq",
               metadata={"job": f"pretrain-{config.objective}", "wwm": config.wwm})


def run(config: PretrainConfig):
    """The job: its steps in order; returns the results dict (also written to OUTPUT/results.json and
    results.md)."""
    t0 = time.time()
    checkpoint = start(config)
    tok = tokenizer(config, checkpoint)
    source, docs, record = batches(config, tok)
    backbone, teacher = model(config, checkpoint, tok)
    compiled = trainer(config, backbone, teacher)
    sentences, anisotropy = probe(config, backbone, tok, docs)
    result = train(config, compiled, source, backbone, tok)
    return report(config, result, record, tok, sentences, anisotropy, t0)


def report(config, run, data, tokenizer, probe, anisotropy, t0):
    """Anisotropy of the best model, loss.png, results.json and results.md of a pretraining run."""
    from .. import distribute
    from ..backbones import BertBackbone
    from ..evaluation import token_self_similarity
    from ..train.results import table, write_results

    anisotropy["best"] = token_self_similarity(BertBackbone.from_preset(run.model_dir), tokenizer, probe)
    plot_curve(run.history, os.path.join(config.output, "loss.png"), f"{config.objective} pretraining")
    markdown = table(["round", "step", "masked-token accuracy %", "train loss (epoch mean)"],
                     [(h["epoch"], h["epoch"] * config.eval_every, h["masked_accuracy"], h["train_loss"])
                      for h in run.history])
    markdown += (f"\n\nanisotropy ({len(probe)} sentences of the pretraining text; mean token cosine): "
                 f"start intra {anisotropy['start']['intra']:.3f} inter {anisotropy['start']['inter']:.3f}, "
                 f"best intra {anisotropy['best']['intra']:.3f} inter {anisotropy['best']['inter']:.3f}")
    return write_results(config.output, {
        "config": {**dataclasses.asdict(config), "start": config.checkpoint or DEFAULT_PRESET, **data},
        "distribution": distribute.current().record(config.batch_size),
        "curve": run.history, "best": run.best, "anisotropy": anisotropy,
        "train_seconds": run.train_seconds, "seconds": time.time() - t0}, markdown)


def plot_curve(history, path, title):
    """loss.png: training loss and held-out masked-token accuracy per evaluation round."""
    from ..logs import pyplot

    plt = pyplot()
    if plt is None:
        return

    fig, ax = plt.subplots(figsize=(6, 3.5))
    trained = [h for h in history if h["train_loss"] is not None]
    ax.plot([h["epoch"] for h in trained], [h["train_loss"] for h in trained], "o-", label="train loss (mean)")
    ax.set_xlabel("evaluation round")
    ax.set_ylabel("loss")
    ax2 = ax.twinx()
    ax2.plot([h["epoch"] for h in history], [h["masked_accuracy"] for h in history], "s--", color="C1",
             label="masked-token accuracy %")
    ax2.set_ylabel("masked accuracy %")
    ax.set_title(title)
    fig.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
