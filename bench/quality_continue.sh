#!/usr/bin/env bash
# Issue 35: continue training the shipped zoo-embed-zh-L4 (not the base checkpoint) on its own four tasks with
# word-order negatives at several doses. Constant lr (no warm-up), so a run's epoch E equals a shorter run of E
# epochs: the dose and the epoch are chosen afterwards on valid (bench/quality_continue.py). Each run resumes
# exactly where it stopped: rerun the script after a kill.
#   bash bench/quality_continue.sh runs && python bench/quality_continue.py runs/cont_*
set -euo pipefail
RUNS=${1:-runs}
mkdir -p "$RUNS"
train() {
    name=$1; shift
    /usr/bin/time -v zoo train bi-encoder --tasks LCQMC,BQ,ATEC,STS-B --eval-tasks PAWSX --batching task \
        --limit-train 4000 --pooling first-last-avg --data-dir ../shared/data --epochs 3 --lr 2e-5 --save-every 250 \
        --checkpoint zoo-embed-zh-L4 --word-order-valid --no-progress --output "$RUNS/$name" "$@" \
        2> >(tee "$RUNS/$name.log" >&2)
}
train cont_wo2 --word-order-negatives 2
train cont_wo4 --word-order-negatives 4
train cont_wo1 --word-order-negatives 1
train cont_base
train cont_wo2_ib --word-order-negatives 2 --in-batch-weight 1
