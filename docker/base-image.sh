#!/usr/bin/env bash
# A minimal Debian base image with Python 3.11, for machines with a container engine but no
# registry to pull `python:3.11-slim` from (CI here). Users with a registry never need it.
#
#   BASE=$(docker/base-image.sh)          # prints the tag on stdout, progress on stderr
#   docker build --build-arg BASE_IMAGE="$BASE" .
#
# debootstrap (Debian's package; root) installs bookworm's minbase plus python3 from Debian's
# packages into a temporary folder, which `docker import` turns into an image. The tag carries a
# hash of this script, so the image is built once per machine and rebuilt only when the script
# changes; a present image is reused without touching the network. EPOCHLOG_DEBIAN_MIRROR picks
# another mirror.
#
# The image carries the label epochlog.made-by=docker/base-image.sh, and this script removes only
# images of its repository that carry it: never another project's, nor one someone tagged by hand.
set -euo pipefail

suite=bookworm  # Python 3.11 is bookworm's python3
mirror=${EPOCHLOG_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# python3-venv: the Dockerfile installs into a virtual environment (ensurepip comes with it);
# python-is-python3: `python`, as in python:3.11-slim, so health checks read the same on both.
packages=python3,python3-venv,python-is-python3
repo=epochlog-base
tag="$repo:py3.11-$(sha256sum "$0" | cut -c1-12)"
label=epochlog.made-by=docker/base-image.sh

if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag: present, reused" >&2
    echo "$tag"
    exit 0
fi
for tool in debootstrap docker; do
    command -v "$tool" >/dev/null || { echo "$0: $tool is missing (Debian's package)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "$0: debootstrap needs root" >&2; exit 1; }

root=$(mktemp -d /tmp/epochlog-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "$tag: debootstrap $suite into $root" >&2
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >&2

# What a container never reads: package lists and caches, docs, man pages, translations.
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/* "$root"/var/log/* \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
       "$root"/usr/share/locale/* "$root"/tmp/*

tar --numeric-owner -C "$root" -c . |
    docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
        --change "LABEL $label" \
        --message "debootstrap --variant=minbase --include=$packages $suite" - "$tag" >&2
# Older tags of this script are dead weight: keep only the current one. Only images this script
# made (its label, in its repository); one still used by a container stays.
docker image ls --filter "label=$label" --format '{{.Repository}}:{{.Tag}}' "$repo" |
    grep -vxF "$tag" | xargs -r docker image rm >&2 || true
echo "$tag"
