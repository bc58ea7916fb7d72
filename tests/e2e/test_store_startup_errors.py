"""A data directory the store cannot write stops `engram serve store` with one
line on stderr naming the path, exit code 1, and no traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_helpers import Launcher
from services.storage.db import open_read_write
from services.storage.sqlite_migrations import MIGRATIONS, apply_migrations

STARTUP_FAILURE_TIMEOUT_S = 20.0


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody can write, root included: a read-only tmpfs when we
    are root (root ignores permission bits), mode 0555 otherwise. It holds an
    existing store database, as a volume mounted read-only by mistake would."""
    path = tmp_path / "read-only"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount command")
    done = _run([mount, "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)])
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        (path / "data").mkdir()
        database = open_read_write(path / "data" / "engram.db")
        apply_migrations(database)
        database.close()
        remount = _run([mount, "-o", "remount,ro", str(path)])
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {remount.stderr.strip()}")
        yield path
    finally:
        _run(["umount", str(path)])


@pytest.mark.parametrize(
    "where",
    [
        pytest.param("", id="read-only-directory"),
        pytest.param("data", id="read-only-directory-with-a-database"),
        pytest.param("missing/deeper", id="missing-directory-that-cannot-be-created"),
    ],
)
def test_unwritable_data_directory_stops_the_store_with_one_line(
    launcher: Launcher, read_only_dir: Path, where: str
) -> None:
    data_dir = read_only_dir / where if where else read_only_dir
    store = launcher.start_store(data_dir, wait=False)
    code = store.wait_exit(timeout=STARTUP_FAILURE_TIMEOUT_S)
    output = store.log()
    assert code == 1, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("engram: cannot start store: cannot open the database "), output
    assert str(data_dir / "engram.db") in lines[0]


def test_data_directory_that_is_a_file_stops_the_store_with_one_line(
    launcher: Launcher, tmp_path: Path
) -> None:
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("not a directory")
    store = launcher.start_store(not_a_dir / "data", wait=False)
    code = store.wait_exit(timeout=STARTUP_FAILURE_TIMEOUT_S)
    output = store.log()
    assert code == 1, output
    assert "Traceback" not in output
    assert [line for line in output.splitlines() if line.strip()] == [
        f"engram: cannot start store: cannot open the database {not_a_dir / 'data' / 'engram.db'}: "
        "Not a directory"
    ]


def test_a_database_whose_applied_migration_was_edited_stops_the_store_naming_it(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A database that ran another text of migration 2 than the code ships:
    the store refuses to start on a schema its code does not describe."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    database = open_read_write(data_dir / "engram.db")
    edited = list(MIGRATIONS)
    name, sql = edited[1]
    edited[1] = (name, sql.replace("(namespace, is_deleted)", "(namespace)"))
    apply_migrations(database, edited)
    database.close()
    store = launcher.start_store(data_dir, wait=False)
    code = store.wait_exit(timeout=STARTUP_FAILURE_TIMEOUT_S)
    output = store.log()
    assert code == 1, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith(
        f"engram: cannot start store: refusing to start on the database {data_dir / 'engram.db'}:"
        " migration 2 (embeddings_and_vector_index) was applied with different SQL"
    ), output
