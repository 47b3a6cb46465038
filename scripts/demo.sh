#!/usr/bin/env bash
# The main job, on two models: set up .venv, then
#   1. the hops organism (a looped HRM-Text trained by this project on k-hop pointer chasing, where the depth each
#      question needs is known): record 240 test questions at depths 1-4 into runs/hops-organism, write its report
#      to reports/hops-organism/ and check every measurement against the task (reports/hops-organism/validation/);
#   2. the embedded default model (the untrained Gemma 3 270M demo preset): record the demo questions at depths 1-4
#      into runs/demo, then write every table and figure the run supports to reports/ (open reports/index.html).
# Extra arguments go to the second `record` (e.g. --limit 8).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
check_python
ensure_packages python3-venv
setup_venv explore
python -m sst_interp.record --model hops-organism --questions hops --depths 1,2,3,4 --limit 240 \
  --out runs/hops-organism
python -m sst_interp.report --run runs/hops-organism --out reports/hops-organism
python -m sst_interp.organism validate --run runs/hops-organism --out reports/hops-organism/validation
python -m sst_interp.record "$@"
python -m sst_interp.report   # the most recent run: the one just recorded
