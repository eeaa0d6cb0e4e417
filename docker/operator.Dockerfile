# syntax=docker/dockerfile:1
# The eventhub-balancer operator image: `ehb operator`.
# Build from the repository root:  docker build -f docker/operator.Dockerfile -t eventhub-balancer-operator:0.1.0 .
# Runs as a numeric non-root user and needs no writable path except /tmp (mount an emptyDir).

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
RUN python -m venv /opt/ehb \
    && /opt/ehb/bin/pip install --upgrade pip \
    && /opt/ehb/bin/pip wheel --wheel-dir /wheels . \
    && /opt/ehb/bin/pip install --no-index --find-links /wheels eventhub-balancer \
    && /opt/ehb/bin/python -m compileall -q /opt/ehb

# --- final: the interpreter, the virtualenv, nothing else -------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="eventhub-balancer operator" \
      org.opencontainers.image.description="Central partition balancing for Azure Event Hubs consumers on Kubernetes" \
      org.opencontainers.image.licenses="MIT"
# Bytecode is compiled at build time; the root filesystem is read-only at run time.
ENV PATH=/opt/ehb/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
COPY --from=builder /opt/ehb /opt/ehb
# A numeric uid so that `runAsNonRoot: true` can be verified by the kubelet.
RUN groupadd --system --gid 10001 ehb \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ehb
USER 10001:10001
EXPOSE 8443
ENTRYPOINT ["ehb"]
CMD ["operator"]
