# meshplan service image: slim Python 3.11, CPU PyTorch, non-root, SQLite on the /data volume.
#   docker build -t meshplan .
#   docker run -p 8000:8000 -v meshplan-data:/data meshplan
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# CPU build of PyTorch first, from the PyTorch CPU index, at the version constraints.txt pins
# (the runtime and the measuring profiler need it; the service itself imports it lazily).
COPY constraints.txt ./
RUN pip install --index-url https://download.pytorch.org/whl/cpu -c constraints.txt torch

COPY pyproject.toml README.md ./
COPY planner ./planner
COPY profiler ./profiler
COPY runtime ./runtime
COPY api ./api
RUN pip install -c constraints.txt '.[torch]'

RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin meshplan \
    && mkdir -p /data && chown meshplan /data
USER 10001
WORKDIR /data
VOLUME ["/data"]

ENV MESHPLAN_DATABASE_URL=sqlite:////data/meshplan.db \
    MESHPLAN_HOST=0.0.0.0 \
    MESHPLAN_PORT=8000
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:${MESHPLAN_PORT:-8000}/readyz', timeout=4).status != 200)"

ENTRYPOINT ["meshplan", "serve"]
