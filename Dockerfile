# Closer web service and worker image. Build: docker build -t closer .

# The pages' front-end packages (htmx, ECharts, Swagger UI, ReDoc), from the npm registry,
# served by the app itself; none needs its install scripts (one only reports telemetry).
FROM node:20-bookworm-slim AS assets
WORKDIR /assets
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

FROM python:3.11-slim-bookworm

# numba's compiled kernels live on the data volume: a restarted container loads them
# instead of compiling them again (`closer worker` makes them ready as it starts).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CLOSER_DATA_DIR=/var/lib/closer \
    CLOSER_HOST=0.0.0.0 \
    CLOSER_PORT=8000 \
    NUMBA_CACHE_DIR=/var/lib/closer/numba-cache

RUN useradd --system --create-home --home-dir /app --shell /usr/sbin/nologin closer
WORKDIR /app

# Dependencies first, so code changes do not reinstall them.
COPY pyproject.toml README.md ./
RUN mkdir app && touch app/__init__.py \
    && pip install . \
    && pip uninstall -y closer && rm -rf app

COPY alembic.ini ./
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
COPY --from=assets /assets/node_modules ./node_modules
COPY app ./app
RUN pip install --no-deps -e . \
    && mkdir -p /var/lib/closer && chown closer /var/lib/closer

USER closer
EXPOSE 8000
VOLUME ["/var/lib/closer"]
CMD ["closer", "serve"]
