"""Real HTTP servers on a loopback port that speak the Ollama, OpenAI and rerank
wire protocols with scripted answers (importable from any test module).

Each server runs the standard library's ThreadingHTTPServer in a thread,
records every request it receives (method, path, parsed JSON body), and can be
stopped and restarted on the same port so that a test can make a provider go
away (connection refused) and come back.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes
    json: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Reply:
    """A scripted answer: `body` is sent as JSON unless it is bytes or str."""

    status: int = 200
    body: Any = None
    delay_s: float = 0.0
    content_type: str = "application/json"
    # extra response headers (Retry-After on a 429)
    headers: dict[str, str] = field(default_factory=dict)

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


Route = Callable[[Request], Reply]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _hold_port(port: int) -> socket.socket:
    """Bind `port` without listening: a connection to it is refused, and the kernel
    hands it to no one binding port 0 (gRPC servers a test starts meanwhile)."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", port))
    return holder


class ScriptedHttpServer:
    """Answers `(method, path)` from `routes`; 404 for anything else.

    `override`, when set, answers every request instead of the routes (a
    provider that starts failing), and `delay_s` delays every answer.
    """

    def __init__(self, routes: dict[tuple[str, str], Route] | None = None) -> None:
        self.routes: dict[tuple[str, str], Route] = dict(routes or {})
        self.requests: list[Request] = []
        self.override: Reply | None = None
        self.delay_s = 0.0
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        # a bound socket that does not listen: it keeps the port while stopped
        # (connections are refused) so that `start()` gets the same port back
        self._placeholder: socket.socket | None = None
        self.port = 0

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> ScriptedHttpServer:
        """Listen (on the previous port after a stop, so clients find it again)."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def setup(self) -> None:
                super().setup()
                with owner._lock:
                    owner._connections.add(self.connection)

            def finish(self) -> None:
                with owner._lock:
                    owner._connections.discard(self.connection)
                super().finish()

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    parsed = json.loads(raw) if raw else None
                except ValueError:
                    parsed = None
                request = Request(self.command, self.path, raw, parsed, dict(self.headers))
                reply = owner._reply(request)
                delay = reply.delay_s + owner.delay_s
                if delay:
                    time.sleep(delay)
                payload = reply.payload()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout under test)

            do_GET = _answer
            do_POST = _answer

        if self._placeholder is None:
            self._server = _Server(("127.0.0.1", self.port), Handler)
        else:
            # listen on the socket that held the port while stopped, so that no
            # server started meanwhile on "any free port" was handed this one
            self._server = _Server(("127.0.0.1", self.port), Handler, bind_and_activate=False)
            self._server.socket.close()
            self._server.socket = self._placeholder
            self._placeholder = None
            self._server.server_address = self._server.socket.getsockname()
            self._server.server_activate()
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening: connections to the port are refused until `start()`, and
        kept-alive connections are closed, as when a real server goes away."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None
        self._thread = None
        self._placeholder = _hold_port(self.port)

    def close(self) -> None:
        """Stop for good: release the port as well."""
        self.stop()
        if self._placeholder is not None:
            self._placeholder.close()
            self._placeholder = None

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- requests --------------------------------------------------------------------

    def _reply(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            override = self.override
            route = self.routes.get((request.method, request.path.split("?")[0]))
        if override is not None:
            return override
        if route is None:
            return Reply(404, {"error": f"no route for {request.method} {request.path}"})
        return route(request)

    def requests_to(self, method: str, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == method and r.path == path]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()


# ---- embedding servers -----------------------------------------------------------------

Embed = Callable[[str], Sequence[float]]


def unit_axis(dimensions: int, axis: int = 0) -> list[float]:
    vector = [0.0] * dimensions
    vector[axis] = 1.0
    return vector


@dataclass
class VectorBook:
    """Which vector a text embeds to: exact texts first, then `default`."""

    vectors: dict[str, list[float]] = field(default_factory=dict)
    default: list[float] = field(default_factory=lambda: unit_axis(8, 7))

    def __call__(self, text: str) -> list[float]:
        return list(self.vectors.get(text, self.default))


def ollama_server(embed: Embed, model: str = "fake-embed") -> ScriptedHttpServer:
    """Ollama: batched `POST /api/embed` {model, input: [...]} -> {embeddings}; `GET /api/tags`."""

    def embed_route(request: Request) -> Reply:
        body = request.json or {}
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list):
            return Reply(400, {"error": "input is required"})
        return Reply(
            200, {"model": body.get("model"), "embeddings": [list(embed(t)) for t in texts]}
        )

    return ScriptedHttpServer(
        {
            ("POST", "/api/embed"): embed_route,
            ("GET", "/api/tags"): lambda _r: Reply(200, {"models": [{"name": model}]}),
        }
    )


def openai_server(
    embed: Embed, model: str = "fake-embed", *, reverse: bool = False
) -> ScriptedHttpServer:
    """OpenAI-compatible `POST /v1/embeddings` -> {data: [{embedding, index}]};
    `reverse` sends the items in reverse order (clients must use `index`).
    `dimensions` in the request shortens each vector to its first that many
    values, as text-embedding-3 models do (Matryoshka)."""

    def embed_route(request: Request) -> Reply:
        body = request.json or {}
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list):
            return Reply(400, {"error": {"message": "input is required"}})
        size = body.get("dimensions")
        data = [
            {"object": "embedding", "index": i, "embedding": list(embed(t))[:size]}
            for i, t in enumerate(texts)
        ]
        if reverse:
            data.reverse()
        return Reply(200, {"object": "list", "model": body.get("model"), "data": data})

    return ScriptedHttpServer(
        {
            ("POST", "/v1/embeddings"): embed_route,
            ("GET", "/v1/models"): lambda _r: Reply(
                200, {"object": "list", "data": [{"id": model, "object": "model"}]}
            ),
        }
    )


def gemini_embedding_server(
    embed: Embed, model: str = "fake-embed", api_key: str | None = None
) -> ScriptedHttpServer:
    """Gemini `POST /v1beta/models/{model}:batchEmbedContents` {requests: [{model,
    content: {parts: [{text}]}, outputDimensionality?}]} -> {embeddings: [{values}]}
    (`outputDimensionality` keeps the first that many values); `GET /v1beta/models`.
    With `api_key`, a request without it in `x-goog-api-key` gets Google's 400."""

    def refused(request: Request) -> Reply | None:
        given = {k.lower(): v for k, v in request.headers.items()}.get("x-goog-api-key")
        if api_key is not None and given != api_key:
            return Reply(
                400,
                {
                    "error": {
                        "code": 400,
                        "status": "INVALID_ARGUMENT",
                        "message": "API key not valid",
                    }
                },
            )
        return None

    def embed_route(request: Request) -> Reply:
        bad = refused(request)
        if bad is not None:
            return bad
        items = (request.json or {}).get("requests")
        if not isinstance(items, list) or not items:
            return Reply(
                400,
                {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "requests empty"}},
            )
        vectors = []
        for item in items:
            text = "".join(p.get("text", "") for p in item["content"]["parts"])
            vectors.append({"values": list(embed(text))[: item.get("outputDimensionality")]})
        return Reply(200, {"embeddings": vectors})

    return ScriptedHttpServer(
        {
            ("POST", f"/v1beta/models/{model}:batchEmbedContents"): embed_route,
            ("GET", "/v1beta/models"): lambda r: (
                refused(r) or Reply(200, {"models": [{"name": f"models/{model}"}]})
            ),
        }
    )


def rerank_server(score: Callable[[str, str], float], delay_s: float = 0.0) -> ScriptedHttpServer:
    """`POST /v1/rerank` {model, query, documents} -> {results: [{index, relevance_score}]},
    best first as real rerankers answer."""

    def rerank_route(request: Request) -> Reply:
        body = request.json or {}
        documents = body.get("documents") or []
        results = [
            {"index": i, "relevance_score": score(body.get("query", ""), d)}
            for i, d in enumerate(documents)
        ]
        results.sort(key=lambda r: -r["relevance_score"])
        return Reply(200, {"results": results}, delay_s=delay_s)

    return ScriptedHttpServer({("POST", "/v1/rerank"): rerank_route})
