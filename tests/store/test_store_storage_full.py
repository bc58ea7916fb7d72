"""A full disk: writes answer RESOURCE_EXHAUSTED / STORAGE_FULL with nothing
acknowledged lost, diagnostics report it, and the store recovers on its own
once space returns. The disk is real: a small tmpfs mounted for the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from small_disk import fill, small_disk_at

from engram.maintenance.v1 import maintenance_pb2, maintenance_pb2_grpc
from engram.store.internal.v1 import admin_pb2, admin_pb2_grpc
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from recall_helpers import wait_for
from services.maintenance.app import start_maintenance
from store_helpers import rows, scalar

pytestmark = pytest.mark.sqlite_only(
    "a tmpfs filling under the SQLite file; PostgreSQL's is tests/e2e/test_postgres_storage_full.py"
)
DISK_BYTES = 8 * 1024 * 1024
# Distinct contents near the 64 KiB limit: each commit needs fresh pages.
BIG = 60 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real, nearly empty filesystem of DISK_BYTES."""
    with small_disk_at(tmp_path / "small-disk", DISK_BYTES) as path:
        yield path


def _content(n: int) -> str:
    return f"storage full probe {n} " + (f"{n:08d} " * (BIG // 9))[:BIG]


def test_full_disk_answers_storage_full_and_the_store_recovers_when_space_returns(
    small_disk: Path,
    make_config: Callable[..., Any],
    start_store_server: Callable[..., Any],
) -> None:
    config = make_config(
        **{"storage.path": str(small_disk / "engram.db"), "providers.embedding.kind": "none"}
    )
    server, store = start_store_server(config)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}")
    admin = admin_pb2_grpc.StoreAdminServiceStub(channel)
    before = admin.GetStoreDiagnostics(admin_pb2.GetStoreDiagnosticsRequest())
    assert before.storage_full_count == 0
    assert not before.HasField("last_storage_full_time")
    assert before.data_dir_free_bytes > 0

    acked = {store.Remember(store_pb2.RememberRequest(content="before the disk filled")).memory.id}
    filler = small_disk / "filler"
    fill(filler)

    # Writes go on succeeding while SQLite finds room in pages it already has;
    # then the disk is full. Bounded: 8 MiB cannot take a hundred 60 KiB writes.
    refused = None
    for n in range(100):
        try:
            acked.add(store.Remember(store_pb2.RememberRequest(content=_content(n))).memory.id)
        except grpc.RpcError:
            refused = n
            break
    assert refused is not None, "the disk never filled"
    code, reason, _ = error_of(
        lambda: store.Remember(store_pb2.RememberRequest(content=_content(refused)))
    )
    assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "STORAGE_FULL")
    # An import is refused the same way.
    code, reason, _ = error_of(
        lambda: store.ImportMemories(
            iter(
                [
                    store_pb2.ImportMemoriesRequest(
                        items=[store_pb2.ImportItem(content=_content(999))]
                    )
                ]
            )
        )
    )
    assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "STORAGE_FULL")

    full = admin.GetStoreDiagnostics(admin_pb2.GetStoreDiagnosticsRequest())
    assert full.storage_full_count >= 2
    assert full.HasField("last_storage_full_time")
    assert full.data_dir_free_bytes < 64 * 1024
    # ...and the maintenance service passes it on.
    maintenance_config = config.with_overrides(
        {
            "clients.store_internal_address": f"127.0.0.1:{server.app.internal_port}",
            "clients.pipeline_address": "127.0.0.1:1",
        }
    )
    maintenance = type(server)(
        lambda: start_maintenance(maintenance_config, host="127.0.0.1", port=0)
    )
    try:
        # its start-up retention sweep meets the full disk too: let it finish first
        wait_for(lambda: maintenance.app.worker.retention_runs, what="the retention sweep")
        full = admin.GetStoreDiagnostics(admin_pb2.GetStoreDiagnosticsRequest())
        with grpc.insecure_channel(f"127.0.0.1:{maintenance.app.port}") as m_channel:
            report = maintenance_pb2_grpc.MaintenanceServiceStub(m_channel).GetDiagnostics(
                maintenance_pb2.GetDiagnosticsRequest(), timeout=30
            )
        assert report.storage.storage_full_count == full.storage_full_count
        assert report.storage.last_storage_full_time == full.last_storage_full_time
        assert report.storage.data_dir_free_bytes < 64 * 1024
    finally:
        maintenance.stop()

    # Space returns: the same store process takes writes again, by itself.
    filler.unlink()
    after = store.Remember(store_pb2.RememberRequest(content=_content(refused)))
    assert not after.deduplicated
    acked.add(after.memory.id)

    # Nothing acknowledged was lost, nothing refused was written (the refused
    # content exists once: the write after recovery), and the file is sound.
    stored = {r[0] for r in rows(config.storage.path, "SELECT id FROM memories")}
    print(
        f"\nsqlite disk full: acknowledged {len(acked)}, stored {len(stored)}, refused at "
        f"write {refused}, storage_full_count {full.storage_full_count}"
    )
    assert stored == acked
    assert scalar(config.storage.path, "PRAGMA integrity_check") == "ok"
    assert scalar(config.storage.path, "SELECT count(*) FROM memories_fts") == len(acked)
    assert admin.GetStoreDiagnostics(admin_pb2.GetStoreDiagnosticsRequest()).data_dir_free_bytes > (
        1 << 20
    )
    channel.close()
