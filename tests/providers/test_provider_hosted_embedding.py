"""Remote embedding providers users pick, against real HTTP servers on loopback:
OpenAI's `/v1/embeddings` with reduced `dimensions` and a key, and Google
Gemini's `batchEmbedContents` (another protocol) with `outputDimensionality`;
`providers.embedding.dimensions` (seed 003's `embedding_dimensions`) and the
name the vector index records for a reduced model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from backend_db import storage_backend  # noqa: F401  (a fixture: both backends)
from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from http_fakes import Reply, Request, ScriptedHttpServer, gemini_embedding_server, openai_server
from llm_fakes import gemini_error, header
from services.common.config import ConfigError, load_config
from services.common.providers.embedding import (
    GeminiEmbedding,
    OpenAIEmbedding,
    embedding_provider,
)
from services.common.providers.errors import ProviderError, ProviderUnavailable, RateLimited
from services.store.app import configured_index_model

KEY = "embed-key-0123456789-secret"


def sixteen(text: str) -> list[float]:
    """A 16-dimensional vector per text (its first value tells the texts apart)."""
    return [float(len(text))] + [0.5] * 15


def embed(provider: Any, texts: list[str]) -> list[list[float]]:
    async def go() -> list[list[float]]:
        try:
            return list(await provider.embed(texts))
        finally:
            await provider.close()

    return asyncio.run(go())


def failure(provider: Any) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        embed(provider, ["alpha"])
    return caught.value


def configured(**overrides: Any) -> Any:
    return load_config(
        environ={}, overrides={f"providers.embedding.{k}": v for k, v in overrides.items()}
    )


def test_openai_embeddings_send_reduced_dimensions_and_the_key(
    http_servers: Callable[[Any], Any],
) -> None:
    server = http_servers(openai_server(sixteen))
    config = configured(
        kind="openai",
        base_url=server.url,
        model="text-embedding-3-large",
        dimensions=8,
        api_key=KEY,
    )
    provider = embedding_provider(config)
    assert provider.model == "text-embedding-3-large@8", "the index's name for the reduced model"
    vectors = embed(provider, ["a", "bbb"])
    assert [len(v) for v in vectors] == [8, 8] and [v[0] for v in vectors] == [1.0, 3.0]
    [request] = server.requests_to("POST", "/v1/embeddings")
    assert request.json == {
        "model": "text-embedding-3-large",
        "input": ["a", "bbb"],
        "dimensions": 8,
    }
    assert header(request, "authorization") == f"Bearer {KEY}"


def test_openai_embeddings_without_dimensions_send_none(http_servers: Callable[[Any], Any]) -> None:
    server = http_servers(openai_server(sixteen))
    provider = embedding_provider(configured(kind="openai", base_url=server.url, model="m"))
    assert provider.model == "m"
    assert [len(v) for v in embed(provider, ["a"])] == [16]
    [request] = server.requests_to("POST", "/v1/embeddings")
    assert "dimensions" not in request.json
    assert header(request, "authorization") is None


def test_a_server_that_ignores_reduced_dimensions_is_refused(
    http_servers: Callable[[Any], Any],
) -> None:
    def full_size(request: Request) -> Reply:
        texts = request.json["input"]
        return Reply(
            200, {"data": [{"index": i, "embedding": sixteen(t)} for i, t in enumerate(texts)]}
        )

    server = http_servers(ScriptedHttpServer({("POST", "/v1/embeddings"): full_size}))
    error = failure(OpenAIEmbedding(server.url, "m", 5000, dimensions=8))
    assert not isinstance(error, ProviderUnavailable)
    assert "16 dimensions, not the 8 of providers.embedding.dimensions" in str(error)


def test_gemini_batch_embed_contents(http_servers: Callable[[Any], Any], tmp_path: Path) -> None:
    server = http_servers(
        gemini_embedding_server(sixteen, model="gemini-embedding-001", api_key=KEY)
    )
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    config = configured(
        kind="gemini",
        base_url=server.url,
        model="gemini-embedding-001",
        dimensions=8,
        api_key_file=str(key_file),
    )
    provider = embedding_provider(config)
    assert isinstance(provider, GeminiEmbedding) and provider.model == "gemini-embedding-001@8"
    vectors = embed(provider, ["a", "bb", "cccc"])
    assert [v[0] for v in vectors] == [1.0, 2.0, 4.0], "in the order asked"
    assert {len(v) for v in vectors} == {8}
    [request] = server.requests_to("POST", "/v1beta/models/gemini-embedding-001:batchEmbedContents")
    assert request.json["requests"][0] == {
        "model": "models/gemini-embedding-001",
        "content": {"parts": [{"text": "a"}]},
        "outputDimensionality": 8,
    }
    assert header(request, "x-goog-api-key") == KEY and "key=" not in request.path


def test_gemini_probe_and_a_wrong_key(http_servers: Callable[[Any], Any]) -> None:
    server = http_servers(gemini_embedding_server(sixteen, api_key=KEY))

    async def probe(key: str) -> str:
        provider = GeminiEmbedding(server.url, "fake-embed", 5000, api_key=key)
        try:
            return str(await provider.probe())
        finally:
            await provider.close()

    assert asyncio.run(probe(KEY)) == ""
    assert "API key not valid" in asyncio.run(probe("wrong"))
    error = failure(GeminiEmbedding(server.url, "fake-embed", 5000, api_key="wrong"))
    assert not isinstance(error, ProviderUnavailable) and "INVALID_ARGUMENT" in str(error)


def test_gemini_rate_limit_and_outage_mean_wait(http_servers: Callable[[Any], Any]) -> None:
    server = http_servers(gemini_embedding_server(sixteen))
    server.override = gemini_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded", retry_after="7")
    error = failure(GeminiEmbedding(server.url, "fake-embed", 5000))
    assert isinstance(error, RateLimited) and error.retry_after_s == 7.0
    assert "RESOURCE_EXHAUSTED" in str(error)
    server.stop()
    assert isinstance(failure(GeminiEmbedding(server.url, "fake-embed", 5000)), ProviderUnavailable)


def test_the_index_and_the_provider_agree_on_the_reduced_models_name() -> None:
    config = configured(kind="openai", base_url="http://127.0.0.1:9", model="m", dimensions=256)
    assert configured_index_model(config) == embedding_provider(config).model == "m@256"
    plain = configured(kind="openai", base_url="http://127.0.0.1:9", model="m")
    assert configured_index_model(plain) == "m", "an index built before the setting keeps its name"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dimensions": 256}, r"providers\.embedding.*kind local returns its model's full size"),
        ({"kind": "ollama", "model": "m", "dimensions": 256}, r"kind ollama"),
        ({"kind": "openai", "model": "m", "dimensions": 100}, r"providers\.embedding\.dimensions"),
        ({"kind": "openai", "model": "m", "api_key": "a", "api_key_env": "B"}, r"at most one"),
    ],
)
def test_bad_embedding_settings_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        configured(**overrides)


def test_gemini_embeddings_default_to_googles_api() -> None:
    assert configured(kind="gemini", model="m").providers.embedding.base_url == (
        "https://generativelanguage.googleapis.com"
    )


# ---- the store's index: another size is another model ----------------------------------


def test_changing_the_dimensions_reembeds_and_the_index_refuses_the_old_size(
    recall_stack: Callable[..., Any],
) -> None:
    base = {
        "providers.embedding.kind": "openai",
        "providers.embedding.base_url": "http://127.0.0.1:9",  # the store never calls it
        "providers.embedding.model": "text-embedding-3-small",
    }
    full = recall_stack(base, search=False)
    full.remember("alpha memory")
    full.remember("beta memory")
    assert full.embed_pending(lambda _t: [0.5] * 16, model="text-embedding-3-small") == 2
    full.store_thread.stop()

    reduced = recall_stack({**base, "providers.embedding.dimensions": 8}, search=False)
    stats = reduced.stats()
    assert (stats.index_model, stats.indexed_memory_count) == ("text-embedding-3-small@8", 0)
    jobs = reduced.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EMBED, max_jobs=10)
    ).jobs
    assert len(jobs) == 2, "every memory queued for re-embedding at the new size"

    def complete(model: str, size: int) -> Any:
        return reduced.jobs.CompleteEmbedJobs(
            jq.CompleteEmbedJobsRequest(
                model=model,
                results=[
                    jq.EmbedResult(
                        lease=jq.JobLease(job_id=j.id, lease_token=j.lease_token),
                        content_hash=j.content_hash,
                        vector=[0.5] * size,
                    )
                    for j in jobs
                ],
            )
        )

    with pytest.raises(grpc.RpcError) as caught:
        complete("text-embedding-3-small", 16)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "providers.embedding model and dimensions" in caught.value.details()
    complete("text-embedding-3-small@8", 8)
    stats = reduced.stats()
    assert (stats.indexed_memory_count, stats.index_dimensions) == (2, 8)
