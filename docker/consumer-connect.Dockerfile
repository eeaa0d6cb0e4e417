# syntax=docker/dockerfile:1
# The consumer image for Spark Connect: `ehb consume --spark --spark-remote sc://HOST:PORT`.
# No JVM and no local Spark: pyspark-client (the pure-Python Spark Connect client) sends every
# DataFrame operation to the Connect server, which runs the driver. Build your pipeline image
# FROM it and copy your handler in; --spark-master (local or spark://) needs consumer.Dockerfile.
# Build from the repository root:
#   docker build -f docker/consumer-connect.Dockerfile -t eventhub-balancer-consumer-connect:0.1.0 .
#
# Read-only root filesystem: mount an emptyDir at /tmp (temporary files, HOME).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: wheels and a virtualenv; compilers stay in this stage ---------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# Not pinned (hadolint DL3008): the bookworm archive keeps only the current version of a package,
# so a pinned one stops installing at the next security update; the base image pins the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
# The spark-connect extra, never spark: pyspark-client and pyspark both install the `pyspark`
# module, and pyspark would bring the 450 MB of jars this image exists to leave out.
RUN python -m venv /opt/ehb \
    && /opt/ehb/bin/pip install --upgrade pip \
    && /opt/ehb/bin/pip wheel --wheel-dir /wheels '.[spark-connect,otel]' \
    && /opt/ehb/bin/pip install --no-index --find-links /wheels 'eventhub-balancer[spark-connect,otel]' \
    && /opt/ehb/bin/python -m compileall -q /opt/ehb

# --- final: the interpreter and the virtualenv, nothing else ----------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="eventhub-balancer consumer (Spark Connect)" \
      org.opencontainers.image.description="Event Hubs consumer runtime with the Spark Connect client, balanced by eventhub-balancer" \
      org.opencontainers.image.licenses="MIT"
ENV PATH=/opt/ehb/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
COPY --from=builder /opt/ehb /opt/ehb
RUN groupadd --system --gid 10001 ehb \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ehb
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["ehb"]
CMD ["consume"]
