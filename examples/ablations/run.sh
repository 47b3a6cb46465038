#!/usr/bin/env bash
# The ablation example end to end on the CPU (docs/ablations.md): three SST trainings (the main config, the
# unbiased alpha initialisation, the linked-blend EMA variant) and the matched baseline, each recorded on the same
# demo questions, then one report over all of them. Its numbers are the demo's: 16 steps on Gemma 3 270M say
# nothing about the paper's claims.
set -euo pipefail
OUT=${1:-runs/ablations}
mkdir -p "$OUT"

python -m sst_interp.train --demo --out "$OUT/train-main"
python -m sst_interp.train --demo --theta-init 0 --out "$OUT/train-nobias"
python -m sst_interp.train --demo --update ema_linked --out "$OUT/train-ema"
python -m sst_interp.train --demo --baseline --out "$OUT/train-base"

# The SSTs on the first 8 demo questions at depths 1-3: on the shared machine the default 24 questions x 4 depths
# ran at ~20 s per question-depth and did not fit; the baseline on all 24 at depth 1 (the report pairs by the
# shared question ids and compares the 8 every run holds).
python -m sst_interp.record --checkpoint "$OUT/train-main/best" --limit 8 --depths 1,2,3 --out "$OUT/main"
python -m sst_interp.record --checkpoint "$OUT/train-nobias/best" --limit 8 --depths 1,2,3 --out "$OUT/nobias"
python -m sst_interp.record --checkpoint "$OUT/train-ema/best" --limit 8 --depths 1,2,3 --out "$OUT/ema"
python -m sst_interp.record --checkpoint "$OUT/train-base/best" --depths 1 --out "$OUT/base"

python -m sst_interp.report --run "$OUT/main" --run "$OUT/nobias" --run "$OUT/ema" --baseline "$OUT/base" \
    --training-log "$OUT/train-main" --training-log "$OUT/train-nobias" --training-log "$OUT/train-ema" \
    --training-log "$OUT/train-base" --external gpqa --out "$OUT/report" \
    --only 'tab_alpha_init_ablation,tab_ema_variant_ablation,tab_hyperparameters,fig_sst_vs_nobias_loss,fig_sst_vs_baseline_training_loss,fig_sst_vs_baseline_validation_loss,tab_external_*'
