"""Drive a running store with the real grpcurl binary over server reflection.

Nothing here uses generated stubs: grpcurl learns the API from the server's
reflection service, so these tests also prove that reflection works and that
the JSON mapping of every message round-trips.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e_helpers import GRPCURL, Launcher, ProcessHandle, needs_grpcurl

SERVICE = "engram.store.v1.MemoryStoreService"


pytestmark = needs_grpcurl()


@pytest.fixture(scope="module")
def store(
    module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProcessHandle]:
    handle = module_launcher.start_store(tmp_path_factory.mktemp("grpcurl-data"))
    yield handle
    handle.kill()


def grpcurl(
    store: ProcessHandle, *command: str, flags: tuple[str, ...] = (), stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`grpcurl -plaintext FLAGS ADDRESS COMMAND...`; never raises on a non-zero exit."""
    assert GRPCURL is not None
    return subprocess.run(
        [GRPCURL, "-plaintext", "-max-time", "30", *flags, store.address, *command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def call(store: ProcessHandle, method: str, body: dict[str, Any]) -> dict[str, Any]:
    """Unary call with a JSON body; returns the parsed JSON response (defaults emitted)."""
    result = grpcurl(store, f"{SERVICE}/{method}", flags=("-emit-defaults", "-d", json.dumps(body)))
    assert result.returncode == 0, f"{method} failed: {result.stderr}"
    return json.loads(result.stdout)


def fresh_namespace() -> str:
    return f"grpcurl-{uuid.uuid4().hex[:12]}"


def test_list_shows_store_health_and_reflection_services(store: ProcessHandle) -> None:
    result = grpcurl(store, "list")
    assert result.returncode == 0, result.stderr
    services = set(result.stdout.split())
    assert {SERVICE, "grpc.health.v1.Health"} <= services


def test_list_of_the_service_shows_every_rpc(store: ProcessHandle) -> None:
    result = grpcurl(store, "list", SERVICE)
    assert result.returncode == 0, result.stderr
    methods = {line.strip() for line in result.stdout.splitlines() if line.strip()}
    assert methods == {
        f"{SERVICE}.{name}"
        for name in (
            "Remember",
            "ImportMemories",
            "GetMemory",
            "ListMemories",
            "ModifyMemories",
            "DeleteMemory",
            "ForgetMemories",
            "RecoverMemory",
            "ListMemoryHistory",
            "AppendTurn",
            "SummarizeSession",
            "ExplainMemory",
            "ListMemoryLinks",
            "GetEntity",
            "ListEntities",
            "GetSession",
            "ListWeakMemories",
            "DeleteNamespace",
            "RecoverNamespace",
        )
    }


def test_describe_shows_service_and_message_definitions(store: ProcessHandle) -> None:
    service = grpcurl(store, "describe", SERVICE)
    assert service.returncode == 0, service.stderr
    assert f"{SERVICE} is a service" in service.stdout
    assert "rpc Remember ( .engram.store.v1.RememberRequest )" in service.stdout
    assert "rpc ImportMemories ( stream .engram.store.v1.ImportMemoriesRequest )" in service.stdout

    message = grpcurl(store, "describe", "engram.common.v1.Memory")
    assert message.returncode == 0, message.stderr
    assert "engram.common.v1.Memory is a message" in message.stdout
    assert (
        "string content_hash = 12 [(.google.api.field_behavior) = OUTPUT_ONLY];" in message.stdout
    )


def test_health_check_reports_serving_for_the_store_service(store: ProcessHandle) -> None:
    result = grpcurl(
        store, "grpc.health.v1.Health/Check", flags=("-d", json.dumps({"service": SERVICE}))
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"status": "SERVING"}


def test_full_memory_lifecycle_through_grpcurl(store: ProcessHandle) -> None:
    ns = fresh_namespace()
    token = uuid.uuid4().hex[:10]

    remembered = call(
        store,
        "Remember",
        {"namespace": ns, "content": f"  The  deploy uses blue green {token}  ", "tags": ["Ops"]},
    )
    memory = remembered["memory"]
    memory_id = memory["id"]
    assert remembered["deduplicated"] is False
    assert memory["namespace"] == ns
    assert memory["content"] == f"The deploy uses blue green {token}"
    assert memory["tags"] == ["ops"]
    assert memory["version"] == "1"  # int64 is a JSON string
    assert memory["deleted"] is False

    again = call(
        store, "Remember", {"namespace": ns, "content": f"the deploy uses blue green {token}."}
    )
    assert again["deduplicated"] is True
    assert again["memory"]["id"] == memory_id

    got = call(store, "GetMemory", {"namespace": ns, "id": memory_id})["memory"]
    assert got["id"] == memory_id
    assert got["content"] == memory["content"]

    listed = call(store, "ListMemories", {"namespace": ns})
    assert [m["id"] for m in listed["memories"]] == [memory_id]
    assert listed["next_page_token"] == ""

    modified = call(
        store,
        "ModifyMemories",
        {
            "namespace": ns,
            "reason": "correction",
            "patches": [
                {"id": memory_id, "content": f"The deploy uses canary {token}", "if_version": "1"}
            ],
        },
    )
    [patch] = modified["results"]
    assert patch["status"] == "PATCH_STATUS_UPDATED"
    assert patch["current_version"] == "1"
    assert patch["new_version"] == "2"
    assert patch["content_changed"] is True

    stale = call(
        store,
        "ModifyMemories",
        {
            "namespace": ns,
            "reason": "stale",
            "patches": [{"id": memory_id, "who": "x", "if_version": "1"}],
        },
    )
    assert stale["results"][0]["status"] == "PATCH_STATUS_VERSION_CONFLICT"
    assert stale["results"][0]["current_version"] == "2"

    deleted = call(store, "DeleteMemory", {"namespace": ns, "id": memory_id, "reason": "obsolete"})
    assert deleted["memory"]["deleted"] is True
    assert deleted["memory"]["version"] == "3"
    assert call(store, "ListMemories", {"namespace": ns})["memories"] == []
    assert call(store, "GetMemory", {"namespace": ns, "id": memory_id})["memory"]["deleted"] is True

    recovered = call(store, "RecoverMemory", {"namespace": ns, "id": memory_id, "reason": "needed"})
    assert recovered["memory"]["deleted"] is False
    assert recovered["memory"]["version"] == "4"
    assert recovered["memory"]["content"] == f"The deploy uses canary {token}"

    history = call(store, "ListMemoryHistory", {"namespace": ns, "memory_id": memory_id})
    assert [e["event_type"] for e in history["events"]] == [
        "HISTORY_EVENT_TYPE_CREATED",
        "HISTORY_EVENT_TYPE_MODIFIED",
        "HISTORY_EVENT_TYPE_DELETED",
        "HISTORY_EVENT_TYPE_RECOVERED",
    ]
    assert all(e["memory_id"] == memory_id for e in history["events"])
    assert history["events"][1]["old_content"] == f"The deploy uses blue green {token}"
    assert history["events"][1]["new_content"] == f"The deploy uses canary {token}"
    assert history["events"][1]["reason"] == "correction"
    assert history["events"][2]["reason"] == "obsolete"

    preview = call(
        store,
        "ForgetMemories",
        {"namespace": ns, "mode": "FORGET_MODE_PREVIEW", "query": f"canary {token}"},
    )
    assert [c["id"] for c in preview["candidates"]] == [memory_id]
    assert preview["confirm_token"]
    assert preview["deleted_count"] == "0"
    # A preview writes nothing.
    assert (
        call(store, "GetMemory", {"namespace": ns, "id": memory_id})["memory"]["deleted"] is False
    )

    executed = call(
        store,
        "ForgetMemories",
        {
            "namespace": ns,
            "mode": "FORGET_MODE_EXECUTE",
            "query": f"canary {token}",
            "reason": "cleanup",
            "confirm_token": preview["confirm_token"],
        },
    )
    assert executed["deleted_count"] == "1"
    assert executed["hard_deleted"] is False
    assert [c["id"] for c in executed["candidates"]] == [memory_id]
    assert call(store, "GetMemory", {"namespace": ns, "id": memory_id})["memory"]["deleted"] is True
    assert call(store, "ListMemories", {"namespace": ns})["memories"] == []


def test_invalid_remember_shows_invalid_argument_with_field_and_bad_request(
    store: ProcessHandle,
) -> None:
    body = json.dumps({"namespace": fresh_namespace(), "content": "   "})
    method = f"{SERVICE}/Remember"

    plain = grpcurl(store, method, flags=("-d", body))
    assert plain.returncode != 0
    assert "Code: InvalidArgument" in plain.stderr
    assert "content" in plain.stderr

    formatted = grpcurl(store, method, flags=("-format-error", "-d", body))
    assert formatted.returncode != 0
    error = json.loads(formatted.stderr or formatted.stdout)
    assert error["code"] == 3  # INVALID_ARGUMENT
    assert "content" in error["message"]
    by_type = {d["@type"]: d for d in error["details"]}
    info = by_type["type.googleapis.com/google.rpc.ErrorInfo"]
    assert info["reason"] == "INVALID_ARGUMENT"
    assert info["domain"] == "engram.dev"
    bad_request = by_type["type.googleapis.com/google.rpc.BadRequest"]
    assert [v["field"] for v in bad_request["field_violations"]] == ["content"]


def test_get_of_unknown_id_shows_not_found(store: ProcessHandle) -> None:
    body = json.dumps({"namespace": fresh_namespace(), "id": str(uuid.uuid4())})
    result = grpcurl(store, f"{SERVICE}/GetMemory", flags=("-format-error", "-d", body))
    assert result.returncode != 0
    error = json.loads(result.stderr or result.stdout)
    assert error["code"] == 5  # NOT_FOUND
    reasons = [d.get("reason") for d in error["details"]]
    assert "NOT_FOUND" in reasons


def test_import_memories_streams_several_messages_from_stdin(store: ProcessHandle) -> None:
    ns = fresh_namespace()
    token = uuid.uuid4().hex[:10]
    messages = [
        {"namespace": ns, "items": [{"content": f"first {token}"}, {"content": f"second {token}"}]},
        {
            "namespace": ns,
            "items": [
                {"content": f"First {token}."},  # duplicate of item 0 after normalisation
                {"content": "  "},  # invalid
                {"content": f"third {token}", "type": "decision", "tags": ["a", "b"]},
            ],
        },
    ]
    stdin = "\n".join(json.dumps(m) for m in messages)
    result = grpcurl(
        store, f"{SERVICE}/ImportMemories", flags=("-emit-defaults", "-d", "@"), stdin=stdin
    )
    assert result.returncode == 0, result.stderr
    response = json.loads(result.stdout)

    results = response["results"]
    assert [r["index"] for r in results] == ["0", "1", "2", "3", "4"]
    assert [r["status"] for r in results] == [
        "IMPORT_STATUS_CREATED",
        "IMPORT_STATUS_CREATED",
        "IMPORT_STATUS_DEDUPLICATED",
        "IMPORT_STATUS_FAILED",
        "IMPORT_STATUS_CREATED",
    ]
    assert results[2]["memory_id"] == results[0]["memory_id"]
    assert results[3]["memory_id"] == ""
    assert "items[3].content" in results[3]["error"]
    assert response["created_count"] == "3"
    assert response["deduplicated_count"] == "1"
    assert response["failed_count"] == "1"

    listed = call(store, "ListMemories", {"namespace": ns})
    assert sorted(m["content"] for m in listed["memories"]) == sorted(
        [f"first {token}", f"second {token}", f"third {token}"]
    )
    third = call(store, "GetMemory", {"namespace": ns, "id": results[4]["memory_id"]})["memory"]
    assert third["type"] == "decision"
    assert third["tags"] == ["a", "b"]
