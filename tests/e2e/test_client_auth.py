"""API keys through engram.client and the client CLI, against an auth-on store
(a real `engram serve store` process): no key is Unauthenticated, a key whose role
or namespaces do not cover the call is PermissionDenied, a writer key works, and
the CLI takes the key from ENGRAM_API_KEY or --api-key."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from e2e_helpers import REPO_ROOT, Launcher, ProcessHandle, clean_env, engram_command, free_port
from engram.client import Engram, PermissionDenied, ResourceExhausted, Unauthenticated


def _env(data_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    path = os.pathsep.join(
        [str(REPO_ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    )
    return clean_env(
        {"PYTHONPATH": path, "ENGRAM_STORAGE__PATH": str(data_dir / "engram.db"), **(extra or {})}
    )


def _create_key(data_dir: Path, role: str, namespace: str) -> str:
    done = subprocess.run(
        engram_command("keys", "create", "--role", role, "--namespace", namespace),
        cwd=REPO_ROOT,
        env=_env(data_dir, {"ENGRAM_CONFIG": ""}),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    key = done.stdout.strip().splitlines()[-1]
    assert key.startswith("engram_")
    return key


def _auth_store(
    launcher: Launcher, tmp_path: Path, extra: dict[str, str] | None = None
) -> tuple[ProcessHandle, Path]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    handle = launcher.start_store(
        data_dir,
        env={
            "ENGRAM_AUTH__ENABLED": "true",
            "ENGRAM_AUTH__SERVICE_KEY": "s" * 40,
            "ENGRAM_SERVER__PORTS__STORE_INTERNAL": str(free_port()),
            **(extra or {}),
        },
    )
    return handle, data_dir


@pytest.fixture
def store(launcher: Launcher, tmp_path: Path) -> tuple[ProcessHandle, Path]:
    return _auth_store(launcher, tmp_path)


def test_rate_limited_key_is_resource_exhausted_with_retry_after(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A writer key's bucket of 2 calls, refilled at one call per 100 s: the third
    call is ResourceExhausted, and RetryInfo says when to come back."""
    limits = {
        "ENGRAM_AUTH__RATE_LIMITS__WRITER__RATE": "0.01",
        "ENGRAM_AUTH__RATE_LIMITS__WRITER__BURST": "2",
    }
    handle, data_dir = _auth_store(launcher, tmp_path, limits)
    writer = _create_key(data_dir, "writer", "team-a")
    with Engram(handle.address, api_key=writer) as engram:
        engram.remember("one", namespace="team-a")
        engram.remember("two", namespace="team-a")
        with pytest.raises(ResourceExhausted) as limited:
            engram.remember("three", namespace="team-a")
    assert limited.value.retry_after_s is not None and limited.value.retry_after_s > 0
    assert limited.value.reason


def test_client_errors_for_missing_and_insufficient_keys(
    store: tuple[ProcessHandle, Path],
) -> None:
    handle, data_dir = store
    writer = _create_key(data_dir, "writer", "team-a")
    reader = _create_key(data_dir, "reader", "team-a")
    with Engram(handle.address) as anonymous, pytest.raises(Unauthenticated) as refused:
        anonymous.get_memory("x", namespace="team-a")
    assert refused.value.request_id
    with Engram(handle.address, api_key=reader) as engram:
        with pytest.raises(PermissionDenied):
            engram.remember("readers cannot write", namespace="team-a")
        assert list(engram.list_memories(namespace="team-a")) == []
    with Engram(handle.address, api_key=writer) as engram:
        stored = engram.remember("writers can", namespace="team-a")
        assert engram.get_memory(stored.memory.id, namespace="team-a").content == "writers can"
        with pytest.raises(PermissionDenied):
            engram.remember("not my namespace", namespace="team-b")


def test_cli_takes_the_key_from_the_environment_or_the_option(
    store: tuple[ProcessHandle, Path],
) -> None:
    handle, data_dir = store
    writer = _create_key(data_dir, "writer", "team-a")

    def cli(*args: str, key_env: str | None = None) -> subprocess.CompletedProcess[str]:
        extra = {"ENGRAM_API_KEY": key_env} if key_env else {}
        return subprocess.run(
            engram_command(*args, "-n", "team-a", "--address", handle.address),
            cwd=REPO_ROOT,
            env=_env(data_dir, extra),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    without = cli("remember", "no key")
    assert without.returncode == 1 and "UNAUTHENTICATED" in without.stderr
    from_env = cli("remember", "key from the environment", key_env=writer)
    assert from_env.returncode == 0, from_env.stderr
    from_option = cli("remember", "key from the option", "--api-key", writer)
    assert from_option.returncode == 0, from_option.stderr
    listed = cli("list", "--json", key_env=writer)
    assert "key from the environment" in listed.stdout and "key from the option" in listed.stdout
