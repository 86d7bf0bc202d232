#!/usr/bin/env bash
# Continued pretraining of the default L4 preset with plain MLM and with MLM + TaCL (same steps, same data,
# jieba whole-word masking, no NSP), then the CoSENT recipe of the main table on each result, and Mirror-BERT
# zero-shot from the reference. Every step resumes when rerun (finished runs are reloaded, not retrained).
#
#   bash bench/pretraining_study.sh                      # STEPS=1000 TASKS="STS-B BQ LCQMC" OUT=runs/pretraining_study
#   STEPS=3000 TASKS=STS-B bash bench/pretraining_study.sh
#
# The reference rows are the main CoSENT table's runs (python tasks/train_bi_encoder.py --task T --loss cosent
# --pooling cls --epochs E --lr 1e-4 without --checkpoint). Wall time on 2 CPU cores: about 20 min per
# pretraining run, then 12 (STS-B), 20 (BQ) and 50 (LCQMC) min per CoSENT run; minutes on a GPU (KERAS_BACKEND=jax).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
DATA=${DATA:-../shared/data}
STEPS=${STEPS:-1000}
TASKS=${TASKS:-"STS-B BQ LCQMC"}
OUT=${OUT:-runs/pretraining_study}

for objective in mlm tacl; do
  "$PYTHON" tasks/pretrain.py --objective "$objective" --wwm --no-nsp --steps "$STEPS" --eval-every 200 \
    --batch-size 32 --maxlen 64 --limit-docs 100000 --lr 1e-4 --data-dir "$DATA" --output "$OUT/$objective"
done
"$PYTHON" tasks/mirror_bert.py --data-dir "$DATA" --output "$OUT/mirror_bert"
for task in $TASKS; do
  epochs=1
  if [ "$task" = STS-B ]; then epochs=5; fi
  for objective in mlm tacl; do
    "$PYTHON" tasks/train_bi_encoder.py --task "$task" --loss cosent --pooling cls --checkpoint "$OUT/$objective" \
      --data-dir "$DATA" --epochs "$epochs" --lr 1e-4 --output "$OUT/${task}_cosent_$objective"
  done
done
