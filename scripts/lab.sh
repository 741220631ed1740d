#!/usr/bin/env bash
# Set everything up (see scripts/setup.sh), then run JupyterLab with the GPU Dev extension on the
# local Docker engine. Extra arguments go to `jupyter lab`, e.g. `scripts/lab.sh --port 9999`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
VENV="${GPUDEV_VENV:-$ROOT/.venv}"
args=()
[ "$(id -u)" -eq 0 ] && args+=(--allow-root)
cd "$ROOT"
exec "$VENV/bin/jupyter" lab "${args[@]}" "$@"
