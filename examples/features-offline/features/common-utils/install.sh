#!/bin/sh
# Offline stand-in for ghcr.io/devcontainers/features/common-utils: Debian packages only.
set -eu
if [ "${INSTALLOHMYZSH:-false}" = "true" ]; then
    echo "common-utils (offline stand-in): Oh My Zsh comes from the internet; set installOhMyZsh to false" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [ "${UPGRADEPACKAGES:-true}" = "true" ]; then
    apt-get upgrade -y -qq
fi
packages="git less procps sudo"
if [ "${INSTALLZSH:-true}" = "true" ]; then
    packages="$packages zsh"
fi
# shellcheck disable=SC2086 # a list of package names
apt-get install -y -qq --no-install-recommends $packages
rm -rf /var/lib/apt/lists/*

user="${USERNAME:-automatic}"
if [ "$user" = "automatic" ]; then
    user=vscode
fi
if [ "$user" != "none" ] && ! id "$user" >/dev/null 2>&1; then
    uid="${USERUID:-automatic}"
    gid="${USERGID:-automatic}"
    if [ "$gid" = "automatic" ]; then
        groupadd "$user"
    else
        groupadd --gid "$gid" "$user"
    fi
    if [ "$uid" = "automatic" ]; then
        useradd --create-home --gid "$user" --shell /bin/bash "$user"
    else
        useradd --create-home --uid "$uid" --gid "$user" --shell /bin/bash "$user"
    fi
    echo "$user ALL=(root) NOPASSWD:ALL" > "/etc/sudoers.d/$user"
    chmod 0440 "/etc/sudoers.d/$user"
fi
if [ "$user" != "none" ] && [ "${CONFIGUREZSHASDEFAULTSHELL:-false}" = "true" ]; then
    chsh --shell /bin/zsh "$user"
fi
