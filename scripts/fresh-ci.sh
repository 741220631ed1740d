#!/usr/bin/env bash
# Run CI as it runs on a new machine: a fresh clone of this checkout's HEAD (with ../shared
# beside it, when there is one) and a Docker engine whose state is new (no images, networks or
# containers), then `CI=true bash .ci/run` there. Before resolving an issue, run this.
#
# It STOPS this machine's Docker engine and moves its data root (/var/lib/docker) aside, so the
# clone's set-up starts a new engine as on a fresh machine. The old data root is kept (its path
# is printed); delete it when you no longer need its images. Because of that it only runs with
# --stop-my-engine. The log is written to $GPUDEV_FRESH_CI_LOG (default /tmp/gpudev-fresh-ci.log).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" != "--stop-my-engine" ]; then
  echo "usage: scripts/fresh-ci.sh --stop-my-engine   (stops this machine's Docker engine)" >&2
  exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "fresh-ci.sh: needs root (it stops dockerd and moves /var/lib/docker)" >&2
  exit 2
fi
LOG="${GPUDEV_FRESH_CI_LOG:-/tmp/gpudev-fresh-ci.log}"
WORK="$(mktemp -d /tmp/gpudev-fresh-ci.XXXXXX)"
HEAD="$(git -C "$ROOT" rev-parse --short HEAD)"

echo "==> Stopping the Docker engine"
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl stop docker docker.socket 2>/dev/null || true
fi
pkill -x dockerd 2>/dev/null || true
for _ in $(seq 1 60); do pgrep -x dockerd >/dev/null || break; sleep 1; done
if pgrep -x dockerd >/dev/null; then
  echo "fresh-ci.sh: dockerd did not stop" >&2
  exit 1
fi
STAMP="$(date +%Y%m%d-%H%M%S)"
if mountpoint -q /var/lib/docker 2>/dev/null; then
  # A mount point cannot be renamed: its contents go into a folder inside it, which an engine
  # started there ignores.
  OLD="/var/lib/docker/.before-fresh-ci.$STAMP"
  mkdir "$OLD"
  find /var/lib/docker -mindepth 1 -maxdepth 1 ! -name '.before-fresh-ci.*' -exec mv -t "$OLD" {} +
  echo "The old engine state is kept at $OLD (delete it when done)."
elif [ -d /var/lib/docker ]; then
  OLD="/var/lib/docker.before-fresh-ci.$STAMP"
  mv /var/lib/docker "$OLD"
  echo "The old engine state is kept at $OLD (delete it when done)."
fi

echo "==> What gpudev and its tests leave on a machine, removed as a new machine lacks it"
# users' folders of the shared service, its firewall chain, the test users (remade by set-up)
rm -rf /srv/gpudev
if command -v iptables >/dev/null 2>&1 && iptables -w -S GPUDEV-PORTS >/dev/null 2>&1; then
  while read -r hook; do
    # shellcheck disable=SC2086 # the rule's words, as iptables -S printed them
    iptables -w ${hook/-A/-D} || true
  done < <(iptables -w -S OUTPUT | grep -- '-j GPUDEV-PORTS' || true)
  iptables -w -F GPUDEV-PORTS && iptables -w -X GPUDEV-PORTS
fi
for user in gpudev-alice gpudev-bob gpudev-admin; do
  if id "$user" >/dev/null 2>&1; then userdel -r "$user" 2>/dev/null || userdel "$user"; fi
done

echo "==> A fresh clone of $HEAD in $WORK/main"
git clone -q "$ROOT" "$WORK/main"
git -C "$WORK/main" checkout -q "$HEAD"
if [ -d "$ROOT/../shared" ]; then
  cp -r "$ROOT/../shared" "$WORK/shared"
fi

echo "==> CI=true bash .ci/run (log: $LOG)"
started=$SECONDS
set +e
(cd "$WORK/main" && CI=true bash .ci/run) >"$LOG" 2>&1 </dev/null
code=$?
set -e
grep -E '^--- |checks: ' "$LOG" || true
echo "fresh CI of $HEAD: exit $code in $((SECONDS - started)) s (clone left at $WORK)"
exit "$code"
