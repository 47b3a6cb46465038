#!/usr/bin/env bash
# The test suite on a fresh Debian or Ubuntu machine (root, or passwordless sudo): the system packages the tests
# need (bubblewrap and libseccomp2 for the sandbox; chromium and chromium-driver for the browser tests), .venv
# with the dev extras, then pytest in two pytest-xdist workers (one per core of the 2-core CI machine; each keeps to
# one thread, see tests/conftest.py) that take each other's queued tests when idle. Extra arguments go to pytest (e.g. tests/unit/store -x).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
check_python
ensure_packages python3-venv bubblewrap libseccomp2 chromium chromium-driver
setup_venv dev
# worksteal: an idle worker takes tests queued for the other, so a minute-long test near the end of one
# worker's share does not leave the other core idle
python -m pytest -q -n 2 --dist worksteal "$@"
