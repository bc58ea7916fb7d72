"""The single writer's transaction statements (services/store/writer.py), on
either backend: SQLite runs them as written, pg.SqliteApi gives them their
PostgreSQL meaning (BEGIN IMMEDIATE takes the writer's lock on both)."""

from __future__ import annotations

from services.storage.connection import Connection

# the one savepoint a unit of work runs in: units never nest
SAVEPOINT = "op"


def begin(conn: Connection) -> None:
    """Open the group's write transaction, taking the write lock at once."""
    conn.execute("BEGIN IMMEDIATE")


def commit(conn: Connection) -> None:
    conn.execute("COMMIT")


def rollback(conn: Connection) -> None:
    conn.execute("ROLLBACK")


def savepoint(conn: Connection) -> None:
    """Mark the start of one unit inside the group's transaction."""
    conn.execute(f"SAVEPOINT {SAVEPOINT}")


def release(conn: Connection) -> None:
    """Keep the unit's writes in the group's transaction."""
    conn.execute(f"RELEASE {SAVEPOINT}")


def undo_unit(conn: Connection) -> None:
    """Undo the unit's writes and leave the group's transaction open."""
    conn.execute(f"ROLLBACK TO {SAVEPOINT}")
    conn.execute(f"RELEASE {SAVEPOINT}")
