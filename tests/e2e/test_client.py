"""engram.client against a real suite (`engram up`, four processes): every call
through the public gRPC APIs, errors as exceptions by meaning, iterators over pages,
streaming import, the asyncio client, and a user's program under mypy --strict
from the built `engram-grpc-client` wheel."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from e2e_helpers import REPO_ROOT, Launcher, RunningSuite, clean_env, free_port, start_suite
from engram.client import (
    FORGET_MODE_EXECUTE,
    AsyncEngram,
    Engram,
    FailedPrecondition,
    ImportProgress,
    InvalidArgument,
    MemoryPatch,
    NotFound,
    PrivacyBlocked,
    RetryPolicy,
    Unavailable,
    VersionConflict,
    memory_filter,
)
from engram.common.v1 import document_pb2
from engram.store.v1 import store_pb2
from services.common.config import env_name

NS = "client-tests"


@pytest.fixture(scope="module")
def suite(module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> RunningSuite:
    return start_suite(module_launcher, tmp_path_factory.mktemp("suite"))


@pytest.fixture
def engram(suite: RunningSuite) -> Iterator[Engram]:
    with Engram(**suite.client_addresses()) as client:
        yield client


def test_remember_get_recall_list_history_and_modify(engram: Engram) -> None:
    ns = NS + "-basic"
    first = engram.remember("Alice prefers green tea", namespace=ns, tags=["alice"], who="t")
    assert not first.deduplicated
    again = engram.remember("Alice prefers green tea", namespace=ns)
    assert again.deduplicated and again.memory.id == first.memory.id
    for n in range(4):
        engram.remember(f"Deploy note number {n}", namespace=ns, type="procedural")
    got = engram.get_memory(first.memory.id, namespace=ns)
    assert got.content == "Alice prefers green tea" and list(got.tags) == ["alice"]
    hits = engram.recall("green tea", namespace=ns).results
    assert [h.memory.id for h in hits][:1] == [first.memory.id]
    # the iterator follows next_page_token over 3 pages of 2
    listed = list(engram.list_memories(namespace=ns, page_size=2))
    assert len(listed) == 5 and len({m.id for m in listed}) == 5
    procedural = list(
        engram.list_memories(namespace=ns, filter=memory_filter(types=["procedural"]))
    )
    assert len(procedural) == 4
    result = engram.modify_memories(
        [MemoryPatch(id=first.memory.id, importance=0.3, if_version=1)],
        namespace=ns,
        reason="less sure",
    ).results[0]
    assert result.status == store_pb2.PATCH_STATUS_UPDATED and result.new_version == 2
    events = list(engram.list_memory_history(first.memory.id, namespace=ns, page_size=1))
    assert [e.event_type for e in events] == [
        store_pb2.HISTORY_EVENT_TYPE_CREATED,
        store_pb2.HISTORY_EVENT_TYPE_MODIFIED,
    ]


def test_supersede_explain_and_reads_as_of(engram: Engram) -> None:
    """Issue 17 through the client: a changed fact supersedes the old one; now
    reads the new value, as_of an earlier instant the old one."""
    ns = NS + "-temporal"
    lisbon = engram.remember("Dana lives in Lisbon", namespace=ns).memory
    result = engram.supersede_memory(
        lisbon.id, "Dana lives in Berlin", namespace=ns, reason="she moved"
    )
    assert result.status == store_pb2.PATCH_STATUS_UPDATED and result.new_memory_id
    berlin = engram.get_memory(result.new_memory_id, namespace=ns)
    assert engram.get_memory(lisbon.id, namespace=ns).valid_until == berlin.valid_from
    assert [m.content for m in engram.list_memories(namespace=ns)] == ["Dana lives in Berlin"]
    before = berlin.create_time.ToDatetime() - timedelta(microseconds=1)
    assert [m.content for m in engram.list_memories(namespace=ns, as_of=before)] == [
        "Dana lives in Lisbon"
    ]
    hits = engram.recall("where does Dana live", namespace=ns, as_of=before).results
    assert [h.memory.content for h in hits] == ["Dana lives in Lisbon"]
    explained = engram.explain_memory(berlin.id, namespace=ns)
    assert [m.id for m in explained.supersedes] == [lisbon.id]
    assert explained.events[0].event_type == store_pb2.HISTORY_EVENT_TYPE_CREATED
    linked = list(engram.list_memory_links(lisbon.id, namespace=ns, page_size=1))
    assert [(x.link_type, x.from_memory_id) for x in linked] == [("supersedes", berlin.id)]


def test_entity_reads_sync_and_async(engram: Engram, suite: RunningSuite) -> None:
    """GetEntity and ListEntities through both clients: this suite runs no
    extraction, so the graph is empty (tests/e2e/test_graph_readme.py fills one)."""
    ns = NS + "-graph"
    assert list(engram.list_entities(namespace=ns, entity_type="person")) == []
    with pytest.raises(NotFound):
        engram.get_entity(name="Ana", namespace=ns)
    with pytest.raises(InvalidArgument) as invalid:
        engram.get_entity(namespace=ns)
    assert [v.field for v in invalid.value.field_violations] == ["id", "name"]

    async def reads() -> None:
        async with AsyncEngram(**suite.client_addresses()) as client:
            assert [e async for e in client.list_entities(namespace=ns)] == []
            with pytest.raises(NotFound):
                await client.get_entity(name="Ana", namespace=ns)

    asyncio.run(reads())


def test_errors_are_exceptions_by_meaning(engram: Engram) -> None:
    ns = NS + "-errors"
    with pytest.raises(NotFound) as missing:
        engram.get_memory("no-such-id", namespace=ns)
    assert missing.value.reason == "NOT_FOUND"
    assert missing.value.request_id  # the server's x-request-id, from the trailers
    with pytest.raises(InvalidArgument) as invalid:
        engram.remember("x", namespace=ns, importance=2.0)
    assert [v.field for v in invalid.value.field_violations] == ["importance"]
    memory = engram.remember("Bob uses vim", namespace=ns).memory
    with pytest.raises(VersionConflict) as conflict:
        engram.delete_memory(memory.id, namespace=ns, reason="r", if_version=7)
    assert conflict.value.reason == "VERSION_CONFLICT"
    tombstone = engram.delete_memory(memory.id, namespace=ns, reason="r")
    assert tombstone.deleted
    with pytest.raises(FailedPrecondition) as twice:
        engram.delete_memory(memory.id, namespace=ns, reason="r")
    assert twice.value.reason == "ALREADY_DELETED"
    assert not engram.recover_memory(memory.id, namespace=ns, reason="back").deleted


def test_forget_preview_then_execute_with_its_token(engram: Engram) -> None:
    ns = NS + "-forget"
    for n in range(30):
        engram.remember(f"temporary scratch item {n}", namespace=ns)
    preview = engram.forget_memories(namespace=ns, query="scratch")
    assert preview.candidate_count == 30 and preview.confirm_token
    assert len(list(engram.list_memories(namespace=ns))) == 30  # preview writes nothing
    with pytest.raises(FailedPrecondition) as refused:
        engram.forget_memories(namespace=ns, query="scratch", mode=FORGET_MODE_EXECUTE, reason="r")
    assert refused.value.reason == "CONFIRM_TOKEN_REQUIRED"
    done = engram.forget_memories(
        namespace=ns,
        query="scratch",
        mode=FORGET_MODE_EXECUTE,
        reason="cleanup",
        confirm_token=preview.confirm_token,
    )
    assert done.deleted_count == 30
    assert list(engram.list_memories(namespace=ns)) == []


def test_import_streams_batches_reports_progress_and_a_rerun_deduplicates(
    engram: Engram,
) -> None:
    ns = NS + "-import"
    items: list[dict[str, object]] = [{"content": f"imported fact {n}"} for n in range(1200)]
    items[7] = {"content": "bad importance", "importance": 5.0}
    seen: list[ImportProgress] = []
    summary = engram.import_memories(
        iter(items), namespace=ns, batch_size=250, on_progress=seen.append
    )
    assert (summary.created, summary.deduplicated, summary.failed) == (1199, 0, 1)
    assert [f.index for f in summary.failures] == [7] and "importance" in summary.failures[0].error
    assert [p.sent for p in seen[:5]] == [250, 500, 750, 1000, 1200]
    assert seen[-1] == ImportProgress(1200, 1199, 0, 1)
    rerun = engram.import_memories(items, namespace=ns, batch_size=1000)
    assert (rerun.created, rerun.deduplicated, rerun.failed) == (0, 1199, 1)
    assert len(list(engram.list_memories(namespace=ns, page_size=500))) == 1199


def test_import_over_one_streams_limit_opens_another_stream(engram: Engram) -> None:
    ns = NS + "-import-big"
    summary = engram.import_memories(
        ({"content": f"bulk row {n}"} for n in range(25_100)), namespace=ns, batch_size=1000
    )
    assert summary.created == 25_100 and summary.failed == 0


def test_async_client(suite: RunningSuite) -> None:
    ns = NS + "-async"

    async def main() -> None:
        async with AsyncEngram(**suite.client_addresses()) as engram:
            stored = await engram.remember("Carol drinks coffee", namespace=ns)
            await engram.remember("Carol lives in Porto", namespace=ns)
            hits = (await engram.recall("coffee", namespace=ns)).results
            assert hits[0].memory.id == stored.memory.id
            listed = [m.content async for m in engram.list_memories(namespace=ns, page_size=1)]
            assert sorted(listed) == ["Carol drinks coffee", "Carol lives in Porto"]
            summary = await engram.import_memories(
                [{"content": "async import"}], namespace=ns, batch_size=10
            )
            assert summary.created == 1
            with pytest.raises(NotFound) as missing:
                await engram.get_memory("nope", namespace=ns)
            assert missing.value.request_id
            status = await engram.get_status()
            assert status.store_available
            report = await engram.get_diagnostics()
            assert 0.0 <= report.score <= 1.0

    asyncio.run(main())


def test_assemble_context_and_recall_across_namespaces(engram: Engram, suite: RunningSuite) -> None:
    mine, team = NS + "-ctx-user", NS + "-ctx-team"
    rule = engram.remember("Answer Dana in short bullet points", namespace=mine, pinned=True)
    fact = engram.remember("Dana's team deploys on Mondays", namespace=team)
    both = engram.recall("Dana deploys", namespaces=[mine, team]).results
    assert {r.memory.namespace for r in both} == {mine, team}  # "Dana" is in both
    assert fact.memory.id in {r.memory.id for r in both}
    with pytest.raises(InvalidArgument):
        engram.recall("Dana", namespace=mine, namespaces=[team])
    context = engram.assemble_context("When does Dana deploy?", namespaces=[mine, team])
    assert context.token_budget == 1000 and 0 < context.token_count <= 1000
    shown = {m.id for s in context.sections for m in s.memories}
    assert {rule.memory.id, fact.memory.id} <= shown
    assert "Answer Dana in short bullet points" in context.context
    single = engram.assemble_context("Dana", namespaces=team, token_budget=50)
    assert single.token_count <= 50

    async def main() -> None:
        async with AsyncEngram(**suite.client_addresses()) as client:
            reply = await client.assemble_context("Dana deploys", namespaces=[mine, team])
            assert fact.memory.id in {m.id for s in reply.sections for m in s.memories}
            hits = (await client.recall("deploys", namespaces=[mine, team])).results
            assert fact.memory.id in {r.memory.id for r in hits}

    asyncio.run(main())


def test_sessions_turns_summaries_and_privacy(engram: Engram, suite: RunningSuite) -> None:
    ns = NS + "-sessions"
    turn = engram.append_turn("chat-9", "user", "My printer is offline", namespace=ns)
    assert turn.captured and not turn.promoted
    assert turn.memory.session_id == "chat-9" and turn.memory.HasField("expire_time")
    kept = engram.append_turn("chat-9", "user", "Remember that my printer is an HP", namespace=ns)
    assert kept.promoted and not kept.memory.HasField("expire_time")
    short = engram.remember("printer toner is low", namespace=ns, session_id="chat-9", ttl=90)
    assert short.memory.expire_time.seconds - short.memory.create_time.seconds == 90
    in_session = {
        m.id for m in engram.list_memories(namespace=ns, filter=memory_filter(session_id="chat-9"))
    }
    assert in_session == {turn.memory.id, kept.memory.id, short.memory.id}
    # this suite runs without an LLM: a summary would never be written, and the client says why
    with pytest.raises(FailedPrecondition) as no_llm:
        engram.summarize_session("chat-9", namespace=ns)
    assert no_llm.value.reason == "LLM_NOT_CONFIGURED"
    assert "no LLM is configured" in no_llm.value.message
    with pytest.raises(PrivacyBlocked) as blocked:
        engram.remember("my address is 1 Main St", namespace=ns, privacy="partial")
    assert isinstance(blocked.value, FailedPrecondition)
    assert blocked.value.message.startswith("Your privacy setting is partial")
    skipped = engram.append_turn("chat-9", "user", "hello", namespace=ns, privacy="full")
    assert not skipped.captured and skipped.notice

    async def main() -> None:
        async with AsyncEngram(**suite.client_addresses()) as aio:
            answer = await aio.append_turn(
                "chat-10", "assistant", "Try restarting it", namespace=ns
            )
            assert answer.memory.who == "assistant"
            with pytest.raises(FailedPrecondition) as refused:
                await aio.summarize_session("chat-10", namespace=ns)
            assert refused.value.reason == "LLM_NOT_CONFIGURED"

    asyncio.run(main())


def test_nothing_listening_is_unavailable_after_the_retries() -> None:
    port = free_port()
    engram = Engram(f"127.0.0.1:{port}", retry=RetryPolicy(max_attempts=2), timeout=5)
    with engram, pytest.raises(Unavailable):
        engram.get_memory("x")


def test_sample_program_type_checks_strict_from_the_wheel_and_runs(
    suite: RunningSuite, tmp_path: Path
) -> None:
    """The engram-grpc-client wheel alone (installed into a directory outside the repo)
    gives mypy --strict the types, and the program runs against the suite."""
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), "."],
        check=True,
        cwd=REPO_ROOT / "clients" / "python",
    )
    wheel = next(wheels.glob("engram_grpc_client-*.whl"))
    subprocess.run(
        [*pip, "install", "--no-deps", "-q", "--target", str(target), str(wheel)], check=True
    )
    assert not (target / "services").exists()
    sample = tmp_path / "sample.py"
    sample.write_text((REPO_ROOT / "tests" / "e2e" / "client_sample.py").read_text())
    env = clean_env({"MYPYPATH": str(target), "PYTHONPATH": str(target)})
    typed = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(sample)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert typed.returncode == 0, typed.stdout + typed.stderr
    ran = subprocess.run(
        [sys.executable, str(sample), suite.address("store"), suite.address("search")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("remembered ")
    assert "recalled Alice prefers green tea" in lines
    assert lines[-1].startswith("not found NOT_FOUND ")


def test_documents_watch_as_an_iterator_and_chunks_by_page(engram: Engram) -> None:
    ns = NS + "-documents"
    text = "\n\n".join(
        f"Paragraph {n}: " + "the deploy guide says many things. " * 40 for n in range(6)
    )
    document = engram.create_document(namespace=ns, content=text, title="guide")
    states = [d.status for d in engram.watch_document(document.id, namespace=ns, timeout=120)]
    assert states[-1] == document_pb2.DOCUMENT_STATUS_DONE, states
    done = engram.get_document(document.id, namespace=ns)
    assert done.chunk_count > 1
    chunks = list(engram.list_document_chunks(document.id, namespace=ns, page_size=1))
    assert [c.chunk_index for c in chunks] == list(range(done.chunk_count))
    with pytest.raises(NotFound):
        list(engram.watch_document("no-such-document", namespace=ns, timeout=10))


def test_unavailable_is_retried_by_the_channel_policy(launcher: Launcher, tmp_path: Path) -> None:
    """A store with mutations frozen answers UNAVAILABLE (MUTATIONS_FROZEN): the
    channel's retry policy sends the call max_attempts times (the store logs each),
    then the caller gets Unavailable with the reason."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    store = launcher.start_store(
        data_dir, env={env_name("memory.pipelineV2.mutationsFrozen"): "true"}
    )

    def refusals() -> int:
        return sum(
            1
            for line in store.log().splitlines()
            if "rpc failed" in line and "MUTATIONS_FROZEN" in line
        )

    for attempts, expected in ((3, 3), (1, 4)):
        engram = Engram(store.address, retry=RetryPolicy(max_attempts=attempts))
        with engram, pytest.raises(Unavailable) as frozen:
            engram.remember("not now", namespace=NS)
        assert frozen.value.reason == "MUTATIONS_FROZEN"
        assert refusals() == expected, store.log()
