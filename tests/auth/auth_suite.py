"""An auth-on suite for the auth tests: store, search, pipeline and maintenance on
port 0 over one SQLite file, with keys made through services.common.auth (the
functions `engram keys` runs) in the suite's keys file."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from server_thread import ServerThread

from services.common import auth
from services.common.config import Config, load_config
from services.maintenance.app import start_maintenance
from services.pipeline.app import start_pipeline
from services.search.app import start_search
from services.store.app import start_store


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


@dataclass
class AuthSuite:
    config: Config
    keys_file: Path
    db_path: Path
    service_key: str
    addresses: dict[str, str]
    threads: list[ServerThread] = field(default_factory=list)
    channels: list[grpc.Channel] = field(default_factory=list)

    def channel(self, service: str) -> grpc.Channel:
        channel = grpc.insecure_channel(self.addresses[service])
        self.channels.append(channel)
        return channel

    def key(self, role: str, *namespaces: str, name: str | None = None) -> str:
        return auth.create_key(self.keys_file, role, namespaces, name)[1]

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
        for thread in reversed(self.threads):
            thread.stop()


def start_auth_suite(
    tmp: Path, llm_url: str, overrides: dict[str, Any] | None = None, *, services: str = "all"
) -> AuthSuite:
    """Auth on, a random service key, keys re-read every 100 ms; `services`: "all" or
    "store" (the store alone)."""
    service_key = "svc_" + secrets.token_hex(24)
    config = load_config(
        environ={},
        overrides={
            "storage.path": str(tmp / "engram.db"),
            "auth.enabled": True,
            "auth.service_key": service_key,
            "auth.reload_ms": 100,
            "providers.embedding.kind": "none",
            "providers.llm.base_url": llm_url,
            "providers.llm.model": "fake-llm",
            "providers.llm.timeout_ms": 2000,
            **(overrides or {}),
        },
    )
    suite = AuthSuite(config, auth.keys_path(config), tmp / "engram.db", service_key, {})
    try:
        store = ServerThread(lambda: start_store(config, host="127.0.0.1", port=0, internal_port=0))
        suite.threads.append(store)
        suite.addresses["store"] = f"127.0.0.1:{store.app.port}"
        suite.addresses["store_internal"] = f"127.0.0.1:{store.app.internal_port}"
        config = config.with_overrides(
            {
                "clients.store_address": suite.addresses["store"],
                "clients.store_internal_address": suite.addresses["store_internal"],
            }
        )
        if services == "all":
            for name, starter in (("search", start_search), ("pipeline", start_pipeline)):
                thread = ServerThread(
                    lambda starter=starter, config=config: starter(config, host="127.0.0.1", port=0)
                )
                suite.threads.append(thread)
                suite.addresses[name] = f"127.0.0.1:{thread.app.port}"
            config = config.with_overrides(
                {
                    "clients.search_address": suite.addresses["search"],
                    "clients.pipeline_address": suite.addresses["pipeline"],
                }
            )
            thread = ServerThread(lambda: start_maintenance(config, host="127.0.0.1", port=0))
            suite.threads.append(thread)
            suite.addresses["maintenance"] = f"127.0.0.1:{thread.app.port}"
        suite.config = config
    except BaseException:
        suite.close()
        raise
    return suite
