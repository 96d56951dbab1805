# syntax=docker/dockerfile:1
# afr's server image, one for every service; the command decides:
#   afr up --no-worker     the collector (the default command; HEALTHCHECK is its /healthz)
#   afr worker             the replay worker (deploy/compose sets its own health check)
#   afr secrets init DIR   a deployment's secrets, generated on first start
# Build from the repository root:  docker build -t afr-server:0.1.0 .
# No secret is baked in: they come at run time from a secrets directory (AFR_SECRETS_DIR,
# AFR_WORKER_SECRETS_DIR) or the environment. .dockerignore lets in only the sources below.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY exporter/pyproject.toml exporter/README.md exporter/
COPY exporter/src exporter/src
COPY pyproject.toml README.md constraints.txt ./
COPY afr afr
COPY afr_common afr_common
COPY collector collector
COPY replay_worker replay_worker
# Both distributions and every dependency, as wheels; not the `embedded` extra (chDB, ~830
# MB): the image runs on a ClickHouse server. Naming ./exporter satisfies the
# server's afr-exporter==0.1.0 with this checkout's, never with a package index's. Every
# dependency at its version in constraints.txt (`make lock`), so two builds of one commit
# get the same; as PIP_CONSTRAINT it binds the build backend too (docs/building.md).
RUN PIP_CONSTRAINT=/src/constraints.txt pip wheel --wheel-dir /wheels ./exporter .
# The ingest modules compiled with mypyc for this image's Python (ADR 52): the wheels
# installed in a throwaway environment with gcc and the pinned mypy, compiled from the same
# sources into /native, which the runtime stage copies into the installed package. A build
# that cannot be made (it says why) leaves /native empty: the modules then run from source.
COPY scripts/build_native.py scripts/
RUN ( apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           gcc libc6-dev \
      && python -m venv /buildenv \
      && /buildenv/bin/pip install --no-index --find-links /wheels afr-server \
      && PIP_CONSTRAINT=/src/constraints.txt /buildenv/bin/pip install mypy setuptools \
      && /buildenv/bin/python scripts/build_native.py --dir /native ) \
    || echo "no compiled ingest modules: the image runs them from source" ; \
    mkdir -p /native

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 afr \
 && useradd --system --uid 10001 --gid afr --home-dir /var/lib/afr --no-create-home \
      --shell /usr/sbin/nologin afr
# The wheels are mounted from the build stage, not copied: no layer keeps them.
# The directories below are the volumes' mount points: a new named volume takes their owner
# and mode, so the non-root user can write its data and secrets there.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    --mount=type=bind,from=build,source=/native,target=/native \
    pip install --no-cache-dir --no-index --find-links /wheels afr-server \
 && cp -r /native "$(python -c 'import collector, os; print(os.path.dirname(collector.__file__))')/_native" \
 && mkdir -p /var/lib/afr/collector /var/lib/afr/worker /var/lib/afr/clickhouse-users \
      /run/afr-secrets \
 && chown -R afr:afr /var/lib/afr /run/afr-secrets \
 && chmod 0700 /var/lib/afr/collector /var/lib/afr/worker /run/afr-secrets
USER afr:afr
WORKDIR /var/lib/afr
# Listen beyond the container's loopback; keep state on the volumes' mount points.
ENV AFR_DATA_DIR=/var/lib/afr/collector \
    AFR_GRPC_HOST=0.0.0.0 \
    AFR_HTTP_HOST=0.0.0.0 \
    AFR_WORKER_HOST=0.0.0.0 \
    AFR_WORKER_DATA_DIR=/var/lib/afr/worker
EXPOSE 4317 4318 8787
# The collector's readiness (/healthz?probe=ready: 503 with the reasons when a thread
# stopped or the write-ahead log is near its bound).
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz?probe=ready' % os.environ.get('AFR_HTTP_PORT', '4318'), timeout=4)"]
CMD ["afr", "up", "--no-worker"]
