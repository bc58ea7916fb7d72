# One image for every Engram service; compose.yaml picks the service per container.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gen ./gen
COPY services ./services
RUN pip install --no-cache-dir torch==2.13.0 && pip install --no-cache-dir .
ENV ENGRAM_SERVER__HOST=0.0.0.0 \
    ENGRAM_STORAGE__PATH=/data/engram.db \
    HF_HUB_OFFLINE=1
VOLUME ["/data"]
ENTRYPOINT ["engram"]
CMD ["serve", "store"]
