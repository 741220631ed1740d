#!/usr/bin/env bash
# Set everything up (see scripts/setup.sh --test), then run the whole test suite:
# ruff (lint + format), mypy --strict, the documentation (Sphinx, warnings as errors), eslint,
# prettier, the TypeScript build, the jest unit tests of the Lab extension, the Galata UI tests in
# real Chromium, pytest (unit and integration tests against the real Docker engine and a real
# Jupyter server) and the GPU end-to-end run without a GPU (scripts/gpu-e2e.sh --no-gpu, on an
# engine of its own; results in .cache/gpu-e2e/). Every check runs even when an earlier one
# fails; the exit code is non-zero when any failed. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# An engine started by the set-up for the tests gets the stand-in NVIDIA hook (no GPU here).
export GPUDEV_TEST_NVIDIA_HOOK="${GPUDEV_TEST_NVIDIA_HOOK:-1}"
"$ROOT/scripts/setup.sh" --test
VENV="${GPUDEV_VENV:-$ROOT/.venv}"
cd "$ROOT"
export PATH="$VENV/bin:$PATH"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

passed=0
failed=0
failures=()
check() {
  local name="$1"
  shift
  printf '\n==> %s: %s\n' "$name" "$*"
  local started=$SECONDS
  if "$@"; then
    passed=$((passed + 1))
    echo "--- $name passed ($((SECONDS - started)) s)"
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "--- $name FAILED ($((SECONDS - started)) s)"
  fi
}

check "ruff lint" ruff check .
check "ruff format" ruff format --check .
check "mypy" mypy
check "docs" sphinx-build -W --keep-going -q -b html docs docs/_build/html
check "eslint" npm run --silent eslint
check "prettier" npm run --silent prettier
check "typescript" npm run --silent typecheck
check "jest" npm run --silent test
check "galata" npm run --silent test:ui
check "pytest" pytest "$@"
check "gpu-e2e --no-gpu" scripts/gpu-e2e.sh --no-gpu "$ROOT/.cache/gpu-e2e"

echo
if [ "$failed" -gt 0 ]; then
  echo "Failed checks: ${failures[*]}"
fi
echo "checks: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
