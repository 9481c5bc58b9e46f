# The billing worker image: one image for the worker, beat, the exporter and the one-shot commands.
# docker-compose.yml shows how each runs; docs/operations.md explains why.
# Pinned to Debian bookworm: native/Cargo.lock names the crate versions bookworm packages (pyo3 0.17.3,
# serde 1.0.152, serde_json 1.0.87); the bare `3.11-slim` tag moved to trixie, whose crates differ and
# the build fails. Change the suite only with native/Cargo.lock (tests/deploy/test_compose.py).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# worker.plain_chunk is compiled from native/ (Rust, PyO3) with Debian's cargo and packaged crates
# (.cargo/config.toml: no crates.io); none of them stays in the image but the built module.
COPY pyproject.toml README.md ./
COPY .cargo ./.cargo
COPY native ./native
COPY worker ./worker
COPY models ./models
COPY migrations ./migrations
RUN apt-get update \
    && apt-get install -y --no-install-recommends cargo librust-pyo3-dev librust-serde-dev \
       librust-serde-derive-dev librust-serde-json-dev \
    && pip install . \
    && apt-get purge -y --auto-remove cargo librust-pyo3-dev librust-serde-dev \
       librust-serde-derive-dev librust-serde-json-dev \
    && rm -rf /var/lib/apt/lists/* /root/.cargo \
    && useradd --system --uid 10001 --home-dir /var/lib/billing billing \
    && mkdir -p /var/lib/billing/prometheus /var/lib/billing/beat \
    && chown -R billing:billing /var/lib/billing

# Relative paths (the default SQLite file, var/) land in the state directory, not in the source.
WORKDIR /var/lib/billing
USER billing

CMD ["billing", "--help"]
