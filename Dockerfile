# cachekeeper worker/hydrate image (CPU Inductor). Neuron/TPU users start FROM their vendor image instead
# and `pip install cachekeeper[s3,gcs,postgres]` (torch comes with those images).
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends g++ openssl && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY cachekeeper ./cachekeeper
COPY migrations ./migrations
RUN pip install --no-cache-dir "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir ".[s3,gcs,postgres,build]"
WORKDIR /work
ENTRYPOINT []
