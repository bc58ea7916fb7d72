"""The database holds every namespace's memories, so a store on a fresh data
directory creates it 0700 and engram.db, -wal and -shm 0600 (like the keys,
backups and TLS keys), whatever the umask; `engram restore` installs 0600 too."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_helpers import REPO_ROOT, Launcher, clean_env, engram_command
from engram.store.v1 import store_pb2

NAMESPACE = "perms"
DATABASE_FILES = ("engram.db", "engram.db-shm", "engram.db-wal")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes(data_dir: Path) -> dict[str, int]:
    return {path.name: mode(path) for path in sorted(data_dir.iterdir())}


def engram(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        engram_command(*args),
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(autouse=True)
def common_umask() -> Iterator[None]:
    """The usual umask (022), which the processes started here inherit: under it
    files were created 0644 and directories 0755."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def test_a_store_creates_its_data_directory_and_database_private(
    launcher: Launcher, tmp_path: Path
) -> None:
    data_dir = tmp_path / "fresh" / "data"  # neither exists yet
    store = launcher.start_store(data_dir)
    store.stub().Remember(store_pb2.RememberRequest(namespace=NAMESPACE, content="private"))

    assert mode(data_dir) == 0o700
    assert modes(data_dir) == dict.fromkeys(DATABASE_FILES, 0o600)
    assert store.stop() == 0


def test_restore_installs_the_database_private(launcher: Launcher, tmp_path: Path) -> None:
    live_dir = tmp_path / "live"
    store = launcher.start_store(live_dir)
    store.stub().Remember(store_pb2.RememberRequest(namespace=NAMESPACE, content="backed up"))
    backup_file = tmp_path / "engram-backup.db"
    assert engram("backup", "--data-dir", str(live_dir), "--to", str(backup_file)).returncode == 0
    assert store.stop() == 0

    into_new = tmp_path / "new" / "data"
    restored = engram("restore", "--from", str(backup_file), "--data-dir", str(into_new))
    assert restored.returncode == 0, restored.stderr
    assert mode(into_new) == 0o700
    assert modes(into_new) == {"engram.db": 0o600}

    # Over a database an older Engram left world-readable: the restored one is private.
    (live_dir / "engram.db").chmod(0o644)
    forced = engram("restore", "--from", str(backup_file), "--data-dir", str(live_dir), "--force")
    assert forced.returncode == 0, forced.stderr
    assert modes(live_dir) == {"engram.db": 0o600}

    # The store it restarts on the restored file keeps -wal and -shm private too.
    restarted = launcher.start_store(into_new)
    restarted.stub().Remember(store_pb2.RememberRequest(namespace=NAMESPACE, content="after"))
    assert modes(into_new) == dict.fromkeys(DATABASE_FILES, 0o600)
    assert restarted.stop() == 0


def test_engram_keys_create_before_any_store_makes_the_data_directory_private(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "keys-first" / "data"
    created = engram(
        "keys", "create", "--role", "reader", "--namespace", "a", "--data-dir", str(data_dir)
    )
    assert created.returncode == 0, created.stderr
    assert mode(data_dir) == 0o700
    assert mode(data_dir / "keys.json") == 0o600
