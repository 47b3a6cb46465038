#!/usr/bin/env bash
# The main job on the embedded default model: set up .venv, record the demo questions at depths 1-4 into
# runs/demo, then write every table and figure the run supports to reports/ (open reports/index.html).
# Extra arguments go to `record` (e.g. --limit 8).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
check_python
ensure_packages python3-venv
setup_venv explore
python -m sst_interp.record "$@"
python -m sst_interp.report
