#!/usr/bin/env bash
# Runs every test: the core gtest binary (no PyTorch), then pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"

echo "== core (gtest) =="
cmake -S . -B build/core-tests -G Ninja -DEMBER_BUILD_TORCH=OFF -DEMBER_BUILD_TESTS=ON >/dev/null
ninja -C build/core-tests ember_core_tests | tail -n 1
./build/core-tests/tests/cpp/ember_core_tests --gtest_brief=1

echo "== python (pytest) =="
.venv/bin/python -m pytest tests/python -q "$@"
