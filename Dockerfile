# The billing worker image: one image for the worker, beat, the exporter and the one-shot commands.
# docker-compose.yml shows how each runs; docs/operations.md explains why.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY worker ./worker
COPY models ./models
COPY migrations ./migrations
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /var/lib/billing billing \
    && mkdir -p /var/lib/billing/prometheus /var/lib/billing/beat \
    && chown -R billing:billing /var/lib/billing

# Relative paths (the default SQLite file, var/) land in the state directory, not in the source.
WORKDIR /var/lib/billing
USER billing

CMD ["billing", "--help"]
