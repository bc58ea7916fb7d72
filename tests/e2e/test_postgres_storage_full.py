"""A full disk under PostgreSQL, for real: the store's database lives in a
tablespace on a small tmpfs (tests/small_disk.py) of a private server
(tests/e2e/pg_private.py; its WAL stays on the roomy disk, as a server's pg_wal
usually has its own), and the tmpfs is filled. The server then refuses to
extend a table (SQLSTATE 53100 disk_full): Remember and ImportMemories answer
RESOURCE_EXHAUSTED / STORAGE_FULL, never INTERNAL, nothing acknowledged is lost
and nothing refused is written, diagnostics count it, and the same store takes
writes again by itself once space returns. The SQLite counterpart is
tests/store/test_store_storage_full.py; tests/postgres/test_pg_writer.py pins
the error mapping alone."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from pg_private import PrivateServer, give_to_server, private_postgres
from small_disk import fill, small_disk_at

from e2e_helpers import Launcher
from engram.store.internal.v1 import admin_pb2, admin_pb2_grpc
from engram.store.v1 import store_pb2
from grpc_helpers import error_of

__all__ = ["private_postgres"]  # the fixture, for pytest

pytestmark = pytest.mark.postgres

# CREATE DATABASE copies template1 (about 8 MB) into the tablespace, and the
# migrations add the store's tables and indexes; what is left the filler takes.
DISK_BYTES = 48 * 1024 * 1024
BIG = 60 * 1024
MAX_WRITES = 400  # a filled disk cannot take this many 60 KiB writes


def content(n: int) -> str:
    return f"storage full probe {n} " + (f"{n:08d} " * (BIG // 9))[:BIG]


def test_a_full_tablespace_answers_storage_full_and_the_store_recovers(
    launcher: Launcher, data_dir: Path, private_postgres: PrivateServer, tmp_path: Path
) -> None:
    with small_disk_at(private_postgres.home / "small-disk", DISK_BYTES) as disk:
        location = disk / "tablespace"
        location.mkdir()
        give_to_server(location, private_postgres)
        import psycopg

        with psycopg.connect(private_postgres.dsn(), autocommit=True) as admin_conn:
            admin_conn.execute(f"CREATE TABLESPACE small LOCATION '{location}'")
        dsn = private_postgres.create_database("engram", tablespace="small")
        env = {
            "ENGRAM_STORAGE__KIND": "postgres",
            "ENGRAM_STORAGE__POSTGRES__DSN": dsn,
            "ENGRAM_PROVIDERS__EMBEDDING__KIND": "none",
        }
        store = launcher.start_store(data_dir, env=env)
        stub = store.stub()
        admin = admin_pb2_grpc.StoreAdminServiceStub(store.internal_channel())
        diagnostics = admin_pb2.GetStoreDiagnosticsRequest()
        assert admin.GetStoreDiagnostics(diagnostics).storage_full_count == 0

        acked = {
            stub.Remember(store_pb2.RememberRequest(content="before the disk filled")).memory.id
        }
        filler = disk / "filler"
        fill(filler)

        # Writes go on while the server finds room in pages it has; then it is full.
        refused = None
        codes: list[str] = []
        for n in range(MAX_WRITES):
            try:
                reply = stub.Remember(store_pb2.RememberRequest(content=content(n)), timeout=30)
            except grpc.RpcError as exc:
                codes.append(exc.code().name)
                refused = n
                break
            acked.add(reply.memory.id)
        assert refused is not None, "the tablespace never filled"
        assert codes == ["RESOURCE_EXHAUSTED"], (codes, store.log()[-2000:])
        full_remember = error_of(
            lambda: stub.Remember(store_pb2.RememberRequest(content=content(refused)), timeout=30)
        )
        full_import = error_of(
            lambda: stub.ImportMemories(
                iter(
                    [
                        store_pb2.ImportMemoriesRequest(
                            items=[store_pb2.ImportItem(content=content(MAX_WRITES + 1))]
                        )
                    ]
                ),
                timeout=30,
            )
        )
        assert full_remember[:2] == (grpc.StatusCode.RESOURCE_EXHAUSTED, "STORAGE_FULL")
        assert full_import[:2] == (grpc.StatusCode.RESOURCE_EXHAUSTED, "STORAGE_FULL")
        full = admin.GetStoreDiagnostics(diagnostics)
        assert full.storage_full_count >= 3
        assert full.HasField("last_storage_full_time")

        # Space returns: the same store process takes writes again, by itself.
        filler.unlink()
        after = stub.Remember(store_pb2.RememberRequest(content=content(refused)), timeout=30)
        assert not after.deduplicated
        acked.add(after.memory.id)

        # Nothing acknowledged lost, nothing refused written (the refused content
        # exists once: the write after recovery), every row readable.
        with psycopg.connect(dsn, autocommit=True) as conn:
            stored = {r[0] for r in conn.execute("SELECT id FROM memories").fetchall()}
            unindexed = conn.execute(
                "SELECT count(*) FROM memories WHERE content_tsv IS NULL"
            ).fetchone()[0]
        print(
            f"\npostgres tablespace full: acknowledged {len(acked)}, stored {len(stored)}, "
            f"refused at write {refused}, storage_full_count {full.storage_full_count}"
        )
        assert stored == acked
        assert unindexed == 0
        assert store.stop() == 0
