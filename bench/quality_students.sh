#!/usr/bin/env bash
# Issue 58: teach the bi-encoder with the interaction model. Teachers (one cross-encoder per task, full train split,
# from the L4 reference), silver pairs (the teacher's P(similar) on gold and recombined train pairs, 0-5), students
# (zoo-embed-zh-L4 trained further on gold + silver, CoSENT on the graded labels) at three silver sizes. Each step
# skips what is done and each training run resumes where it stopped: rerun the script after a kill.
#   bash bench/quality_students.sh RUNS && python bench/quality_students.py report RUNS
set -euo pipefail
RUNS=${1:-runs/students}
DATA=${DATA:-../shared/data}
mkdir -p "$RUNS"
for task in STS-B ATEC BQ LCQMC; do
    head=softmax; [ "$task" = STS-B ] && head=cosent  # STS-B's 0-5 labels need a graded head
    jit=""; { [ "$task" = BQ ] || [ "$task" = LCQMC ]; } && jit="--no-jit-compile"  # faster here: bench_train_xla
    [ -f "$RUNS/teacher_$task/results.json" ] && continue
    /usr/bin/time -v zoo train cross-encoder --tasks "$task" --head $head \
        --checkpoint ../shared/models/chinese_L-4_H-256_A-4/google --data-dir "$DATA" --maxlen 64 --lr 1e-4 \
        --seed 42 --output "$RUNS/teacher_$task" --no-progress --save-every 500 $jit \
        2> >(tee "$RUNS/teacher_$task.log" >&2)
done
[ -f "$RUNS/teacher_LCQMC_on_PAWSX/results.json" ] || zoo evaluate --model "$RUNS/teacher_LCQMC/model" \
    --tasks PAWSX --data-dir "$DATA" --output "$RUNS/teacher_LCQMC_on_PAWSX"  # transfer: never trained or chosen on
for task in ATEC BQ LCQMC; do
    [ -f "$RUNS/silver/$task/silver.json" ] && continue
    python bench/silver_pairs.py --task "$task" --teacher "$RUNS/teacher_$task/model" --data-dir "$DATA" \
        --limit-train 20000 --sentences 12000 --neighbours 2 --output "$RUNS/silver/$task"
done
student() {
    name=$1 gold=$2 new=$3
    [ -f "$RUNS/$name/data/data.json" ] || python bench/quality_students.py data --silver "$RUNS/silver" \
        --gold "$gold" --new "$new" --data-dir "$DATA" --output "$RUNS/$name/data"
    /usr/bin/time -v zoo train bi-encoder --tasks LCQMC,BQ,ATEC,STS-B --eval-tasks PAWSX --batching task \
        --loss cosent --pooling first-last-avg --data-dir "$RUNS/$name/data" --epochs 1 --lr 2e-5 --save-every 250 \
        --checkpoint zoo-embed-zh-L4 --word-order-valid --no-progress --no-jit-compile --output "$RUNS/$name/run" \
        2> >(tee "$RUNS/$name/run.log" >&2)
}
student st_gold8k 8000 0        # DvBERT: the teacher's soft labels on gold pairs only
student st_gold8k_new8k 8000 8000
student st_gold8k_new20k 8000 20000
