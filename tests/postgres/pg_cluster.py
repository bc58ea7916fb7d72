"""What the tests do to the session's PostgreSQL from outside the code under test
(one home): end a client's backend as a server restart or failover would."""

from __future__ import annotations

import psycopg


def terminate(dsn: str, application_name: str) -> list[bool]:
    """End every backend of this database that `application_name` opened; one
    pg_terminate_backend result per backend."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            (application_name,),
        ).fetchall()
    return [bool(r[0]) for r in rows]
