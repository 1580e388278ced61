# The epochlog image: the `epochlog` command, run as a non-root user, data under /data.
# docker-compose.yml runs a controller and three brokers from it; any subcommand works:
#   docker run --rm epochlog:local apis
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Only what the package needs (pyproject names README.md as its readme); tests and benches stay out.
COPY pyproject.toml README.md ./
COPY protocol/ protocol/
COPY broker/ broker/
COPY controller/ controller/
COPY client/ client/
COPY epochlog/ epochlog/
RUN pip install . && rm -rf /src/build

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
