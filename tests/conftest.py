"""Shared fixtures: a real store gRPC server on port 0 over a fresh SQLite file.

The server runs in its own event loop on a background thread, so tests use the
ordinary synchronous gRPC client exactly as a user would.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.store.v1 import store_pb2_grpc
from services.common.config import Config, load_config
from services.store.app import start_store


class ServerThread:
    """Runs an async app factory on a private event loop in a thread."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = asyncio.run_coroutine_threadsafe(factory(), self.loop).result(timeout=30)
        self.stopped = False

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        asyncio.run_coroutine_threadsafe(self.app.stop(1.0), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., Config]:
    def make(**overrides: Any) -> Config:
        return load_config(
            environ={}, overrides={"storage.path": str(tmp_path / "engram.db"), **overrides}
        )

    return make


@pytest.fixture
def start_store_server() -> Iterator[
    Callable[[Config], tuple[ServerThread, store_pb2_grpc.MemoryStoreServiceStub]]
]:
    """Start stores on demand; each is stopped at teardown (or earlier by `.stop()`)."""
    started: list[tuple[ServerThread, grpc.Channel]] = []

    def start(config: Config) -> tuple[ServerThread, store_pb2_grpc.MemoryStoreServiceStub]:
        server = ServerThread(lambda: start_store(config, host="127.0.0.1", port=0))
        channel = grpc.insecure_channel(f"127.0.0.1:{server.app.port}")
        started.append((server, channel))
        return server, store_pb2_grpc.MemoryStoreServiceStub(channel)

    yield start
    for server, channel in started:
        channel.close()
        server.stop()


@pytest.fixture
def store(
    make_config: Callable[..., Config], start_store_server: Any
) -> store_pb2_grpc.MemoryStoreServiceStub:
    """A stub connected to a fresh store with default configuration."""
    _, stub = start_store_server(make_config())
    return stub


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "engram.db"
