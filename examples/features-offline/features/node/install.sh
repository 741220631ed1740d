#!/bin/sh
# Offline stand-in for ghcr.io/devcontainers/features/node: Debian packages only.
set -eu
case "${VERSION:-lts}" in
    none) exit 0 ;;
    lts | os-provided) ;;
    *)
        echo "node (offline stand-in): version ${VERSION} is fetched from the internet; use lts or os-provided" >&2
        exit 1
        ;;
esac
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
packages="nodejs npm"
if [ "${NODEGYPDEPENDENCIES:-false}" = "true" ]; then
    packages="$packages make gcc g++"
fi
# shellcheck disable=SC2086 # a list of package names
apt-get install -y -qq --no-install-recommends $packages
rm -rf /var/lib/apt/lists/*
