# keeper's worker image: the wheel (no checkout, no emulators, no dev dependencies) on
# python:3.11-slim, run as a non-root user. Build: docker build -t keeper:$(git describe) .
#
# Stop grace: the worker drains for worker.graceful_shutdown (30 s by default) after SIGTERM,
# so give the container longer: `docker run --stop-timeout 45`, or Kubernetes'
# terminationGracePeriodSeconds (45 in deploy/k8s/worker-deployment.yaml).
# Run it with an init as PID 1 (`docker run --init`; the Deployment shares the pod's process
# namespace for the same reason): it reaps the GARM provider processes' orphans.
#
# Every version comes from constraints.txt, keeper's lock (`make constraints`): the build
# stage's setuptools and the runtime's dependencies, so one commit builds one image (with
# PYTHON_IMAGE pinned to a digest, python:3.11-slim@sha256:..., the base is fixed too).

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md constraints.txt ./
COPY activities/ activities/
COPY cli/ cli/
COPY domain/ domain/
COPY runtime/ runtime/
COPY store/ store/
COPY wire/ wire/
COPY workers/ workers/
COPY workflows/ workflows/
# The pinned setuptools builds the wheel (an isolated build would take the newest one).
RUN pip install --no-cache-dir -c constraints.txt setuptools \
    && pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels . \
    && cp constraints.txt /wheels/

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    KEEPER_HEALTH_ADDRESS=0.0.0.0:9465
RUN groupadd --gid 10001 keeper \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin keeper
COPY --from=build /wheels/ /wheels/
RUN pip install -c /wheels/constraints.txt /wheels/keeper_temporal-*.whl && rm -rf /wheels
USER 10001:10001
WORKDIR /home/keeper
# 9464 metrics (Prometheus), 9465 health (/healthz liveness, /readyz readiness).
EXPOSE 9464 9465
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9465/healthz', timeout=4)"]
ENTRYPOINT ["keeper", "worker"]
