#!/usr/bin/env bash
# Runs every test: the core gtest binary (no PyTorch), then pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# Paths relative to the checkout, so another clone of the repo hits the same cache entries.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1

# Files stay small enough to read: none over 800 lines.
long=$(git ls-files -- '*.cc' '*.h' '*.py' | xargs -r wc -l | awk '$2 != "total" && $1 > 800 {print $2 " (" $1 " lines)"}')
if [ -n "$long" ]; then
    echo "files over 800 lines; split them by concept:" >&2
    echo "$long" >&2
    exit 1
fi

echo "== core (gtest) =="
cmake -S . -B build/core-tests -G Ninja -DEMBER_BUILD_TORCH=OFF -DEMBER_BUILD_TESTS=ON >/dev/null
ninja -C build/core-tests ember_core_tests | tail -n 1
./build/core-tests/tests/cpp/ember_core_tests --gtest_brief=1

echo "== python (pytest) =="
.venv/bin/python -m pytest tests/python -q "$@"
