# One image for every Engram service; compose.yaml picks the service per container.
#   docker build .                          the local embedding model included: int8 ONNX
#       on onnxruntime, no torch
#   docker build --build-arg MODEL=torch .  the same, plus CPU torch and the fp32 weights
#       for providers.embedding.runtime: torch
#   docker build --build-arg MODEL=slim .   no model and no torch: for the store,
#       maintenance, and search/pipeline with providers.embedding.kind ollama, openai
#       or none (docs/running.md "A slim install")
# Every image carries the PostgreSQL driver (the `postgres` extra: psycopg, a few MB)
# for compose's `postgres` profile (storage.kind postgres).
FROM python:3.11-slim
# CPU torch, from the CPU index only: PyPI's Linux torch is the CUDA build (gigabytes),
# which the model package would otherwise pull (same rule as the Makefile).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG MODEL=local
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gen ./gen
COPY services ./services
# engram-grpc-client (its own distribution, built from ../../gen and its own code): the
# generated stubs every service imports and engram.client for the CLI's client commands
# (engram remember, import, export, ...); installed in the same pip call as the server,
# which depends on it
COPY clients/python ./clients/python
RUN set -e; \
    case "$MODEL" in \
      local) \
        pip install --no-cache-dir ./clients/python ".[local,tracing,postgres]"; \
        python -c 'import importlib.util as u, sys; sys.exit("torch in the default image" if u.find_spec("torch") else 0)';; \
      torch) \
        pip install --no-cache-dir --index-url "$TORCH_INDEX" torch==2.13.0; \
        python -c 'import sys, torch; sys.exit("torch is a CUDA build" if torch.version.cuda else 0)'; \
        pip install --no-cache-dir ./clients/python ".[local,local-torch,tracing,postgres]";; \
      slim) \
        pip install --no-cache-dir ./clients/python ".[tracing,postgres]"; \
        python -c 'import importlib.util as u, sys; sys.exit("torch in a slim image" if u.find_spec("torch") else 0)';; \
      *) echo "MODEL must be local, torch or slim, not $MODEL" >&2; exit 1;; \
    esac
ENV ENGRAM_SERVER__HOST=0.0.0.0 \
    ENGRAM_STORAGE__PATH=/data/engram.db \
    HF_HUB_OFFLINE=1
VOLUME ["/data"]
ENTRYPOINT ["engram"]
CMD ["serve", "store"]
