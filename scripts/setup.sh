#!/usr/bin/env bash
# Brings a fresh Linux machine to a built Ember: system packages, .venv with the pinned torch,
# the Python dependencies and the extension build. Idempotent; each step is skipped when its
# inputs have not changed, so a second run takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# Paths relative to the checkout, so another clone of the repo hits the same cache entries.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# 1. System packages (Debian/Ubuntu names).
APT_PACKAGES=(g++ cmake ninja-build ccache libgtest-dev llvm-19-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" -ne 0 ]; then
        echo "Ember needs these system packages: ${missing[*]}" >&2
        echo "Install them as root, e.g.: sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    say "installing system packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 2. Python 3.11 virtual environment at the repo root.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for cand in python3.11 python3; do
        if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
            PY=$cand
            break
        fi
    done
fi
if [ ! -x .venv/bin/python ]; then
    [ -n "$PY" ] || { echo "Ember needs Python 3.11 (python3.11 on PATH, or set PYTHON=...)" >&2; exit 1; }
    say "creating .venv with $($PY --version)"
    "$PY" -m venv .venv
fi
VPY=$ROOT/.venv/bin/python

# 3. Python dependencies, reinstalled only when requirements-dev.txt changes.
req_hash=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [ "$(cat .venv/.deps-stamp 2>/dev/null)" != "$req_hash" ]; then
    say "installing Python dependencies (torch==2.13.0 CPU, transformers, pytest, ...)"
    "$VPY" -m pip install -q --upgrade pip
    "$VPY" -m pip install -q -r requirements-dev.txt
    echo "$req_hash" > .venv/.deps-stamp
fi

# 4. The extension: an editable install (Python files load from python/, the compiled module
#    from build/). Rebuilt when a C++ or build file is newer than the last build.
stamp=.venv/.build-stamp
if [ ! -f "$stamp" ] || [ -n "$(find csrc CMakeLists.txt pyproject.toml -newer "$stamp" -print -quit)" ] \
    || ! "$VPY" -c 'import torch_ember' >/dev/null 2>&1; then
    say "building torch_ember (C++ extension, incremental)"
    start=$(date +%s)
    # The stamp takes the build's start time, so a source edited while it builds is newer.
    touch "$stamp.next"
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$VPY" -m pip install -q --no-build-isolation --no-deps -e . \
        -Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache
    mv "$stamp.next" "$stamp"
    say "built in $(( $(date +%s) - start ))s"
fi
