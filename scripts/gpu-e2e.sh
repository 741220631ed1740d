#!/usr/bin/env bash
# gpudev end to end on a real NVIDIA GPU (issue #31), and the same run without one in CI.
#
#   scripts/gpu-e2e.sh prepare              here: make .gpu-e2e/, the carried folder (the engine
#                                           from Debian's packages, the project's wheel and the
#                                           wheels the GPU machine's Python lacks); prints its size
#   scripts/gpu-e2e.sh run RESULTS_DIR      on the GPU machine (root, no network): the whole run
#   scripts/gpu-e2e.sh --no-gpu RESULTS_DIR here or in CI: prepare, then the run without the GPU
#                                           steps (the fake nvidia-smi's H200 stands in)
#
# The run starts an engine of its own from the carried binaries (its own data root, exec root,
# socket, pidfile and address pool, 10.213.0.0/16; never the machine's other engine), has
# benchmarks/gpu_e2e.py do every step through a real Jupyter server's REST API, and stops that
# engine and removes its data root at the end, whatever happened. Results (at most 5 files):
# RESULTS_DIR/gpu-e2e.md, gpu-e2e.log, server.log, engine.log, results.json; a GPU run also
# writes benchmarks/results/gpu-e2e.md. What each step checks: benchmarks/gpu_e2e.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARRIED="$ROOT/.gpu-e2e"
POOL="base=10.213.0.0/16,size=24"
# The default bridge of its engine where this machine has an engine of its own: dockerd
# started with --bridge=none deletes docker0, that engine's bridge (the test command runs this
# script with --no-gpu beside the machine's engine). On the GPU machine there is none.
BRIDGE="gpue2e0"
BRIDGE_ADDRESS="10.212.255.1/24"

usage() {
  echo "usage: $0 prepare | run RESULTS_DIR | --no-gpu RESULTS_DIR" >&2
  exit 2
}

prepare() {
  local python="${GPUDEV_VENV:-$ROOT/.venv}/bin/python"
  [ -x "$python" ] || { echo "gpu-e2e: no $python: run scripts/setup.sh first" >&2; exit 1; }
  "$python" "$ROOT/benchmarks/gpu_e2e_prepare.py"
}

WORK=""
PYTHON=""
LOADER_LIB="/usr/lib/x86_64-linux-gnu/libdevmapper.so.1.02.1"
PLACED_LIB=""
ENGINE_PIDS=()
cleanup() {
  local status=$?
  [ -n "$WORK" ] || return "$status"
  if [ -f "$WORK/dockerd.pid" ]; then
    kill -TERM "$(cat "$WORK/dockerd.pid")" 2>/dev/null || true
  fi
  for pid in "${ENGINE_PIDS[@]}"; do # dockerd first, then containerd
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  # What the engine left mounted under its own folders, deepest first; then its bridges.
  { findmnt -rn -o TARGET | grep -F "$WORK/" | sort -r || true; } | while read -r target; do
    umount -l "$target" 2>/dev/null || true
  done
  { ip -o -4 addr show 2>/dev/null || true; } |
    awk '$4 ~ /^10\.213\./ && $2 ~ /^br-/ {print $2}' | sort -u |
    while read -r bridge; do ip link delete "$bridge" 2>/dev/null || true; done
  ip link delete "$BRIDGE" 2>/dev/null || true
  if [ -n "$PLACED_LIB" ]; then rm -f "$LOADER_LIB"; fi
  if [ -n "${RESULTS:-}" ] && [ -d "$RESULTS" ]; then
    cat "$WORK/containerd.log" "$WORK/dockerd.log" >"$RESULTS/engine.log" 2>/dev/null || true
  fi
  if mountpoint -q "$WORK"; then umount -l "$WORK" || true; fi
  rm -rf "$WORK"
  echo "gpu-e2e: engine stopped, $WORK removed"
  return "$status"
}

start_engine() {
  local bin="$WORK/bin"
  mkdir -p "$bin"
  if command -v xz >/dev/null 2>&1; then
    tar -C "$bin" -xJf "$CARRIED/engine.tar.xz"
  else # Python's lzma then (the GPU machine's image may lack xz)
    "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$CARRIED/engine.tar.xz" "$bin"
  fi
  # overlay2 cannot stack on an overlay root file system (the GPU machine's): a tmpfs then.
  if [ "$(stat -f -c %T "$WORK")" = overlayfs ]; then
    echo "gpu-e2e: $WORK is on overlayfs: the engine's data root goes on a tmpfs"
    mkdir -p "$WORK/engine"
    mount -t tmpfs -o size=60% tmpfs "$WORK/engine"
  fi
  local data="$WORK/engine"
  mkdir -p "$data"
  cat >"$WORK/containerd.toml" <<EOF
version = 2
root = "$data/containerd"
state = "$WORK/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$WORK/containerd.sock"
[ttrpc]
  address = "$WORK/containerd.sock.ttrpc"
EOF
  echo '{}' >"$WORK/daemon.json"
  PATH="$bin:$PATH" "$bin/containerd" --config "$WORK/containerd.toml" \
    >"$WORK/containerd.log" 2>&1 &
  ENGINE_PIDS=("$!")
  for _ in $(seq 100); do
    [ -S "$WORK/containerd.sock" ] && break
    sleep 0.1
  done
  # runc runs dockerd's libnetwork-setkey hook (a network's container start) without the
  # LD_LIBRARY_PATH below: where this machine lacks libdevmapper, the carried one goes where
  # the loader looks by default for as long as the engine runs (removed at the end).
  if ! ldconfig -p 2>/dev/null | grep -qF 'libdevmapper.so.1.02.1 ' &&
    [ -d /usr/lib/x86_64-linux-gnu ] && [ ! -e "$LOADER_LIB" ]; then
    cp "$bin/lib/libdevmapper.so.1.02.1" "$LOADER_LIB"
    PLACED_LIB=1
  fi
  local bridge="none"
  if ip link show docker0 >/dev/null 2>&1; then
    ip link delete "$BRIDGE" 2>/dev/null || true # one a killed run left
    if ! { ip link add "$BRIDGE" type bridge && ip addr add "$BRIDGE_ADDRESS" dev "$BRIDGE" &&
      ip link set "$BRIDGE" up; }; then
      echo "gpu-e2e: cannot make the bridge $BRIDGE; without it dockerd deletes docker0" >&2
      exit 1
    fi
    bridge="$BRIDGE"
  fi
  PATH="$bin:$PATH" LD_LIBRARY_PATH="$bin/lib" "$bin/dockerd" \
    --config-file "$WORK/daemon.json" \
    --data-root "$data/docker" --exec-root "$WORK/exec" --pidfile "$WORK/dockerd.pid" \
    --host "unix://$WORK/docker.sock" --containerd "$WORK/containerd.sock" \
    --iptables=false --ip-masq=false --bridge="$bridge" --default-address-pool "$POOL" \
    --userland-proxy-path "$bin/docker-proxy" >"$WORK/dockerd.log" 2>&1 &
  ENGINE_PIDS=("$!" "${ENGINE_PIDS[@]}")
  export DOCKER_HOST="unix://$WORK/docker.sock"
}

run() { # run [--no-gpu]
  [ -f "$CARRIED/engine.tar.xz" ] || { echo "gpu-e2e: no $CARRIED: run '$0 prepare' first" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "gpu-e2e: needs root (an engine of its own)" >&2; exit 1; }
  mkdir -p "$RESULTS"
  RESULTS="$(cd "$RESULTS" && pwd)"
  WORK="$(mktemp -d /tmp/gpudev-e2e.XXXXXX)"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  local started=$SECONDS
  if [ "${1:-}" = --no-gpu ]; then
    PYTHON="${GPUDEV_VENV:-$ROOT/.venv}/bin/python"
  else
    # The machine's own Python (PyTorch) with the carried wheels on its path.
    PYTHON="${GPU_E2E_PYTHON:-/opt/torch/.venv/bin/python3}"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" \
      "$CARRIED"/wheels/*.whl
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  start_engine
  mkdir -p "$WORK/run"
  PYTHONUNBUFFERED=1 "$PYTHON" "$ROOT/benchmarks/gpu_e2e.py" --work "$WORK/run" "$@" "$RESULTS"
  echo "gpu-e2e: passed in $((SECONDS - started)) s"
}

case "${1:-}" in
prepare)
  [ $# = 1 ] || usage
  prepare
  ;;
run)
  [ $# = 2 ] || usage
  RESULTS="$2"
  run
  ;;
--no-gpu)
  [ $# = 2 ] || usage
  RESULTS="$2"
  prepare
  run --no-gpu
  ;;
*) usage ;;
esac
