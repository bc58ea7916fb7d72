"""Auth on a real store: keys created and revoked while it runs, rate limits with
RetryInfo, the service credential, and protected mode (a real process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from auth_suite import AuthSuite, bearer
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from engram.store.v1 import store_pb2 as pb
from engram.store.v1 import store_pb2_grpc
from grpc_helpers import error_of
from services.common import auth
from store_helpers import table_counts

REPO = Path(__file__).resolve().parents[2]


def _stub(suite: AuthSuite) -> store_pb2_grpc.MemoryStoreServiceStub:
    return store_pb2_grpc.MemoryStoreServiceStub(suite.channel("store"))


def _remember(stub: store_pb2_grpc.MemoryStoreServiceStub, key: str, content: str) -> pb.Memory:
    return stub.Remember(
        pb.RememberRequest(namespace="team-a", content=content), metadata=bearer(key), timeout=10
    ).memory


def test_a_key_made_while_the_store_runs_works_and_its_revocation_is_seen_within_5_s(
    auth_store: Callable[..., AuthSuite],
) -> None:
    suite = auth_store(**{"auth.reload_ms": 5000})  # the slowest re-read allowed
    stub = _stub(suite)
    key = suite.key("writer", "team-a", name="short-lived")
    _remember(stub, key, "made with a fresh key")
    auth.revoke_key(suite.keys_file, "short-lived")
    revoked_at = time.monotonic()
    while True:
        try:
            _remember(stub, key, f"still accepted {time.monotonic()}")
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED
            break
        assert time.monotonic() - revoked_at < 5.5, "revocation not seen within 5 s"
        time.sleep(0.1)
    before = table_counts(suite.db_path)
    code, reason, _ = error_of(lambda: _remember(stub, key, "after revocation"))
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    assert table_counts(suite.db_path) == before


def test_the_keys_file_holds_hashes_never_keys(auth_store: Callable[..., AuthSuite]) -> None:
    suite = auth_store()
    key = suite.key("reader", "*", name="looker")
    text = suite.keys_file.read_text()
    assert key not in text and key.split("_")[-1] not in text
    assert suite.keys_file.stat().st_mode & 0o077 == 0
    (record,) = auth.list_keys(suite.keys_file)
    assert (record.name, record.role, record.namespaces) == ("looker", auth.Role.READER, ("*",))


def test_an_empty_bucket_is_resource_exhausted_with_retry_info_and_writes_nothing(
    auth_store: Callable[..., AuthSuite],
) -> None:
    suite = auth_store(**{"auth.rate_limits.writer.rate": 0.01, "auth.rate_limits.writer.burst": 2})
    stub = _stub(suite)
    key = suite.key("writer", "team-a")
    _remember(stub, key, "first")
    _remember(stub, key, "second")
    before = table_counts(suite.db_path)
    with pytest.raises(grpc.RpcError) as caught:
        _remember(stub, key, "third")
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    status = rpc_status.from_call(caught.value)  # type: ignore[arg-type]
    assert status is not None
    infos, retries = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    found = {d.type_url.rsplit(".", 1)[1] for d in status.details}
    assert found == {"ErrorInfo", "RetryInfo"}
    for detail in status.details:
        detail.Unpack(infos) if detail.Is(infos.DESCRIPTOR) else detail.Unpack(retries)
    assert infos.reason == "RATE_LIMITED"
    # one token at 0.01/s: the wait is about 100 s, never 0
    assert 50 < retries.retry_delay.ToTimedelta().total_seconds() <= 100
    assert table_counts(suite.db_path) == before
    # another key has its own bucket
    _remember(stub, suite.key("writer", "team-a"), "another key")


def test_the_service_key_is_not_rate_limited_and_keeps_the_claimed_actor(
    auth_store: Callable[..., AuthSuite],
) -> None:
    suite = auth_store(**{"auth.rate_limits.admin.rate": 0.01, "auth.rate_limits.admin.burst": 1})
    stub = _stub(suite)
    for n in range(5):
        _remember(stub, suite.service_key, f"service write {n}")
    memory = _remember(stub, suite.service_key, "service actor")
    stub.DeleteMemory(
        pb.DeleteMemoryRequest(namespace="team-a", id=memory.id, reason="r", actor="pipeline-x"),
        metadata=bearer(suite.service_key),
    )
    events = stub.ListMemoryHistory(
        pb.ListMemoryHistoryRequest(namespace="team-a", memory_id=memory.id),
        metadata=bearer(suite.service_key),
    ).events
    assert [e.actor for e in events][-1] == "pipeline-x"


def test_a_key_for_a_prefix_covers_that_prefix_only_and_an_empty_namespace_is_default(
    auth_store: Callable[..., AuthSuite],
) -> None:
    suite = auth_store()
    stub = _stub(suite)
    prefix = suite.key("writer", "team-a*")
    default_only = suite.key("writer", "default")
    for namespace, key, allowed in (
        ("team-a", prefix, True),
        ("team-abc", prefix, True),
        ("team-b", prefix, False),
        ("", prefix, False),
        ("", default_only, True),
        ("default", default_only, True),
        ("team-a", default_only, False),
    ):
        request = pb.RememberRequest(namespace=namespace, content=f"ns {namespace!r} {key[-6:]}")
        if allowed:
            stub.Remember(request, metadata=bearer(key))
        else:
            code, reason, _ = error_of(
                lambda r=request, k=key: stub.Remember(r, metadata=bearer(k))
            )
            assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")


def test_an_import_stream_is_checked_message_by_message(
    auth_store: Callable[..., AuthSuite],
) -> None:
    suite = auth_store()
    stub = _stub(suite)
    key = suite.key("writer", "team-a")
    before = table_counts(suite.db_path)
    stream = [
        pb.ImportMemoriesRequest(namespace="team-b", items=[pb.ImportItem(content="smuggled")]),
    ]
    code, reason, _ = error_of(lambda: stub.ImportMemories(iter(stream), metadata=bearer(key)))
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
    assert table_counts(suite.db_path) == before


def _serve(tmp_path: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "engram.yaml"
    # any free internal port: the default 50061 may belong to another suite on this machine
    config.write_text(
        "server:\n  host: 0.0.0.0\n  ports:\n    store_internal: 0\n" + "".join(settings)
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "serve",
            "store",
            "--config",
            str(config),
            "--data-dir",
            str(tmp_path / "data"),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_protected_mode_refuses_a_public_bind_without_auth(tmp_path: Path) -> None:
    done = _serve(tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "auth.enabled: true" in lines[0]
    assert "auth.allow_insecure_public_bind: true" in lines[0]
    assert not (tmp_path / "data" / "engram.db").exists()  # refused before touching the data


def _engram(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_engram_keys_create_list_revoke_against_a_running_store(
    auth_store: Callable[..., AuthSuite], tmp_path: Path
) -> None:
    suite = auth_store()
    stub = _stub(suite)
    data = ("--data-dir", str(tmp_path))  # the store's data dir: the same keys file
    created = _engram(
        "keys", "create", *data, "--role", "writer", "--namespace", "team-a*", "--name", "ci-writer"
    )
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("engram_")
    assert key not in created.stderr
    _remember(stub, key, "written with a key from the command line")
    listed = _engram("keys", "list", *data)
    assert listed.returncode == 0
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("ci-writer ")]
    assert "writer" in row and "team-a*" in row and key not in listed.stdout
    again = _engram(
        "keys", "create", *data, "--role", "writer", "--namespace", "x", "--name", "ci-writer"
    )
    assert again.returncode == 1 and "exists already" in again.stderr
    revoked = _engram("keys", "revoke", "ci-writer", *data)
    assert revoked.returncode == 0, revoked.stderr
    deadline = time.monotonic() + 5.5
    while time.monotonic() < deadline:
        try:
            _remember(stub, key, f"after revoke {time.monotonic()}")
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED
            break
        time.sleep(0.1)
    else:
        pytest.fail("the revoked key still works after 5 s")
    (row,) = [
        line
        for line in _engram("keys", "list", *data).stdout.splitlines()
        if line.startswith("ci-writer ")
    ]
    assert len(re.findall(r"\d{4}-\d\d-\d\dT", row)) == 2  # created and revoked


def test_a_damaged_keys_file_stops_the_service_at_start_with_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "keys.json").write_text('{"keys": [{"name": "half"')
    config = tmp_path / "engram.yaml"
    config.write_text("auth:\n  enabled: true\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "serve",
            "store",
            "--config",
            str(config),
            "--data-dir",
            str(data),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "ENGRAM_SERVER__PORTS__STORE_INTERNAL": "0"},
    )
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "cannot read the keys file" in line and "keys.json" in line
