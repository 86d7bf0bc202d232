"""``zoo mine-negatives``: pairs (or triplets) of yours -> (anchor, positive, negative) rows with mined hard negatives
(``zoo.retrieval.mining``), a TSV the bi-encoder job trains on as triplets, and a JSON report beside it."""

from __future__ import annotations

import dataclasses
import json
import os

from ..config import option
from ..errors import ConfigError
from ..logs import log, rerun_command
from ..paths import DEFAULT_ENCODER, write_json_atomic, write_text_atomic


@dataclasses.dataclass
class MineNegativesConfig:
    """Mine hard negatives for the paraphrase pairs of a pair file, with any zoo encoder."""

    input: str = option(None, "your pairs: a pair file or folder of shards, any format of --train; its paraphrase "
                              "pairs (label 1, or 4 and up of 0-5; a triplet file's anchor and positive) are mined for",
                        required=True)
    output: str = option(None, "the triplet file to write: anchor, positive, negative (TSV with a header line)",
                         required=True)
    corpus: str | None = option(None, "a text file, one text per line, negatives are taken from (default: the "
                                      "input's positives)")
    model: str = option(DEFAULT_ENCODER, "the encoder that ranks the candidates (preset name or folder, run folder)")
    columns: tuple = option((), "the input's columns as ROLE=COLUMN (as --columns of the training jobs)")
    negatives: int = option(1, "negatives per pair (one triplet row each)")
    range_min: int = option(0, "skip the closest N candidates (near-paraphrases the data set did not label)")
    range_max: int = option(50, "consider candidates up to this rank")
    margin: float | None = option(None, "a negative scores at most the positive's cosine minus this")
    max_score: float | None = option(None, "a negative's cosine is at most this")
    cross_encoder: str | None = option(None, "a trained cross-encoder that checks each candidate: above "
                                             "--cross-encoder-max-score it is taken for an unlabelled positive")
    cross_encoder_max_score: float = option(0.5, "--cross-encoder: the highest score a negative may get")
    batch_size: int = option(64, "texts per model call")

    def __post_init__(self):
        from .common import check_checkpoint

        if self.negatives < 1:
            raise ConfigError(f"--negatives must be >= 1, got {self.negatives}")
        if self.range_min < 0 or self.range_max <= self.range_min:
            raise ConfigError(f"--range-min {self.range_min} and --range-max {self.range_max}: need "
                              "0 <= --range-min < --range-max")
        check_checkpoint(self.model, "--model")
        if self.cross_encoder:
            check_checkpoint(self.cross_encoder, "--cross-encoder")


def run(config: MineNegativesConfig):
    """Read the pairs, mine, write OUTPUT (atomically) and OUTPUT.json (settings and counts); returns the report."""
    from ..data.pair_files import paraphrase_mask, read_pairs
    from ..data.tasks import read_lines
    from ..models import from_preset
    from ..retrieval.mining import mine_hard_negatives

    data = read_pairs(config.input, columns=config.columns)
    mask = paraphrase_mask(data.labels)
    pairs = [(a, b) for a, b, keep in zip(data.texts_a, data.texts_b, mask) if keep]
    if not pairs:
        raise ConfigError(f"{config.input}: no paraphrase pairs (label 1, or 4 and up of 0-5) to mine for")
    log.info("%s: %d paraphrase pairs of %d", config.input, len(pairs), len(data))
    corpus = read_lines(config.corpus) if config.corpus else None
    cross_encoder = from_preset(config.cross_encoder) if config.cross_encoder else None
    triplets, report = mine_hard_negatives(
        pairs, from_preset(config.model), corpus, num_negatives=config.negatives, range_min=config.range_min,
        range_max=config.range_max, margin=config.margin, max_score=config.max_score, cross_encoder=cross_encoder,
        cross_encoder_max_score=config.cross_encoder_max_score, batch_size=config.batch_size)
    if not triplets:
        raise ConfigError("no negative passed the filters: widen --range-max, or loosen --margin / --max-score")
    clean = [tuple(t.replace("\t", " ").replace("\n", " ") for t in row) for row in triplets]
    write_text_atomic(config.output, "anchor\tpositive\tnegative\n" + "".join("\t".join(r) + "\n" for r in clean))
    record = {"command": rerun_command(), "config": dataclasses.asdict(config), **dataclasses.asdict(report)}
    write_json_atomic(config.output + ".json", record)
    log.info("wrote %s: %d triplets for %d pairs (%s)", config.output, report.triplets, report.pairs,
             json.dumps({k: v for k, v in dataclasses.asdict(report).items() if k.startswith(("removed", "pairs_w"))}))
    return {"output": os.path.abspath(config.output), **dataclasses.asdict(report)}
