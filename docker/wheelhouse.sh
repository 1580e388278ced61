#!/usr/bin/env bash
# docker/wheels/: every wheel the Dockerfile's `pip install .` needs (pyproject's dependencies and
# its build backend), downloaded on the host, so that an image builds where the engine has no
# network a build can use (CI here). The Dockerfile installs from this folder, without an index,
# when it holds wheels; without it (a user with a registry and PyPI) pip reaches PyPI as usual.
#
#   docker/wheelhouse.sh        # prints the folder; skips the download when it is up to date
#
# The wheels are for the image, not the host: CPython 3.11 on manylinux, this machine's
# architecture (the base image is debootstrapped for it). A stamp holding the hash of
# pyproject.toml and this script marks a complete download: another pyproject, another download.
set -euo pipefail
cd "$(dirname "$0")/.."

out=docker/wheels
stamp=$out/.stamp
want=$(cat pyproject.toml "$0" | sha256sum | cut -c1-64)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$out: up to date, reused" >&2
    echo "$out"
    exit 0
fi

requirements=$(mktemp)
trap 'rm -f "$requirements"' EXIT
python3 - pyproject.toml >"$requirements" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
for requirement in project["build-system"]["requires"] + project["project"]["dependencies"]:
    print(requirement)
PY

arch=$(uname -m)
rm -f "$out"/*.whl "$stamp"
mkdir -p "$out"
# Binary wheels only (nothing to compile in the image); the manylinux tags glibc 2.36 (bookworm)
# accepts, newest first, so pip picks the best wheel each project offers for the image.
platforms=()
for tag in manylinux_2_36 manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
    platforms+=(--platform "${tag}_${arch}")
done
python3 -m pip download --quiet --dest "$out" --only-binary=:all: \
    --implementation cp --python-version 3.11 "${platforms[@]}" -r "$requirements" >&2
echo "$want" >"$stamp"
echo "$out: $(ls "$out"/*.whl | wc -l) wheels" >&2
echo "$out"
