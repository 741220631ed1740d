#!/bin/sh
# Offline stand-in for ghcr.io/devcontainers/features/python: Debian packages only.
set -eu
case "${VERSION:-os-provided}" in
    none) exit 0 ;;
    os-provided) ;;
    *)
        echo "python (offline stand-in): version ${VERSION} is fetched from the internet; use os-provided" >&2
        exit 1
        ;;
esac
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
packages="python3 python3-venv python3-pip"
if [ "${INSTALLTOOLS:-true}" = "true" ]; then
    packages="$packages pipx flake8 black"
fi
# shellcheck disable=SC2086 # a list of package names
apt-get install -y -qq --no-install-recommends $packages
rm -rf /var/lib/apt/lists/*
