#!/usr/bin/env bash
# Everything `docker compose up` needs on a machine with a container engine but no registry (CI
# here), built through the same Compose file users run:
#   1. docker/base-image.sh: a Debian base with Python 3.11 (debootstrap; cached per machine);
#   2. docker/wheelhouse.sh: the wheels, downloaded on the host (cached per pyproject);
#   3. the project image, `compose build` with BASE_IMAGE set to that base (layers cached).
# Prints what a later `compose up` needs, as KEY=VALUE lines on stdout (progress on stderr):
#   EPOCHLOG_BASE_IMAGE=epochlog-base:py3.11-...   EPOCHLOG_IMAGE=epochlog:local
# so that `env $(docker/build.sh) docker-compose up -d` starts the cluster from these images.
# It removes nothing it did not make: images are labelled epochlog.made-by=... (the base by
# base-image.sh, each Dockerfile stage by the Dockerfile) and removals filter by that label.
set -euo pipefail
cd "$(dirname "$0")/.."

base=$(docker/base-image.sh)
docker/wheelhouse.sh >/dev/null
image=${EPOCHLOG_IMAGE:-epochlog:local}
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
else
    compose=(docker-compose)  # Compose v1 (Debian bookworm's package)
fi
# All four services share one image and one build section: building one builds it.
EPOCHLOG_BASE_IMAGE=$base EPOCHLOG_IMAGE=$image "${compose[@]}" build controller >&2
# The legacy builder leaves each build's intermediate stage behind, untagged: keep a day's worth
# (the next build's cache), drop older ones. Only ours: the Dockerfile labels every stage it
# builds epochlog.made-by=Dockerfile, and a prune without that filter is engine-wide (every
# project's dangling images).
docker image prune --force --filter until=24h --filter label=epochlog.made-by=Dockerfile >/dev/null
echo "EPOCHLOG_BASE_IMAGE=$base"
echo "EPOCHLOG_IMAGE=$image"
