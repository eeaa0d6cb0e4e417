# syntax=docker/dockerfile:1
# The example consumer of manifests/examples/: `ehb consume --handler orders.pipeline:process`,
# plain Python (no Spark, no JVM), with the example handler of examples/orders/ on its path.
# Your own image is the same with your package in place of examples/orders.
# Build from the repository root (and load it into a local cluster, e.g. kind):
#   docker build -f docker/orders-example.Dockerfile -t eventhub-balancer-orders-example:0.1.0 .
#   kind load docker-image eventhub-balancer-orders-example:0.1.0
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
# No spark extra: a plain handler needs only the runtime (and otel for traces, when configured).
RUN python -m venv /opt/ehb \
    && /opt/ehb/bin/pip install --upgrade pip \
    && /opt/ehb/bin/pip wheel --wheel-dir /wheels '.[otel]' \
    && /opt/ehb/bin/pip install --no-index --find-links /wheels 'eventhub-balancer[otel]' \
    && /opt/ehb/bin/python -m compileall -q /opt/ehb
# The handler's package, importable as `orders` (its tests stay out of the image).
COPY examples/orders/__init__.py examples/orders/pipeline.py /opt/ehb/handlers/orders/

# --- final: the interpreter, the virtualenv and the handler -----------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="eventhub-balancer example consumer (orders)" \
      org.opencontainers.image.description="The example Event Hubs consumer of eventhub-balancer: order totals per partition" \
      org.opencontainers.image.licenses="MIT"
ENV PATH=/opt/ehb/bin:$PATH \
    PYTHONPATH=/opt/ehb/handlers \
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
CMD ["consume", "--handler", "orders.pipeline:process"]
