# The epochlog image: the `epochlog` command, run as a non-root user, data under /data.
# docker-compose.yml runs a controller and three brokers from it; any subcommand works:
#   docker run --rm epochlog:local apis
#
# With a registry and PyPI, nothing to pass: the base is python:3.11-slim and pip reaches PyPI.
# Without them (CI here), docker/base-image.sh builds a Debian base with Python 3.11 and
# docker/wheelhouse.sh downloads the wheels on the host; then
#   docker build --build-arg BASE_IMAGE="$(docker/base-image.sh)" .
# installs from docker/wheels/ with no network (see docs/docker-compose.md).
ARG BASE_IMAGE=python:3.11-slim

# Every stage is labelled as made here (an image inherits its base's labels: this replaces the
# base's), so that docker/build.sh prunes only the stages it left behind, by this label.
# ---- build: a virtual environment holding epochlog and its dependencies, nothing else
FROM ${BASE_IMAGE} AS build
LABEL epochlog.made-by=Dockerfile
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/epochlog
WORKDIR /src
# Dependencies first, from pyproject alone: this layer survives changes to our code. Wheels in
# /wheels (docker/wheelhouse.sh) mean "no index": the build may have no network.
COPY docker/wheels/ /wheels/
COPY pyproject.toml ./
RUN if ls /wheels/*.whl >/dev/null 2>&1; then set -- --no-index --find-links /wheels; fi \
    && python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' > /tmp/requirements.txt \
    && /opt/epochlog/bin/pip install --quiet "$@" -r /tmp/requirements.txt
# Only what the package needs (pyproject names README.md as its readme); tests and benches stay
# out. Every folder of pyproject's [tool.setuptools.package-dir] (tests/test_docker_compose.py).
COPY README.md ./
COPY protocol/ protocol/
COPY broker/ broker/
COPY controller/ controller/
COPY client/ client/
COPY pipeline/ pipeline/
COPY epochlog/ epochlog/
COPY settings/ settings/
COPY testing/ testing/
RUN if ls /wheels/*.whl >/dev/null 2>&1; then set -- --no-index --find-links /wheels; fi \
    && /opt/epochlog/bin/pip install --quiet --no-deps "$@" . \
    && /opt/epochlog/bin/pip uninstall --quiet --yes pip setuptools

# ---- the image: the base, the environment, a user
FROM ${BASE_IMAGE}
LABEL epochlog.made-by=Dockerfile
ENV PYTHONUNBUFFERED=1 \
    PATH=/opt/epochlog/bin:$PATH
COPY --from=build /opt/epochlog /opt/epochlog
COPY docker/healthcheck.py /opt/epochlog/healthcheck.py
# A fixed uid, so volumes keep one owner across rebuilds. /data belongs to it; a new named volume
# mounted there copies that ownership.
RUN groupadd --system --gid 10001 epochlog \
    && useradd --system --uid 10001 --gid epochlog --no-create-home \
       --shell /usr/sbin/nologin epochlog \
    && mkdir /data && chown epochlog:epochlog /data
USER epochlog
WORKDIR /data
VOLUME ["/data"]

# 9092: brokers' EXTERNAL listener (clients); 9091: their INTERNAL one; 9190: the controller.
EXPOSE 9091 9092 9190
ENTRYPOINT ["epochlog"]
CMD ["--help"]
