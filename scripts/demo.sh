#!/usr/bin/env bash
# The main job, on two models, the first report readable within minutes: set up .venv, then
#   1. the hops organism (a looped HRM-Text trained by this project on k-hop pointer chasing, where the depth each
#      question needs is known): record 240 test questions at depths 1-4, with attention, into runs/hops-organism
#      and write its report to reports/hops-organism/;
#   2. the embedded default model (the untrained Gemma 3 270M demo preset): record the demo questions at depths 1-4
#      into runs/demo, then write every table and figure the run supports to reports/ (open reports/index.html);
#   3. check every measurement on the organism against the task (reports/hops-organism/validation/), the slowest
#      step, last.
# Extra arguments go to the default model's `record` (e.g. --limit 8). Each step prints its start time.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
check_python
ensure_packages python3-venv
setup_venv explore
step() { echo "[$(date +%H:%M:%S)] $*"; }
step "1/3 the hops organism: record and report"
python -m sst_interp.record --model hops-organism --questions hops --depths 1,2,3,4 --limit 240 --attention all \
  --out runs/hops-organism
python -m sst_interp.report --run runs/hops-organism --out reports/hops-organism
step "the organism's report is ready: reports/hops-organism/index.html"
step "2/3 the default model: record and report"
python -m sst_interp.record "$@"
python -m sst_interp.report   # the most recent run: the one just recorded
step "3/3 every measurement on the organism against its task"
python -m sst_interp.organism validate --run runs/hops-organism --out reports/hops-organism/validation
step "done: reports/index.html, reports/hops-organism/index.html, reports/hops-organism/validation/validation.md"
