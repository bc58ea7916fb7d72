"""Issue 16, search side: Recall over several namespaces, and AssembleContext (seed 003
"Context injection") through the public gRPC API of a real store + search pair; the
layout's budget rule as a property over random memories and budgets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engram.common.v1 import job_pb2
from engram.search.v1 import search_pb2 as spb
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from extract_write_helpers import link
from grpc_helpers import error_of
from recall_helpers import Stack
from services.common.memory_record import MemoryRecord
from services.search.context import (
    EntityLine,
    Renderer,
    is_complex,
    layout,
    memory_line_text,
)
from services.search.tokens import CL100K, MINILM, tokenizer

KEYWORDS_ONLY = {"providers.embedding.kind": "none", "search.min_score": 0.0}
INVALID = grpc.StatusCode.INVALID_ARGUMENT
PINNED, FACTS, SESSION, ENTITIES = (
    spb.CONTEXT_SECTION_KIND_PINNED,
    spb.CONTEXT_SECTION_KIND_FACTS,
    spb.CONTEXT_SECTION_KIND_SESSION,
    spb.CONTEXT_SECTION_KIND_ENTITIES,
)


def recall_many(stack: Stack, query: str, namespaces: list[str], **fields: Any) -> Any:
    return stack.search.Recall(
        spb.RecallRequest(namespaces=namespaces, query=query, **fields), timeout=30
    )


def assemble(stack: Stack, query: str, **fields: Any) -> spb.AssembleContextResponse:
    return stack.search.AssembleContext(
        spb.AssembleContextRequest(query=query, **fields), timeout=30
    )


def section(response: spb.AssembleContextResponse, kind: int) -> Any:
    found = [s for s in response.sections if s.kind == kind]
    return found[0] if found else None


# ---- Recall over several namespaces ---------------------------------------------------


def test_recall_reads_several_namespaces_and_says_where_each_result_came_from(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack(KEYWORDS_ONLY)
    mine = stack.remember("the deploy runbook lives in the wiki", namespace="user-1")
    team = stack.remember("the deploy freeze starts on friday", namespace="team")
    other = stack.remember("the deploy key rotates monthly", namespace="team-2")
    response = recall_many(stack, "deploy", ["user-1", "team"])
    got = {r.memory.id: r.memory.namespace for r in response.results}
    assert got == {mine.id: "user-1", team.id: "team"}
    assert other.id not in got
    scores = [r.score for r in response.results]
    assert scores == sorted(scores, reverse=True), "merged by score"
    # one namespace in `namespaces` is the same search as `namespace`
    alone = recall_many(stack, "deploy", ["team"])
    assert [r.memory.id for r in alone.results] == [
        r.memory.id for r in stack.recall("deploy", namespace="team").results
    ]
    limited = recall_many(stack, "deploy", ["user-1", "team", "team-2"], limit=2)
    assert len(limited.results) == 2


@pytest.mark.parametrize(
    ("fields", "bad_fields"),
    [
        ({"namespace": "a", "namespaces": ["b"]}, ["namespaces"]),
        ({"namespaces": [f"n{i}" for i in range(9)]}, ["namespaces"]),
        ({"namespaces": ["a", "b", "a"]}, ["namespaces[2]"]),
        ({"namespaces": ["a", "no spaces"]}, ["namespaces[1]"]),
        ({"namespaces": ["a", "b", "a"], "limit": 500}, ["namespaces[2]", "limit"]),
    ],
)
def test_recall_refuses_bad_namespaces_naming_every_bad_field(
    recall_stack: Callable[..., Stack], fields: dict[str, Any], bad_fields: list[str]
) -> None:
    stack = recall_stack(KEYWORDS_ONLY)
    code, reason, names = error_of(
        lambda: stack.search.Recall(spb.RecallRequest(query="deploy", **fields), timeout=30)
    )
    assert code == INVALID and reason == "INVALID_ARGUMENT"
    assert sorted(names) == sorted(bad_fields)


# ---- AssembleContext --------------------------------------------------------------------


def test_context_sections_pinned_first_facts_next_no_memory_twice(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack(KEYWORDS_ONLY)
    answer_style = stack.remember("Always answer in French", type="rule", pinned=True)
    tea = stack.remember("Alice prefers green tea in the morning", type="preference")
    fact = stack.remember("Alice moved to Lisbon in March", type="fact")
    pinned_fact = stack.remember("Alice is allergic to peanuts", type="fact", pinned=True)
    stack.remember("The office plants need water", type="fact")
    response = assemble(stack, "What does Alice drink?")

    assert [s.kind for s in response.sections] == [PINNED, FACTS]
    pinned_ids = [m.id for m in section(response, PINNED).memories]
    assert set(pinned_ids) == {answer_style.id, pinned_fact.id}
    facts_ids = [m.id for m in section(response, FACTS).memories]
    assert fact.id in facts_ids and tea.id in facts_ids, "not pinned: ranked as Recall ranks it"
    every = [m.id for s in response.sections for m in s.memories]
    assert len(every) == len(set(every)), "no memory twice"
    text = response.context
    assert text.index("## Pinned memories") < text.index("## Relevant memories")
    # a standing rule carries no date; a fact says when it was true
    assert "\n- Always answer in French\n" in f"\n{text}\n"
    assert "\n- [2001-03-01] Alice moved to Lisbon in March" in text
    assert response.tokenizer == CL100K
    assert response.token_count == tokenizer(CL100K).count(text)
    assert response.token_count <= response.token_budget == 1000, "a simple query: 1000"
    assert sum(s.token_count for s in response.sections) >= response.token_count


def test_context_stays_within_a_small_budget_and_picks_the_default_by_complexity(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack(KEYWORDS_ONLY)
    for i in range(40):
        stack.remember(f"Deploy note {i}: the release train leaves on day {i} of the sprint")
    for budget in (1, 20, 60, 200):
        response = assemble(stack, "deploy release", token_budget=budget)
        assert response.token_budget == budget
        assert response.token_count <= budget
        assert response.token_count == (
            tokenizer(CL100K).count(response.context) if response.context else 0
        )
    assert assemble(stack, "deploy release", token_budget=1).context == ""
    roomy = assemble(stack, "deploy release", token_budget=60)
    assert len(section(roomy, FACTS).memories) >= 1
    complex_query = "Why did the release train change and how does it compare to the last sprint?"
    assert assemble(stack, complex_query).token_budget == 3000
    assert assemble(stack, "deploy release").token_budget == 1000


def test_context_over_several_namespaces_names_each_line_s_namespace(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack(KEYWORDS_ONLY)
    stack.remember("Carol leads the payments team", namespace="team")
    stack.remember("Carol's standup is at nine", namespace="user-7")
    stack.remember("Carol from the other team", namespace="elsewhere")
    response = assemble(stack, "Carol", namespaces=["user-7", "team"])
    namespaces = {m.namespace for s in response.sections for m in s.memories}
    assert namespaces == {"user-7", "team"}
    assert "(team) Carol leads the payments team" in response.context
    assert "(user-7) Carol's standup is at nine" in response.context
    assert "other team" not in response.context


def test_context_entities_section_names_the_graph_entities_of_the_memories_shown(
    recall_stack: Callable[..., Stack],
) -> None:
    graph = {"memory.pipelineV2.enabled": True, "memory.pipelineV2.graphEnabled": True}
    stack = recall_stack({**KEYWORDS_ONLY, **graph})
    alice = stack.remember("Alice Smith joined the platform team")
    link(stack, alice, ("Alice Smith", "works_at", "Acme Corp"))
    response = assemble(stack, "platform team")
    entities = section(response, ENTITIES)
    assert entities is not None
    by_name = {e.name: e for e in entities.entities}
    assert "works_at Acme Corp" in by_name["Alice Smith"].relations
    assert "Alice Smith works_at it" in by_name["Acme Corp"].relations
    assert "## Entities involved" in response.context
    assert "- Alice Smith" in response.context


def _turn(stack: Stack, content: str, session_id: str, **fields: Any) -> Any:
    return stack.store.AppendTurn(
        store_pb2.AppendTurnRequest(
            session_id=session_id, role=store_pb2.TURN_ROLE_USER, content=content, **fields
        )
    ).memory


def test_context_session_section_summary_first_then_the_turns_it_does_not_cover(
    recall_stack: Callable[..., Stack],
) -> None:
    """Seed 001: the summary is preferred over the raw turns it summarises; turns after
    it follow, oldest first; another session's turns are not long-term knowledge."""
    stack = recall_stack({**KEYWORDS_ONLY, "providers.llm.model": "m"})  # a summary needs one
    early = _turn(stack, "I am planning a trip to Kyoto in April", "s1", who="ana")
    stack.store.SummarizeSession(store_pb2.SummarizeSessionRequest(session_id="s1"))
    [job] = stack.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_SUMMARIZE_SESSION, max_jobs=10)
    ).jobs
    stack.jobs.CompleteSummarizeJob(
        jq.CompleteSummarizeJobRequest(
            lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token),
            summary="Ana is planning an April trip to Kyoto.",
            model="test-llm",
        )
    )
    later = [
        _turn(stack, "Which temples should I see?", "s1", who="ana"),
        _turn(stack, "Also, I hate crowds", "s1", who="ana"),
    ]
    other = _turn(stack, "Kyoto trip for the other session", "s2")
    fact = stack.remember("Ana's passport expires in May", type="fact")
    response = assemble(stack, "Kyoto trip passport", session_id="s1")

    session = section(response, SESSION)
    assert session is not None
    kinds = [m.type for m in session.memories]
    assert kinds[0] == "session_summary"
    assert [m.id for m in session.memories[1:]] == [m.id for m in later]
    assert early.id not in {m.id for s in response.sections for m in s.memories}, "summarised"
    assert other.id not in {m.id for s in response.sections for m in s.memories}
    assert fact.id in [m.id for m in section(response, FACTS).memories]
    text = response.context
    assert text.index("## This session") > text.index("## Relevant memories")
    assert "- [summary to " in text and "ana: Which temples should I see?" in text
    assert text.index("Which temples") < text.index("I hate crowds")
    # no session asked for: no session section, and its turns stay out of the facts
    plain = assemble(stack, "Kyoto trip passport")
    assert section(plain, SESSION) is None
    assert all(not m.session_id for s in plain.sections for m in s.memories)
    # a small budget keeps the summary, then the newest turns
    for budget in (25, 60):
        small = assemble(stack, "nothing matches this", session_id="s1", token_budget=budget)
        contents = [m.content for m in section(small, SESSION).memories]
        assert contents[0] == "Ana is planning an April trip to Kyoto."
        assert (
            contents[1:]
            == ["Which temples should I see?", "Also, I hate crowds"][-(len(contents) - 1) or 2 :]
        )
    assert len(contents) >= 2, "60 tokens hold the summary and the newest turn"


def test_context_refuses_bad_requests_naming_every_bad_field(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack(KEYWORDS_ONLY)
    cases = [
        ({"query": "x", "token_budget": -1}, ["token_budget"]),
        ({"query": "x", "token_budget": 32001}, ["token_budget"]),
        ({"query": ""}, ["query"]),
        ({"query": "x" * 2001}, ["query"]),
        (
            {"query": "", "token_budget": -5, "namespaces": ["a", "a"]},
            ["namespaces[1]", "query", "token_budget"],
        ),
        ({"query": "x", "namespaces": ["bad name"]}, ["namespaces[0]"]),
        ({"query": "x", "session_id": "has space"}, ["session_id"]),
        ({"query": "x", "session_id": "s" * 129}, ["session_id"]),
    ]
    for fields, bad_fields in cases:
        code, reason, names = error_of(
            lambda f=fields: stack.search.AssembleContext(
                spb.AssembleContextRequest(**f), timeout=30
            )
        )
        assert (code, reason) == (INVALID, "INVALID_ARGUMENT"), fields
        assert sorted(names) == sorted(bad_fields), fields


def test_context_counts_with_the_configured_tokenizer(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack({**KEYWORDS_ONLY, "search.context.tokenizer": MINILM})
    stack.remember("Bob's birthday is on the fourth of July")
    response = assemble(stack, "birthday", token_budget=100)
    assert response.tokenizer == MINILM
    assert response.token_count == tokenizer(MINILM).count(response.context) > 0


# ---- the layout, pure -------------------------------------------------------------------


def test_query_complexity_is_decided_by_the_text_alone() -> None:
    assert not is_complex("Where does Alice live?")
    assert is_complex("Why did Alice move?")
    assert is_complex("Where does she live? And since when?")
    assert is_complex("one two three four five six seven eight nine ten eleven twelve")
    assert not is_complex("one two three four five six seven eight nine ten eleven")


def _memory(i: int, content: str, kind: str, pinned: bool, namespace: str) -> MemoryRecord:
    return MemoryRecord(
        id=f"m{i}",
        namespace=namespace,
        content=content,
        content_hash=f"h{i}",
        type=kind,
        importance=0.5,
        tags=(),
        pinned=pinned,
        who="",
        why="",
        source_type="",
        source_id="",
        version=1,
        deleted=False,
        deleted_at=None,
        created_at="2024-01-01T00:00:00.000000000Z",
        updated_at="2024-01-01T00:00:00.000000000Z",
        event_time=f"2023-0{1 + i % 9}-01T00:00:00.000000000Z",
        access_count=0,
        last_accessed=None,
    )


# contents whose ends could join a line break: punctuation, CR LF, Unicode line and
# paragraph separators, NEL, tabs, trailing spaces, contractions, digits
TRICKY = [
    "ends with a full stop.",
    "ends with marks?!",
    "windows\r\nline\r\n",
    "unicode\u2028separator\u2029",
    "next line\x85",
    "\ttabbed\t",
    "trailing spaces   ",
    "'s 've 're",
    "12345678",
    "...",
    "## looks like a header",
    "- looks like a line",
]
_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=200
)
_memories = st.lists(
    st.tuples(_text, st.sampled_from(["fact", "rule", "preference", "decision"]), st.booleans()),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    budget=st.integers(min_value=0, max_value=4000),
    pinned=_memories,
    relevant=_memories,
    session=_memories,
    entity_names=st.lists(_text, max_size=8),
    namespaces=st.sampled_from([("a",), ("a", "b")]),
    tokenizer_name=st.sampled_from([CL100K, MINILM]),
)
@example(
    budget=400,
    pinned=[(c, "fact", False) for c in TRICKY],
    relevant=[(c, "rule", False) for c in TRICKY],
    session=[],
    entity_names=TRICKY,
    namespaces=("a",),
    tokenizer_name=CL100K,
)
def test_the_block_never_exceeds_the_budget_and_shows_each_memory_once(
    budget: int,
    pinned: list[tuple[str, str, bool]],
    relevant: list[tuple[str, str, bool]],
    session: list[tuple[str, str, bool]],
    entity_names: list[str],
    namespaces: tuple[str, ...],
    tokenizer_name: str,
) -> None:
    """The block's count is the sum of its lines' (services.search.context.Renderer):
    checked here against the tokenizer's count of the whole block."""
    counter = iter(range(10_000))

    def records(items: list[tuple[str, str, bool]]) -> list[MemoryRecord]:
        return [
            _memory(i, c, k, p, namespaces[i % len(namespaces)])
            for (c, k, p), i in zip(items, counter, strict=False)
        ]

    pinned_records, relevant_records = records(pinned), records(relevant)
    # a memory can be both pinned and relevant: Recall finds pinned memories too
    relevant_records += pinned_records[: len(pinned_records) // 2]
    session_records = records(session)
    entities = [
        EntityLine(f"e{i}", namespaces[0], name, "person", (f"knows {name}",))
        for i, name in enumerate(entity_names)
    ]
    count_tokens = tokenizer(tokenizer_name)
    renderer = Renderer(count_tokens, show_namespace=len(namespaces) > 1)
    sections, text, count = layout(
        budget, pinned_records, relevant_records, session_records, entities, renderer
    )
    assert count <= budget
    assert count == (count_tokens.count(text) if text else 0)
    shown = [m.id for s in sections for m in s.memories]
    assert len(shown) == len(set(shown))
    kinds = [s.kind for s in sections]
    assert kinds == sorted(kinds), "sections in their fixed order"
    for s in sections:
        assert s.lines
        for memory in s.memories:
            assert memory_line_text(memory, len(namespaces) > 1) in text
