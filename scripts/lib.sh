# Shared by scripts/demo.sh and scripts/test.sh (sourced, not run): system packages and the project's venv.
# Every check runs before anything is installed or started, so a missing prerequisite stops the script at once
# with one "error:" line and exit code 2, never halfway through.

# Debian/Ubuntu packages, each with the check that tells whether it is already there.
declare -A PACKAGE_CHECK=(
  [python3-venv]="python3 -c 'import ensurepip, venv'"
  [bubblewrap]="command -v bwrap"
  [libseccomp2]="ldconfig -p | grep -q 'libseccomp\.so\.2'"
  [chromium]="command -v chromium"
  [chromium-driver]="command -v chromedriver"
)

fail() { echo "error: $*" >&2; exit 2; }

check_python() {
  command -v python3 >/dev/null 2>&1 || fail "python3 is not installed; install Python 3.10 or newer, then rerun"
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || fail "python3 is $(python3 -V 2>&1 | cut -d' ' -f2); sst-interp needs Python 3.10 or newer"
}

# ensure_packages PKG...: install the missing ones with apt-get (as root, or through passwordless sudo).
ensure_packages() {
  local missing=() package
  for package in "$@"; do
    bash -c "${PACKAGE_CHECK[$package]}" >/dev/null 2>&1 || missing+=("$package")
  done
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null 2>&1 \
    || fail "missing system packages: ${missing[*]}; install them with your package manager, then rerun"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo -n true 2>/dev/null \
      || fail "missing system packages: ${missing[*]}; run 'sudo apt-get install -y ${missing[*]}', then rerun"
    sudo="sudo -n"
  fi
  echo "installing system packages: ${missing[*]}"
  { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
    >/dev/null 2>&1 \
    || fail "apt-get could not install ${missing[*]}; run 'sudo apt-get install -y ${missing[*]}' to see why"
}

# setup_venv EXTRAS: .venv with the CPU torch wheel and the package (editable) with EXTRAS, then activate it.
# Reinstalls only when pyproject.toml changed since the last install of the same extras.
setup_venv() {
  local extras="$1"
  [ -x .venv/bin/python ] || python3 -m venv .venv || fail "could not create .venv (python3 -m venv .venv)"
  # shellcheck disable=SC1091
  . .venv/bin/activate
  local stamp=".venv/.sst-interp-${extras:-base}" want
  want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "installing into .venv: torch 2.13.0 (CPU), then sst-interp${extras:+[$extras]} (log: .venv/install.log)"
    {
      python -m pip install --upgrade pip &&
      # The CPU wheel first: a bare "torch" requirement would pull a multi-GB CUDA build.
      python -m pip install torch==2.13.0 &&
      python -m pip install -e ".${extras:+[$extras]}"
    } > .venv/install.log 2>&1 || fail "pip could not install sst-interp${extras:+[$extras]}; see .venv/install.log"
    echo "$want" > "$stamp"
  fi
}
