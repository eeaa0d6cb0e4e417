# syntax=docker/dockerfile:1
# The consumer base image: `ehb consume --handler package.module:function [--spark]` with
# PySpark and a Java 17 runtime. Build your pipeline image FROM it and copy your handler in.
# Build from the repository root:  docker build -f docker/consumer.Dockerfile -t eventhub-balancer-consumer:0.1.0 .
#
# Read-only root filesystem: mount emptyDirs at /tmp (temporary files, HOME) and /var/lib/ehb
# (Spark's local dir, Ivy's cache, the warehouse); every writable path below points there.

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
# pyspark is an sdist of about 456 MB: build its wheel here so the final stage only unpacks.
RUN python -m venv /opt/ehb \
    && /opt/ehb/bin/pip install --upgrade pip \
    && /opt/ehb/bin/pip wheel --wheel-dir /wheels '.[spark,otel]' \
    && /opt/ehb/bin/pip install --no-index --find-links /wheels 'eventhub-balancer[spark,otel]' \
    && /opt/ehb/bin/python -m compileall -q /opt/ehb

# --- final: a headless Java 17 runtime, the interpreter and the virtualenv --------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="eventhub-balancer consumer" \
      org.opencontainers.image.description="Event Hubs consumer runtime with PySpark, balanced by eventhub-balancer" \
      org.opencontainers.image.licenses="MIT"
# The JRE's postinst expects the man directory that the slim image leaves out; /opt/java is an
# architecture-neutral JAVA_HOME (the JVM directory is named after the CPU architecture).
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f /usr/bin/java)")")" /opt/java
ENV PATH=/opt/ehb/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    JAVA_HOME=/opt/java \
    PYSPARK_PYTHON=/opt/ehb/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/ehb/bin/python \
    HOME=/tmp \
    TMPDIR=/tmp \
    SPARK_LOCAL_DIRS=/var/lib/ehb/spark-local \
    SPARK_CONF_DIR=/opt/ehb/spark-conf
COPY --from=builder /opt/ehb /opt/ehb
# Every path Spark writes to is under /var/lib/ehb or /tmp (emptyDir volumes at run time).
RUN mkdir -p /opt/ehb/spark-conf \
    && printf '%s\n' \
        'spark.local.dir /var/lib/ehb/spark-local' \
        'spark.jars.ivy /var/lib/ehb/ivy' \
        'spark.sql.warehouse.dir /var/lib/ehb/spark-warehouse' \
        'spark.driver.extraJavaOptions -Djava.io.tmpdir=/tmp -Dderby.system.home=/var/lib/ehb/derby' \
        'spark.ui.enabled false' \
        > /opt/ehb/spark-conf/spark-defaults.conf
RUN groupadd --system --gid 10001 ehb \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ehb \
    && mkdir -p /var/lib/ehb \
    && chown 10001:10001 /var/lib/ehb
USER 10001:10001
WORKDIR /var/lib/ehb
EXPOSE 8080
ENTRYPOINT ["ehb"]
CMD ["consume"]
