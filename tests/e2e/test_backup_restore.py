"""`engram backup` while the store takes writes, then `engram restore` into a fresh
data directory: every memory acknowledged before the backup started is there.
And restore refuses a corrupt file, a file migrated by a newer (or edited) Engram,
and a data directory some process still has open."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from e2e_helpers import (
    REPO_ROOT,
    Launcher,
    clean_env,
    engram_command,
    listed_ids,
    lost_memories,
)
from engram.store.v1 import store_pb2, store_pb2_grpc
from services.storage.db import open_read_write
from services.storage.sqlite_migrations import MIGRATIONS, apply_migrations

WRITERS = 4
ACKS_BEFORE_BACKUP = 200
NAMESPACE = "backup"
COMMAND_TIMEOUT_S = 120


def engram(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        engram_command(*args),
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )


@dataclass
class Load:
    """Writer threads remembering until told to stop, and what was acknowledged."""

    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, str] = field(default_factory=dict)  # id -> content
    errors: list[str] = field(default_factory=list)

    def acknowledged(self) -> dict[str, str]:
        with self.lock:
            return dict(self.acked)


def remember_until_stopped(
    stub: store_pb2_grpc.MemoryStoreServiceStub, load: Load, writer: int
) -> None:
    seq = 0
    while not load.stop.is_set():
        content = f"backup under load w{writer} s{seq}"
        seq += 1
        try:
            reply = stub.Remember(
                store_pb2.RememberRequest(namespace=NAMESPACE, content=content), timeout=30
            )
        except grpc.RpcError as exc:
            with load.lock:
                load.errors.append(f"{exc.code()}: {exc.details()}")
            return
        with load.lock:
            load.acked[reply.memory.id] = content


def wait_for_acks(load: Load, count: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while len(load.acknowledged()) < count:
        assert not load.errors, load.errors
        assert time.monotonic() < deadline, f"only {len(load.acknowledged())} acks"
        time.sleep(0.05)


def test_backup_under_write_load_restores_every_memory_acknowledged_before_it(
    launcher: Launcher, tmp_path: Path
) -> None:
    live_dir, restored_dir = tmp_path / "live", tmp_path / "restored"
    backup_file = tmp_path / "engram-backup.db"
    store = launcher.start_store(live_dir)
    load = Load()
    writers = [
        threading.Thread(target=remember_until_stopped, args=(store.stub(), load, n), daemon=True)
        for n in range(WRITERS)
    ]
    for writer in writers:
        writer.start()
    wait_for_acks(load, ACKS_BEFORE_BACKUP)

    before = load.acknowledged()
    backed_up = engram("backup", "--data-dir", str(live_dir), "--to", str(backup_file))
    during = len(load.acknowledged()) - len(before)
    wait_for_acks(load, len(before) + during + 20)  # and the store still takes writes after
    load.stop.set()
    for writer in writers:
        writer.join(timeout=60)
    assert backed_up.returncode == 0, backed_up.stderr
    assert during > 0, "writes must be acknowledged while the backup runs"
    assert load.errors == []
    assert store.stop() == 0

    restored = engram("restore", "--from", str(backup_file), "--data-dir", str(restored_dir))
    assert restored.returncode == 0, restored.stderr
    assert sorted(path.name for path in restored_dir.iterdir()) == ["engram.db"]

    stub = launcher.start_store(restored_dir).stub()
    assert lost_memories(stub, NAMESPACE, before) == []
    listed = listed_ids(stub, NAMESPACE)
    assert set(before) <= listed
    # The restored store takes writes again.
    stub.Remember(store_pb2.RememberRequest(namespace=NAMESPACE, content="after restore"))


def engram_database(path: Path) -> Path:
    """A database as the store leaves it (every migration applied), with the store nowhere."""
    conn = open_read_write(path)
    try:
        apply_migrations(conn)
    finally:
        conn.close()
    return path


def test_restore_refuses_a_file_that_is_no_database(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"definitely not SQLite " * 500)
    target = tmp_path / "data"

    result = engram("restore", "--from", str(junk), "--data-dir", str(target))

    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"engram restore: {junk} is not a usable SQLite database: file is not a database"
    ]
    assert list(target.iterdir()) == []  # no database, no staging file left behind


@pytest.mark.parametrize(
    ("damaged_tree", "problem"),
    [
        # integrity_check reports it
        ("memories_live_hash", "btreeInitPage() returns error code 11"),
        # the check itself stops on it
        ("memories", "database disk image is malformed"),
    ],
)
def test_restore_refuses_a_database_that_fails_the_integrity_check(
    tmp_path: Path, damaged_tree: str, problem: str
) -> None:
    damaged = engram_database(tmp_path / "damaged.db")
    conn = open_read_write(damaged)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (damaged_tree,)
        ).fetchone()[0]
        conn.execute("PRAGMA journal_mode = DELETE")  # everything in the main file
    finally:
        conn.close()
    with damaged.open("r+b") as file:  # the tree's root page, overwritten
        file.seek((root - 1) * page_size)
        file.write(b"\xa5" * page_size)
    target = tmp_path / "data"

    result = engram("restore", "--from", str(damaged), "--data-dir", str(target))

    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"engram restore: {damaged} fails the integrity check: "), line
    assert problem in line
    assert list(target.iterdir()) == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            "INSERT INTO schema_migrations(version, name, applied_at, checksum)"
            f" VALUES ({len(MIGRATIONS) + 1}, 'from_a_newer_engram', '2030-01-01', 'x')",
            "which this version of Engram does not ship",
        ),
        (
            "UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1",
            "a shipped migration was edited",
        ),
        ("DROP TABLE schema_migrations", "it records no migrations"),
    ],
    ids=["unknown", "edited", "none"],
)
def test_restore_refuses_migrations_this_engram_does_not_ship(
    tmp_path: Path, change: str, reason: str
) -> None:
    backup = engram_database(tmp_path / "other.db")
    conn = open_read_write(backup)
    try:
        conn.execute(change)
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()
    target = tmp_path / "data"

    result = engram("restore", "--from", str(backup), "--data-dir", str(target))

    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"engram restore: {backup} cannot be restored by this Engram: "), line
    assert reason in line
    assert list(target.iterdir()) == []


def test_restore_accepts_a_backup_from_an_older_engram(tmp_path: Path) -> None:
    older = tmp_path / "older.db"
    conn = open_read_write(older)
    try:
        apply_migrations(conn, MIGRATIONS[:-1])
    finally:
        conn.close()
    target = tmp_path / "data"

    result = engram("restore", "--from", str(older), "--data-dir", str(target))

    assert result.returncode == 0, result.stderr
    assert f"({len(MIGRATIONS) - 1} migrations recorded;" in result.stdout


def test_restore_refuses_a_data_directory_a_store_has_open(
    launcher: Launcher, tmp_path: Path
) -> None:
    live_dir = tmp_path / "live"
    store = launcher.start_store(live_dir)
    stub = store.stub()
    kept = stub.Remember(store_pb2.RememberRequest(namespace=NAMESPACE, content="still here"))
    backup = engram_database(tmp_path / "backup.db")

    without_force = engram("restore", "--from", str(backup), "--data-dir", str(live_dir))
    with_force = engram("restore", "--from", str(backup), "--data-dir", str(live_dir), "--force")

    assert without_force.returncode == 1
    assert "exists; pass --force to replace it" in without_force.stderr
    assert with_force.returncode == 1
    assert with_force.stderr.strip().splitlines() == [
        f"engram restore: {live_dir / 'engram.db'} is open in another process"
        " (a running store or search?); stop the suite before restoring"
    ]
    got = stub.GetMemory(store_pb2.GetMemoryRequest(namespace=NAMESPACE, id=kept.memory.id))
    assert got.memory.content == "still here"
    assert sorted(path.name for path in live_dir.iterdir()) == [
        "engram.db",
        "engram.db-shm",
        "engram.db-wal",
    ]

    assert store.stop() == 0
    after_stop = engram("restore", "--from", str(backup), "--data-dir", str(live_dir), "--force")
    assert after_stop.returncode == 0, after_stop.stderr


def test_backup_refuses_to_replace_a_file_unless_forced(launcher: Launcher, tmp_path: Path) -> None:
    live_dir = tmp_path / "live"
    launcher.start_store(live_dir)
    existing = tmp_path / "existing.db"
    existing.write_text("keep me")

    refused = engram("backup", "--data-dir", str(live_dir), "--to", str(existing))
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"engram backup: {existing} exists; pass --force to replace it"
    ]
    assert existing.read_text() == "keep me"

    forced = engram("backup", "--data-dir", str(live_dir), "--to", str(existing), "--force")
    assert forced.returncode == 0, forced.stderr
    assert existing.read_bytes().startswith(b"SQLite format 3\x00")


def test_backup_refuses_the_database_itself_and_a_missing_one(tmp_path: Path) -> None:
    database = engram_database(tmp_path / "data" / "engram.db")
    itself = engram("backup", "--data-dir", str(database.parent), "--to", str(database), "--force")
    missing = engram("backup", "--data-dir", str(tmp_path / "none"), "--to", str(tmp_path / "b"))

    assert itself.returncode == missing.returncode == 1
    assert "is the database itself" in itself.stderr
    assert f"no database at {tmp_path / 'none' / 'engram.db'}" in missing.stderr


def test_restore_refuses_the_database_itself(tmp_path: Path) -> None:
    database = engram_database(tmp_path / "data" / "engram.db")
    before = database.read_bytes()

    result = engram(
        "restore", "--from", str(database), "--data-dir", str(database.parent), "--force"
    )

    assert result.returncode == 1
    assert "is the database itself" in result.stderr
    assert database.read_bytes() == before
