#!/bin/sh
# Builds a Debian 12 base image offline-from-a-registry: mmdebstrap makes a root filesystem from Debian's package
# mirror (bash, python3 with venv, git, CA certificates; about 8 minutes on a loaded 2-core machine), cached outside the
# checkout, then it is imported as a local tag. The preset-in-a-container tests run glibc CLIs (Claude Code) in it.
# Usage: build-debian-image.sh [podman|docker] [tag]   (default: podman, localhost/worktrial-base:debian)
set -eu
runtime=${1:-podman}
tag=${2:-localhost/worktrial-base:debian}
cache=${WORKTRIAL_IMAGES_CACHE:-$HOME/.cache/worktrial-images}
rootfs="$cache/debian-bookworm-2"  # -2: with python3-venv
if "$runtime" image inspect "$tag" >/dev/null 2>&1; then
    echo "image $tag: present"; exit 0
fi
command -v mmdebstrap >/dev/null || { echo "mmdebstrap is missing: apt-get install mmdebstrap" >&2; exit 1; }
if [ ! -d "$rootfs" ]; then
    mkdir -p "$cache"
    rm -rf "$rootfs.partial"
    mmdebstrap --quiet --variant=apt --include=bash,ca-certificates,python3,python3-venv,git bookworm "$rootfs.partial"
    mv "$rootfs.partial" "$rootfs"
fi
tar -C "$rootfs" -c . | "$runtime" import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'WORKDIR /app' - "$tag" >/dev/null
echo "built $tag"
