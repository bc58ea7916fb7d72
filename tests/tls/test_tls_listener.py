"""A store started as a process with `server.tls` serves TLS only, and with
`client_ca_file` only to clients that present a certificate its CA signed (mTLS).
Clients: the generated gRPC stubs, grpcurl, and `engram health`."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from e2e.e2e_helpers import (
    REPO_ROOT,
    Launcher,
    ProcessHandle,
    clean_env,
    engram_command,
    find_grpcurl,
)
from engram.store.v1 import store_pb2, store_pb2_grpc
from tls_helpers import (
    check_health,
    client_credentials,
    clients_tls,
    credentials,
    server_tls,
    wait_serving,
    write_config,
)

GRPCURL = find_grpcurl()
SERVICE = "engram.store.v1.MemoryStoreService"


def _store(
    launcher: Launcher, tmp_path: Path, certs: Path, *, mutual: bool
) -> Iterator[ProcessHandle]:
    config = write_config(
        tmp_path / "engram.yaml",
        {
            "server": {"tls": server_tls(certs, mutual=mutual)},
            "providers": {"embedding": {"kind": "none"}},
        },
    )
    data = tmp_path / "data"
    store = launcher.start_store(data, config=config, wait=False)
    wait_serving(store, client_credentials(certs))
    yield store
    store.kill()


@pytest.fixture(scope="module")
def tls_store(
    module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory, certs: Path
) -> Iterator[ProcessHandle]:
    """TLS, no client certificate required."""
    yield from _store(module_launcher, tmp_path_factory.mktemp("tls"), certs, mutual=False)


@pytest.fixture(scope="module")
def mtls_store(
    module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory, certs: Path
) -> Iterator[ProcessHandle]:
    """TLS, and a client certificate from the development CA required."""
    yield from _store(module_launcher, tmp_path_factory.mktemp("mtls"), certs, mutual=True)


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path_factory.mktemp("logs"))
    try:
        yield launcher
    finally:
        launcher.kill_all()


def remember(
    address: str, creds: grpc.ChannelCredentials | None, namespace: str, content: str
) -> store_pb2.RememberResponse:
    channel = (
        grpc.insecure_channel(address) if creds is None else grpc.secure_channel(address, creds)
    )
    with channel:
        stub = store_pb2_grpc.MemoryStoreServiceStub(channel)
        reply: store_pb2.RememberResponse = stub.Remember(
            store_pb2.RememberRequest(namespace=namespace, content=content), timeout=5
        )
        return reply


def listed(address: str, creds: grpc.ChannelCredentials, namespace: str) -> list[str]:
    with grpc.secure_channel(address, creds) as channel:
        stub = store_pb2_grpc.MemoryStoreServiceStub(channel)
        reply = stub.ListMemories(
            store_pb2.ListMemoriesRequest(namespace=namespace, page_size=100), timeout=5
        )
    return [memory.content for memory in reply.memories]


def refused(address: str, creds: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    """The code of a Remember that must fail at the connection."""
    with pytest.raises(grpc.RpcError) as failed:
        remember(address, creds, "refused", "never written")
    return failed.value.code()  # type: ignore[no-any-return]


def namespace() -> str:
    return f"tls-{uuid.uuid4().hex[:10]}"


# ---- TLS ---------------------------------------------------------------------------------


def test_a_client_that_trusts_the_ca_remembers_and_reads_back(
    tls_store: ProcessHandle, certs: Path
) -> None:
    ns = namespace()
    creds = credentials(certs / "ca.pem")
    reply = remember(tls_store.address, creds, ns, "TLS carries this memory")
    assert reply.memory.content == "TLS carries this memory"
    assert listed(tls_store.address, creds, ns) == ["TLS carries this memory"]


def test_a_plaintext_client_is_refused_and_writes_nothing(
    tls_store: ProcessHandle, certs: Path
) -> None:
    assert refused(tls_store.address, None) == grpc.StatusCode.UNAVAILABLE
    assert listed(tls_store.address, credentials(certs / "ca.pem"), "refused") == []


def test_a_client_that_trusts_another_ca_is_refused(
    tls_store: ProcessHandle, other_certs: Path
) -> None:
    assert refused(tls_store.address, credentials(other_certs / "ca.pem")) == (
        grpc.StatusCode.UNAVAILABLE
    )


# ---- mTLS --------------------------------------------------------------------------------


def test_mtls_refuses_a_client_without_a_certificate(
    mtls_store: ProcessHandle, certs: Path
) -> None:
    assert refused(mtls_store.address, credentials(certs / "ca.pem")) == (
        grpc.StatusCode.UNAVAILABLE
    )
    assert listed(mtls_store.address, client_credentials(certs), "refused") == []


def test_mtls_refuses_a_certificate_another_ca_signed(
    mtls_store: ProcessHandle, certs: Path, other_certs: Path
) -> None:
    stranger = credentials(
        certs / "ca.pem", other_certs / "client.pem", other_certs / "client-key.pem"
    )
    assert refused(mtls_store.address, stranger) == grpc.StatusCode.UNAVAILABLE


def test_mtls_serves_a_client_with_a_certificate(mtls_store: ProcessHandle, certs: Path) -> None:
    ns = namespace()
    creds = client_credentials(certs)
    remember(mtls_store.address, creds, ns, "mutual TLS carries this one")
    assert listed(mtls_store.address, creds, ns) == ["mutual TLS carries this one"]
    # the service certificate is a client certificate too: services present it to each other
    service = credentials(certs / "ca.pem", certs / "server.pem", certs / "server-key.pem")
    assert check_health(mtls_store.address, service) == health_pb2.HealthCheckResponse.SERVING


# ---- grpcurl -----------------------------------------------------------------------------


def grpcurl(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    if GRPCURL is None:
        pytest.skip("grpcurl binary not installed")
    return subprocess.run(
        [GRPCURL, "-max-time", "10", *args[:-1], address, *args[-1:]],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_grpcurl_lists_and_calls_with_cacert(tls_store: ProcessHandle, certs: Path) -> None:
    cacert = ("-cacert", str(certs / "ca.pem"))
    listing = grpcurl(tls_store.address, *cacert, "list")
    assert listing.returncode == 0, listing.stderr
    assert {SERVICE, "grpc.health.v1.Health"} <= set(listing.stdout.split())
    ns = namespace()
    body = json.dumps({"namespace": ns, "content": "grpcurl over TLS"})
    called = grpcurl(tls_store.address, *cacert, "-d", body, f"{SERVICE}/Remember")
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["memory"]["content"] == "grpcurl over TLS"
    # by name too: the certificate is valid for localhost
    port = tls_store.address.rsplit(":", 1)[1]
    by_name = grpcurl(f"localhost:{port}", *cacert, "list")
    assert by_name.returncode == 0, by_name.stderr


def test_grpcurl_plaintext_or_without_the_ca_fails(tls_store: ProcessHandle) -> None:
    assert grpcurl(tls_store.address, "-plaintext", "list").returncode != 0
    untrusted = grpcurl(tls_store.address, "list")  # the system's roots: not our CA
    assert untrusted.returncode != 0
    assert "certificate" in untrusted.stderr


def test_grpcurl_with_a_client_certificate_under_mtls(
    mtls_store: ProcessHandle, certs: Path
) -> None:
    cacert = ("-cacert", str(certs / "ca.pem"))
    mutual = (*cacert, "-cert", str(certs / "client.pem"), "-key", str(certs / "client-key.pem"))
    listing = grpcurl(mtls_store.address, *mutual, "list")
    assert listing.returncode == 0, listing.stderr
    assert SERVICE in listing.stdout.split()
    assert grpcurl(mtls_store.address, *cacert, "list").returncode != 0


# ---- engram health -----------------------------------------------------------------------


def health(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        engram_command("health", *args),
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_engram_health_with_cacert_flags(
    tls_store: ProcessHandle, mtls_store: ProcessHandle, certs: Path, tmp_path: Path
) -> None:
    empty = write_config(tmp_path / "empty.yaml", {})
    cacert = ("--cacert", str(certs / "ca.pem"))
    ok = health(tls_store.address, "--config", str(empty), *cacert)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == f"{tls_store.address}: SERVING"
    plain = health(tls_store.address, "--config", str(empty), "--timeout", "2")
    assert plain.returncode == 1
    assert "UNAVAILABLE" in plain.stderr
    mutual = ("--cert", str(certs / "client.pem"), "--key", str(certs / "client-key.pem"))
    assert health(mtls_store.address, "--config", str(empty), *cacert, *mutual).returncode == 0
    assert health(mtls_store.address, "--config", str(empty), *cacert).returncode == 1


def test_engram_health_reads_clients_tls_from_the_configuration(
    mtls_store: ProcessHandle, certs: Path, tmp_path: Path
) -> None:
    config = write_config(
        tmp_path / "client.yaml", {"clients": {"tls": clients_tls(certs, with_cert=True)}}
    )
    ok = health(mtls_store.address, "--config", str(config))
    assert ok.returncode == 0, ok.stderr


def test_engram_health_names_a_bad_client_setting(certs: Path, tmp_path: Path) -> None:
    empty = write_config(tmp_path / "empty.yaml", {})
    missing = health("127.0.0.1:1", "--config", str(empty), "--cacert", str(tmp_path / "no.pem"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"engram health: cannot read clients.tls.ca_file {tmp_path / 'no.pem'}:"
        " No such file or directory"
    ]
    half = health(
        "127.0.0.1:1",
        "--config",
        str(empty),
        "--cacert",
        str(certs / "ca.pem"),
        "--cert",
        str(certs / "client.pem"),
    )
    assert half.returncode == 2
    assert "clients.tls" in half.stderr and "key_file" in half.stderr


# ---- the store's internal listener -------------------------------------------------------


def test_the_internal_listener_serves_tls_too(
    tls_store: ProcessHandle, mtls_store: ProcessHandle, certs: Path
) -> None:
    """Job queue, admin, documents: the same server.tls as the public listener."""
    serving = health_pb2.HealthCheckResponse.SERVING
    internal = f"127.0.0.1:{tls_store.internal_port}"
    assert check_health(internal, credentials(certs / "ca.pem")) == serving
    with pytest.raises(grpc.RpcError) as plaintext:
        check_health(internal, None)
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
    mutual = f"127.0.0.1:{mtls_store.internal_port}"
    assert check_health(mutual, client_credentials(certs)) == serving
    with pytest.raises(grpc.RpcError) as no_certificate:
        check_health(mutual, credentials(certs / "ca.pem"))
    assert no_certificate.value.code() == grpc.StatusCode.UNAVAILABLE
