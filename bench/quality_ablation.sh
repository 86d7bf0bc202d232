#!/usr/bin/env bash
# The general model's ablation (bench/quality_ablation.py): four runs at 10,000 train pairs per task, one after the
# other; each resumes exactly where it stopped, so rerun the script after a kill. About 30 min per run on 2 cores.
#   bash bench/quality_ablation.sh runs && python bench/quality_ablation.py runs/abl_{base,wo,ib,both}
set -euo pipefail
RUNS=${1:-runs}
train() {
    name=$1; shift
    /usr/bin/time -v zoo train bi-encoder --tasks LCQMC,BQ,ATEC,STS-B --eval-tasks PAWSX --batching task --limit-train 10000 \
        --pooling first-last-avg --warmup 0.1 --data-dir ../shared/data --epochs 1 --lr 1e-4 --save-every 500 \
        --checkpoint ../shared/models/chinese_L-4_H-256_A-4/google --word-order-valid --output "$RUNS/$name" "$@" 2> >(tee "$RUNS/$name.log" >&2)
}
train abl_base
train abl_wo --word-order-negatives 8
train abl_ib --in-batch-weight 1
train abl_both --word-order-negatives 8 --in-batch-weight 1
