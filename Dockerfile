# One image for every Engram service; compose.yaml picks the service per container.
FROM python:3.11-slim
# CPU torch first, from the CPU index: PyPI's Linux torch is the CUDA build (gigabytes),
# and the model package below would otherwise pull it (same rule as the Makefile).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gen ./gen
COPY services ./services
# engram.client (its own distribution, built from ../../gen and its own code) for the
# CLI's client commands (engram remember, import, export, ...)
COPY clients/python ./clients/python
RUN pip install --no-cache-dir --extra-index-url "$TORCH_INDEX" torch==2.13.0 \
    && python -c 'import sys, torch; sys.exit("torch is a CUDA build" if torch.version.cuda else 0)' \
    && pip install --no-cache-dir ./clients/python .
ENV ENGRAM_SERVER__HOST=0.0.0.0 \
    ENGRAM_STORAGE__PATH=/data/engram.db \
    HF_HUB_OFFLINE=1
VOLUME ["/data"]
ENTRYPOINT ["engram"]
CMD ["serve", "store"]
