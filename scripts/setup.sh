#!/usr/bin/env bash
# Set up everything jupyter-gpudev needs on this machine, idempotently:
#   - a running Docker engine (installed from Debian's docker.io and started when none answers;
#     an engine that already answers is used as it is),
#   - the Python virtual environment .venv with the package installed editable (this builds the
#     Lab extension with npm),
#   - the kernel-capable base image, bootstrapped from the host's Debian mirror when missing
#     (`jupyter gpudev image bootstrap`: no container registry needed).
# With --test it also installs what the test suite needs: Chromium for the UI tests, the
# container registry and htpasswd tool for the registry tests, busybox for the Kubernetes
# build tests, an SSH server for the remote-host tests, and three local users for the
# shared-mode (JupyterHub) tests.
#
# Safe to run again: every step checks first and does nothing when its result is there.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

WITH_TEST=0
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TEST=1 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

VENV="${GPUDEV_VENV:-$ROOT/.venv}"
IMAGE="${GPUDEV_IMAGE:-gpudev-python:bookworm}"
PYTHON="${PYTHON:-python3}"

step() { printf '\n==> %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "setup.sh: '$*' needs root and sudo is not available" >&2
    return 1
  fi
}

APT_UPDATED=0
apt_install() {
  # Install the Debian packages that are missing; nothing when all are present.
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup.sh: please install ${missing[*]} (no apt-get on this machine)" >&2
    return 1
  fi
  if [ "$APT_UPDATED" -eq 0 ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    APT_UPDATED=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

engine_answers() { docker info >/dev/null 2>&1; }

ensure_engine() {
  step "Docker engine"
  if engine_answers; then
    echo "A Docker engine answers ($(docker version --format '{{.Server.Version}}')): using it as it is."
    if [ "${GPUDEV_TEST_NVIDIA_HOOK:-0}" = "1" ] && [ -d /usr/local/lib/gpudev-test-hook ]; then
      # An engine an earlier set-up started with the stand-in hook: keep its copy current.
      as_root install -m 0755 tests/fixtures/nvidia-hook/nvidia-container-runtime-hook \
        /usr/local/lib/gpudev-test-hook/nvidia-container-runtime-hook
    fi
    return 0
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    apt_install docker.io
  fi
  command -v docker >/dev/null 2>&1 || apt_install docker.io
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    as_root systemctl start docker || true
  fi
  if ! engine_answers; then
    local engine_path="$PATH"
    if [ "${GPUDEV_TEST_NVIDIA_HOOK:-0}" = "1" ]; then
      # Test suite only, and only for an engine started here: a stand-in NVIDIA hook so that the
      # engine's GPU DeviceRequest path runs on a machine without GPUs (see the hook's header).
      as_root install -D -m 0755 tests/fixtures/nvidia-hook/nvidia-container-runtime-hook \
        /usr/local/lib/gpudev-test-hook/nvidia-container-runtime-hook
      engine_path="/usr/local/lib/gpudev-test-hook:$PATH"
      echo "The engine gets the test stand-in for the NVIDIA hook (GPUDEV_TEST_NVIDIA_HOOK=1)."
    fi
    echo "Starting dockerd in the background (log: /var/log/gpudev-dockerd.log)"
    as_root env PATH="$engine_path" sh -c 'setsid dockerd >/var/log/gpudev-dockerd.log 2>&1 </dev/null &'
  fi
  for _ in $(seq 1 120); do
    engine_answers && break
    sleep 0.5
  done
  if ! engine_answers; then
    echo "setup.sh: the Docker engine did not start; see /var/log/gpudev-dockerd.log" >&2
    tail -n 20 /var/log/gpudev-dockerd.log >&2 || true
    return 1
  fi
  echo "Docker engine $(docker version --format '{{.Server.Version}}') is running."
}

ensure_node_deps() {
  step "Node dependencies"
  command -v npm >/dev/null 2>&1 || apt_install nodejs npm
  if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
  else
    echo "node_modules is up to date."
  fi
}

ensure_venv() {
  step "Python environment ($VENV)"
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV" || { apt_install python3-venv && "$PYTHON" -m venv "$VENV"; }
  fi
  local stamp="$VENV/.gpudev-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ package.json -nt "$stamp" ] \
      || [ jupyter-config/server-config/jupyter_gpudev.json -nt "$stamp" ] \
      || [ ! -f jupyter_gpudev/labextension/package.json ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # A Lab build leaves install.json in its output, which the wheel also takes from the
    # project's root: hatchling refuses the second copy when this runs again.
    rm -f jupyter_gpudev/labextension/install.json
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$VENV/bin/python" -m pip install -q -e ".[test,dev]"
    # Serve the build output itself (a link), so `npm run build` reaches a running Lab.
    PATH="$VENV/bin:$PATH" "$VENV/bin/jupyter" labextension develop --overwrite . >/dev/null 2>&1 \
      || echo "note: could not link the Lab extension for development; the installed copy is used"
    touch "$stamp"
  else
    echo "The package is installed; rebuilding the Lab extension if its sources changed."
    PATH="$VENV/bin:$PATH" npm run --silent build
  fi
}

ensure_image() {
  step "Kernel-capable base image ($IMAGE)"
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "$IMAGE is present."
    return 0
  fi
  apt_install debootstrap
  # debootstrap needs root; the command reads the mirror from this host's apt sources. Its pip
  # step (a current ipykernel) trusts this host's CA bundle: HTTPS may be intercepted here.
  local trust=()
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    trust=(--MountPolicy.mount_ca_bundle=True)
  fi
  as_root "$VENV/bin/jupyter-gpudev" image bootstrap --tag="$IMAGE" "${trust[@]}"
}

ensure_registry() {
  step "A container registry with password authentication, for the registry tests"
  # The tests start their own instance (loopback, a random port, their own htpasswd): this
  # only installs the programs. Debian's docker-registry is the CNCF distribution registry.
  apt_install docker-registry apache2-utils
  echo "$(docker-registry --version 2>/dev/null | head -n 1 || echo docker-registry) is installed."
}

ensure_busybox() {
  step "Busybox, for the Kubernetes build tests"
  # The build Job's context step runs in crane's debug image, whose shell and tools are
  # busybox's: the tests run that step's script with Debian's static busybox.
  apt_install busybox-static
  echo "$(busybox 2>/dev/null | head -n 1 || echo busybox) is installed."
}

ensure_sshd() {
  step "An SSH server, for the remote-host tests"
  # The tests start their own sshd (loopback, a random port, generated keys, key-only): this
  # only installs it. Debian's package may start a system sshd; ours does not need it.
  if [ -x /usr/sbin/sshd ]; then
    echo "$(/usr/sbin/sshd -V 2>&1 | head -n 1) is installed."
  else
    apt_install openssh-server
  fi
}

ensure_browser() {
  step "Chromium for the UI tests"
  if [ -x /usr/bin/chromium ]; then
    echo "$(/usr/bin/chromium --version 2>/dev/null || echo chromium) is installed."
  else
    apt_install chromium
  fi
}

ensure_hub_users() {
  step "Local users for the shared-mode tests (a real JupyterHub spawns their servers)"
  # Real accounts, not in the docker group; each with the project folder the gpudev service
  # mounts for them (c.GPUDevService.user_root's default, ~/projects).
  local user
  for user in gpudev-alice gpudev-bob gpudev-admin; do
    if ! id "$user" >/dev/null 2>&1; then
      as_root useradd --create-home --shell /bin/bash "$user"
    fi
    as_root install -d -o "$user" -g "$user" "$(getent passwd "$user" | cut -d: -f6)/projects"
  done
  echo "Users gpudev-alice, gpudev-bob and gpudev-admin exist."
  # Their servers run this virtual environment and this checkout (installed editable): the
  # folders above both must be searchable by them (pyenv keeps Python under /root, which then
  # gets search permission only, not read).
  local target dir part
  for target in "$(dirname "$(readlink -f "$VENV/bin/python")")" "$VENV" "$ROOT"; do
    dir=""
    for part in $(echo "$target" | tr '/' ' '); do  # from / down, so each check can pass
      dir="$dir/$part"
      if ! as_root runuser -u gpudev-alice -- test -x "$dir"; then
        as_root chmod o+x "$dir"
        echo "Made $dir searchable (o+x) for the test users' servers."
      fi
    done
  done
  if ! as_root runuser -u gpudev-alice -- test -r "$ROOT/jupyter_gpudev/__init__.py"; then
    echo "setup.sh: the test users cannot read $ROOT (a umask of 077?): clone it readable" >&2
    return 1
  fi
}

ensure_engine
ensure_node_deps
ensure_venv
ensure_image
if [ "$WITH_TEST" -eq 1 ]; then
  ensure_browser
  ensure_registry
  ensure_busybox
  ensure_sshd
  ensure_hub_users
fi
step "Set-up complete"
