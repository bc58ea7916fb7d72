"""Online backup of the store's database, and restore into a stopped data directory.

Backup never writes the live database (only the store opens it read-write): it
opens a read-only connection and copies it with SQLite's online backup API in one
step, which reads one consistent snapshot (a single read transaction in WAL mode)
while the store keeps committing. `VACUUM INTO` would do too, but SQLite refuses it
on a `query_only` connection, which every reader here is. The copy is written to a
temporary file next to the target, switched to journal_mode=DELETE (so it is one
self-contained file, with no -wal beside it), fsynced and renamed into place.

Restore checks before it replaces anything: the file passes `PRAGMA
integrity_check` and records only migrations this Engram ships unedited (an older
backup is fine: the store applies the pending ones when it starts), and no process
has the target database open. That last check asks SQLite itself: in WAL mode every
open connection (the store's, search's read-only ones, a backup in progress) holds
a shared lock on the database file for as long as it is open, so a connection in
exclusive locking mode cannot begin an exclusive transaction while any of them
exists. A port or health probe would miss a store on another port or search alone.
The checked copy then replaces the database atomically: the old database's -wal,
-shm and -journal files go first (a stale -wal replayed onto the restored file
would corrupt it), then rename.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import sqlean

from services.storage import sqlite
from services.storage.db import (
    PRIVATE_DIR_MODE,
    DatabaseError,
    OperationalError,
    open_read_only,
    open_read_write,
)
from services.storage.sqlite_migrations import MigrationMismatch, check_recorded_migrations

if TYPE_CHECKING:
    from services.common.config import StorageSettings

# Files SQLite keeps beside a database, by suffix.
SIDECARS = ("-wal", "-shm", "-journal")
# integrity_check lines quoted in an error.
SHOWN_PROBLEMS = 3


class BackupError(Exception):
    """Backup or restore refused or failed; the message is one line for the operator."""


def refuse_postgres(storage: StorageSettings, command: Literal["backup", "restore"]) -> None:
    """Backup and restore copy SQLite's file. A PostgreSQL database is backed up
    and restored with PostgreSQL's own tools, which take a consistent snapshot
    while the store keeps writing and know its roles, extensions and indexes."""
    if storage.kind != "postgres":
        return
    if command == "backup":
        how = (
            "use pg_dump, e.g. `pg_dump --format=custom --file=engram.dump "
            '"$DSN"` (a consistent snapshot; the store keeps serving)'
        )
    else:
        how = (
            "stop the store, then use pg_restore into an empty database, e.g. "
            '`pg_restore --no-owner --dbname="$DSN" engram.dump`, and start the store '
            "on it (it checks the recorded migrations and applies newer ones)"
        )
    raise BackupError(f"storage.kind is postgres: engram {command} copies SQLite files; {how}")


def backup(database: str | Path, target: str | Path, *, force: bool = False) -> int:
    """Copy the live `database` to `target` (refused if it exists, unless `force`);
    return the size of the copy in bytes. The copy is readable by its owner only
    (mode 0600): it holds every namespace's memories."""
    database, target = Path(database), Path(target)
    if target.resolve() == database.resolve() or any(
        target.resolve() == Path(f"{database}{suffix}").resolve() for suffix in SIDECARS
    ):
        raise BackupError(f"{target} is the database itself; back up to another file")
    if target.exists() and not force:
        raise BackupError(f"{target} exists; pass --force to replace it")
    if not database.is_file():
        raise BackupError(f"no database at {database}")
    if not target.parent.is_dir():
        raise BackupError(f"{target.parent} is not a directory")
    with _staging_file(target.parent, ".engram-backup-") as staging:
        try:
            source = open_read_only(database)
            try:
                # a plain connection: the copy is no one's database yet, and a WAL
                # destination would refuse a source with another page size
                copy = sqlean.connect(str(staging), isolation_level=None)
                try:
                    source.backup(copy)  # pages=-1: all of it, in one snapshot
                    sqlite.leave_wal(copy)
                finally:
                    copy.close()
            finally:
                source.close()
        except DatabaseError as exc:
            raise BackupError(f"cannot back up {database}: {exc}") from exc
        _fsync(staging)
        os.replace(staging, target)
    _fsync(target.parent)
    return target.stat().st_size


def restore(source: str | Path, database: str | Path, *, force: bool = False) -> int:
    """Replace `database` with the checked backup `source` (refused if a database
    is there, unless `force`); return how many migrations the backup records.
    The restored file is its owner's only (0600), like a new database, whatever
    the mode of the file it replaces; a new data directory is created 0700."""
    source, database = Path(source), Path(database)
    if not source.is_file():
        raise BackupError(f"no backup file at {source}")
    if source.resolve() == database.resolve():
        raise BackupError(f"{source} is the database itself; restore from a backup file")
    if database.exists() and not force:
        raise BackupError(f"{database} exists; pass --force to replace it")
    database.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    _refuse_if_open(database)  # before copying a large file for nothing
    with _staging_file(database.parent, ".engram-restore-") as staging:
        shutil.copyfile(source, staging)
        migrations = _check(staging, source)  # the staging file is 0600 (mkstemp)
        _fsync(staging)
        _refuse_if_open(database)  # again, as close to the swap as it gets
        for suffix in SIDECARS:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{database}{suffix}")
        os.replace(staging, database)
    _fsync(database.parent)
    return migrations


def _check(copy: Path, source: Path) -> int:
    """Integrity and migrations of the private copy about to be installed (the
    bytes checked are the bytes installed). It is opened read-write, being no
    one's database yet, to leave it in journal_mode=DELETE with no -wal beside it."""
    try:
        conn = open_read_write(copy)
    except DatabaseError as exc:
        raise BackupError(f"{source} is not a usable SQLite database: {exc}") from exc
    try:
        sqlite.leave_wal(conn)
        try:
            problems = sqlite.integrity_problems(conn)
        except DatabaseError as exc:  # damage that stops the check itself
            problems = [str(exc)]
        if problems != ["ok"]:
            shown = "; ".join(" ".join(problem.split()) for problem in problems[:SHOWN_PROBLEMS])
            more = len(problems) - SHOWN_PROBLEMS
            suffix = f" (and {more} more)" if more > 0 else ""
            raise BackupError(f"{source} fails the integrity check: {shown}{suffix}")
        return check_recorded_migrations(conn)
    except MigrationMismatch as exc:
        raise BackupError(f"{source} cannot be restored by this Engram: {exc}") from exc
    except DatabaseError as exc:
        raise BackupError(f"{source} is not a usable SQLite database: {exc}") from exc
    finally:
        conn.close()


def _refuse_if_open(database: Path) -> None:
    """BackupError when any process has `database` open (see the module docstring)."""
    if not database.exists():
        return
    conn = sqlean.connect(str(database), isolation_level=None, timeout=0)
    try:
        sqlite.take_exclusive_lock_briefly(conn)
    except OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise BackupError(
                f"{database} is open in another process (a running store or search?);"
                " stop the suite before restoring"
            ) from exc
        # anything else (not a database, say) is the file being replaced: no one's
    except DatabaseError:
        pass
    finally:
        conn.close()


@contextlib.contextmanager
def _staging_file(directory: Path, prefix: str) -> Iterator[Path]:
    """A new empty file in `directory` (so the final rename is atomic), removed
    unless it was renamed into place."""
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=".db", dir=directory)
    os.close(handle)
    path = Path(name)
    try:
        yield path
    finally:
        for leftover in (path, *(Path(f"{path}{suffix}") for suffix in SIDECARS)):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _fsync(path: Path) -> None:
    """Flush a file's (or a directory's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
