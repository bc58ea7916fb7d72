"""What the PII gate and the write rules once missed (issue 34, item 8), through the
public gRPC API on a real store: labelled passwords, secrets in identifiers and
document titles, documents of invisible characters only, control characters in
any text field. Each refusal names its fields and writes nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.common.v1 import pii_policy_pb2 as pii_pb
from engram.store.internal.v1 import documents_pb2 as dpb
from engram.store.internal.v1 import documents_pb2_grpc
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from store_helpers import remember, table_counts

INVALID = (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
PII = (grpc.StatusCode.INVALID_ARGUMENT, "PII_DETECTED")


@pytest.fixture
def servers(
    make_config: Callable[..., Any], start_store_server: Any
) -> Iterator[tuple[Any, documents_pb2_grpc.DocumentStoreServiceStub, grpc.Channel]]:
    server, stub = start_store_server(make_config(**{"pii.namespaces": {"strict": "reject"}}))
    channel = grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}")
    try:
        yield stub, documents_pb2_grpc.DocumentStoreServiceStub(channel), channel
    finally:
        channel.close()


def test_labelled_passwords_are_redacted_by_default_and_rejected_by_reject(
    servers: Any, db_path: Path
) -> None:
    store, _, _ = servers
    stored = {
        text: remember(store, text).memory.content
        for text in (
            "wifi password=hunter2",
            'config {"pwd": "s3cret"}',
            "router passwd: letmein",
            "Password is tiger7",
        )
    }
    assert stored == {
        "wifi password=hunter2": "wifi password=[SECRET_1]",
        'config {"pwd": "s3cret"}': 'config {"pwd": "[SECRET_1]"}',
        "router passwd: letmein": "router passwd: [SECRET_1]",
        "Password is tiger7": "Password is [SECRET_1]",
    }
    before = table_counts(db_path)
    for text in ("wifi password=hunter2", "I forgot my password"):
        code, reason, fields = error_of(
            lambda text=text: remember(store, text, pii_policy=pii_pb.PII_POLICY_REJECT)
        )
        assert ((code, reason), fields) == (PII, ["content"])
    # a password named without a value: nothing to redact, kept as written
    kept = remember(store, "I forgot my password", pii_policy=pii_pb.PII_POLICY_REDACT)
    assert kept.memory.content == "I forgot my password"
    assert table_counts(db_path)["memories"] == before["memories"] + 1


def test_identifiers_holding_a_secret_are_refused_never_redacted(
    servers: Any, db_path: Path
) -> None:
    """Was: a secret in `session_id` stored raw (and logged by the pipeline). Two
    session ids redacted to the same placeholder would merge, so they are refused."""
    store, _, _ = servers
    remember(store, "a first memory")
    before = table_counts(db_path)
    secret = "sk-proj-abcdefghijklmnopqrstuvwx1234"
    code, reason, fields = error_of(lambda: remember(store, "hello", session_id=secret))
    assert ((code, reason), fields) == (PII, ["session_id"])
    code, reason, fields = error_of(
        lambda: store.AppendTurn(
            store_pb2.AppendTurnRequest(
                session_id=f"s-{secret}",
                role=store_pb2.TURN_ROLE_USER,
                content="hi",
                source_id="password=hunter2",
            )
        )
    )
    assert ((code, reason), sorted(fields)) == (PII, ["session_id", "source_id"])
    code, reason, fields = error_of(
        lambda: remember(
            store, "x", source_id="ops@example.com", pii_policy=pii_pb.PII_POLICY_REDACT
        )
    )
    assert ((code, reason), fields) == (PII, ["source_id"])
    assert secret not in str(error_of(lambda: remember(store, "hello", session_id=secret)))
    assert table_counts(db_path) == before
    # ids that merely look random are ids: OpenAI thread ids, Slack-like ids, UUIDs
    for session_id in ("thread_jQZNJBVzd0IbDsw1xB9L0Nw8", "C024BE91L:1712345678.000200"):
        assert remember(store, f"said in {session_id}", session_id=session_id).memory.session_id


def test_a_document_title_and_tags_pass_the_gate_and_invisible_content_is_refused(
    servers: Any, db_path: Path
) -> None:
    _, docs, _ = servers
    created = docs.CreateDocument(
        dpb.CreateDocumentRequest(
            content="the runbook", title="deploy key AKIAIOSFODNN7EXAMPLE", tags=["ops"]
        )
    ).document
    assert created.title == "deploy key [SECRET_1]"
    code, reason, fields = error_of(
        lambda: docs.CreateDocument(
            dpb.CreateDocumentRequest(
                namespace="strict", content="notes", title="for bob@example.com"
            )
        )
    )
    assert ((code, reason), fields) == (PII, ["title"])
    before = table_counts(db_path)
    for invisible in ("\u200b\u200b", "\u200f\u202e \u2060", "\ufeff"):
        code, reason, fields = error_of(
            lambda invisible=invisible: docs.CreateDocument(
                dpb.CreateDocumentRequest(content=invisible)
            )
        )
        assert ((code, reason), fields) == (INVALID, ["content"])
    assert table_counts(db_path) == before


def test_control_characters_are_refused_in_every_text_field(servers: Any, db_path: Path) -> None:
    """Was: ANSI escapes stored in content, tags and who, and printed raw by the CLI."""
    store, docs, _ = servers
    memory = remember(store, "a memory to patch").memory
    before = table_counts(db_path)
    _, _, fields = error_of(
        lambda: remember(
            store,
            "\x1b[31mred\x1b[0m",
            tags=["fine", "bell\x07"],
            who="x\x9bname",
            why="ok",
            source_id="id\x08",
            session_id="s\x85",
        )
    )
    assert sorted(fields) == ["content", "session_id", "source_id", "tags[1]", "who"]
    assert error_of(lambda: remember(store, "c1 \x9d here"))[2] == ["content"]
    response = store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    items=[
                        store_pb2.ImportItem(content="imported \x1b[2J cleared"),
                        store_pb2.ImportItem(content="fine", why="\x7f"),
                    ]
                )
            ]
        )
    )
    assert [r.status for r in response.results] == [store_pb2.IMPORT_STATUS_FAILED] * 2
    assert "items[0].content" in response.results[0].error
    assert "U+001B" in response.results[0].error
    patch = store_pb2.MemoryPatch(
        id=memory.id,
        content="new\x1b]0;title\x07",
        who="w\x1b",
        tags=store_pb2.TagList(values=["\x1b"]),
    )
    _, _, fields = error_of(
        lambda: store.ModifyMemories(store_pb2.ModifyMemoriesRequest(patches=[patch], reason="r"))
    )
    assert sorted(fields) == ["patches[0].content", "patches[0].tags[0]", "patches[0].who"]
    _, _, fields = error_of(
        lambda: store.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(
                patches=[store_pb2.MemoryPatch(id=memory.id, importance=0.5)], reason="why\x1b"
            )
        )
    )
    assert fields == ["patches[0].reason"]  # the request's reason, as each patch's
    _, _, fields = error_of(
        lambda: store.AppendTurn(
            store_pb2.AppendTurnRequest(
                session_id="s-1", role=store_pb2.TURN_ROLE_USER, content="said \x1b", who="\x07"
            )
        )
    )
    assert sorted(fields) == ["content", "who"]
    _, _, fields = error_of(
        lambda: docs.CreateDocument(dpb.CreateDocumentRequest(content="doc \x1b[31m", title="t"))
    )
    assert fields == ["content"]
    _, _, fields = error_of(
        lambda: docs.CreateDocument(dpb.CreateDocumentRequest(content="doc", title="t\x9b"))
    )
    assert fields == ["title"]
    assert table_counts(db_path) == before
    # tab, line breaks, and in content any whitespace (normalised to a space), are fine
    kept = remember(store, "line one\r\nline\ttwo\x0cpage", who="a\tb").memory
    assert kept.content == "line one line two page"
    document = docs.CreateDocument(
        dpb.CreateDocumentRequest(content="page one\x0cpage two\r\n", title="t")
    ).document
    assert document.id


def test_a_changes_reason_passes_the_gate(servers: Any, db_path: Path) -> None:
    """A reason is free text kept in the history: redacted or rejected like content."""
    store, _, _ = servers
    memory = remember(store, "the vault is in room 4").memory
    store.DeleteMemory(
        store_pb2.DeleteMemoryRequest(id=memory.id, reason="rotated, password=hunter2 is old")
    )
    events = store.ListMemoryHistory(store_pb2.ListMemoryHistoryRequest(memory_id=memory.id))
    assert [e.reason for e in events.events][-1] == "rotated, password=[SECRET_1] is old"
    strict = remember(store, "a strict memory", namespace="strict").memory
    code, reason, fields = error_of(
        lambda: store.DeleteMemory(
            store_pb2.DeleteMemoryRequest(
                namespace="strict", id=strict.id, reason="asked by bob@example.com"
            )
        )
    )
    assert ((code, reason), fields) == (PII, ["reason"])


def test_no_secret_a_caller_sent_reaches_the_log(
    servers: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An error message may echo the caller's value (an unknown type); the store's
    log line of the failed call carries it redacted, and a refused session id not at all."""
    store, _, _ = servers
    caplog.set_level(logging.DEBUG)
    secret = "sk-proj-abcdefghijklmnopqrstuvwx1234"
    error_of(lambda: remember(store, "x", type=f"password=hunter2 {secret}"))
    error_of(lambda: remember(store, "x", session_id=secret))
    logged = "\n".join(repr(record.__dict__) for record in caplog.records)
    assert "rpc failed" in logged
    assert secret not in logged and "hunter2" not in logged


def test_a_fetched_title_is_gated_and_its_control_characters_become_spaces(
    servers: Any,
) -> None:
    """A URL document's title is first seen when the worker reports it (AdvanceDocument):
    the namespace's policy applies there, and text no caller wrote is not refused for
    a control character but cleaned."""
    from engram.common.v1 import document_pb2, job_pb2
    from engram.store.internal.v1 import job_queue_pb2 as jq
    from engram.store.internal.v1 import job_queue_pb2_grpc

    _, docs, channel = servers
    jobs = job_queue_pb2_grpc.JobQueueServiceStub(channel)
    titles = {}
    for namespace in ("default", "strict"):
        docs.CreateDocument(
            dpb.CreateDocumentRequest(
                namespace=namespace, url="http://docs.example.com/page"
            )  # never fetched: no worker runs
        )
        [job] = jobs.LeaseJobs(
            jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1)
        ).jobs
        lease = jq.JobLease(job_id=job.id, lease_token=job.lease_token)
        advance = dpb.AdvanceDocumentRequest(
            lease=lease,
            status=document_pb2.DOCUMENT_STATUS_EXTRACTING,
            title="Keys \x1b[1m AKIAIOSFODNN7EXAMPLE \x1b[0m for bob@example.com",
        )
        try:
            titles[namespace] = docs.AdvanceDocument(advance).document.title
        except grpc.RpcError:
            titles[namespace] = error_of(lambda advance=advance: docs.AdvanceDocument(advance))
    assert titles["default"] == "Keys  [1m [SECRET_1]  [0m for bob@example.com"
    assert titles["strict"][:2] == PII
