"""Questions about a session's memories through the public gRPC API (issue 34):
a session of three memories or more gives the temporal route's link hop two
linked memories or more to order, and every "when ...?" question went INTERNAL
on Recall and AssembleContext. Then every intent's typical question against
namespaces of every shape (empty, one memory, sessions of 1-50 memories by
Remember or AppendTurn, with and without entities and causal links), on one
keyword-only stack and one with vectors and the graph per backend: no call
may fail."""

from __future__ import annotations

import itertools
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from engram.common.v1 import job_pb2
from engram.search.v1 import search_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from extract_write_helpers import complete
from http_fakes import ollama_server
from recall_helpers import DIM, Stack, fake_embedding_overrides, timestamp

KEYWORDS_ONLY = {"providers.embedding.kind": "none", "search.min_score": 0.0}


@pytest.fixture(scope="module")
def stack(module_recall_stack: Callable[..., Stack]) -> Stack:
    return module_recall_stack(KEYWORDS_ONLY)


def recall(stack: Stack, query: str, namespace: str, **fields: Any) -> search_pb2.RecallResponse:
    return stack.search.Recall(
        search_pb2.RecallRequest(namespace=namespace, query=query, limit=10, **fields),
        timeout=30,
    )


def assemble(stack: Stack, query: str, namespace: str) -> search_pb2.AssembleContextResponse:
    return stack.search.AssembleContext(
        search_pb2.AssembleContextRequest(namespaces=[namespace], query=query), timeout=30
    )


def test_when_question_over_a_three_memory_session(stack: Stack) -> None:
    """Three Remembers in one session, then "when did we book the hotel?": the
    middle memory matches and is linked to both of its neighbours, which the
    route lifts; both RPCs answer."""
    namespace = "three-remembers"
    before, booked, after = (
        stack.remember(content, namespace=namespace, session_id="trip").id
        for content in (
            "We landed in Porto in the evening",
            "We booked the hotel by the river",
            "That was the Tuesday after the conference",
        )
    )
    routed = recall(stack, "When did we book the hotel?", namespace)
    assert routed.intent == search_pb2.QUERY_INTENT_TEMPORAL
    boosts = {r.memory.id: r.intent_boost for r in routed.results}
    assert boosts[booked] == 0.0
    assert boosts[before] == pytest.approx(0.15) and boosts[after] == pytest.approx(0.15)
    context = assemble(stack, "When did we book the hotel?", namespace)
    assert booked in {m.id for s in context.sections for m in s.memories}


# ---- every intent's typical question against namespaces of every shape ----------------

TURNS = (
    "Alice and I booked the hotel in Porto by the river",
    "We booked the flights to Porto on Monday",
    "The flight was moved because of the strike",
    "To renew the passport you fill in the form at the post office",
    "I visited the museum yesterday with Bob",
    "Alice works at Acme Corp on the Porto project",
    "The delay was caused by the storm last week",
    "Green tea is what I drink in the morning",
)
WHEN = "When did we book the hotel?"
# (question, the intent the rules give it): one or more typical questions per intent
QUESTIONS = (
    ("green tea", search_pb2.QUERY_INTENT_GENERAL),
    ("Which hotel did you recommend?", search_pb2.QUERY_INTENT_GENERAL),
    ("Who is Alice?", search_pb2.QUERY_INTENT_ENTITY),
    ("Tell me about the Porto project", search_pb2.QUERY_INTENT_ENTITY),
    ("What did Alice book?", search_pb2.QUERY_INTENT_ENTITY),
    (WHEN, search_pb2.QUERY_INTENT_TEMPORAL),
    ("What did I do today?", search_pb2.QUERY_INTENT_TEMPORAL),
    ("notes from 2001-03-01", search_pb2.QUERY_INTENT_TEMPORAL),
    ("Why was the flight moved?", search_pb2.QUERY_INTENT_CAUSAL),
    ("What caused the delay?", search_pb2.QUERY_INTENT_CAUSAL),
    ("How do I renew the passport?", search_pb2.QUERY_INTENT_PROCEDURAL),
    ("Where is the hotel and when did we book the flights?", search_pb2.QUERY_INTENT_GENERAL),
)
MAX_NAMESPACES = 8  # a Recall's at most
ROUTED = (
    search_pb2.QUERY_INTENT_GENERAL,
    search_pb2.QUERY_INTENT_ENTITY,
    search_pb2.QUERY_INTENT_TEMPORAL,
    search_pb2.QUERY_INTENT_CAUSAL,
    search_pb2.QUERY_INTENT_PROCEDURAL,
)


@dataclass(frozen=True)
class Shape:
    """A namespace: loose memories, sessions of `(how, turns)` (how: "remember"
    with a session id, or "turn": AppendTurn), and whether the graph (entities
    from extraction, causal links from consolidation) is written for it."""

    loose: int = 0
    sessions: tuple[tuple[str, int], ...] = ()
    graph: bool = False
    delete_middle: bool = False  # a session memory deleted: its links stay behind it

    @property
    def turns(self) -> int:
        return sum(n for _, n in self.sessions)

    @property
    def name(self) -> str:
        parts = [f"l{self.loose}"] + [f"{how[0]}{n}" for how, n in self.sessions]
        return "-".join(
            parts + (["g"] if self.graph else []) + (["d"] if self.delete_middle else [])
        )


SESSION_SIZES = (1, 2, 3, 4, 10, 50)
PLAIN_SIZES = (0, 1, 3, 5, 50)  # the plain shapes the vector stack takes too (the keyword one: all)
SHAPES = (
    Shape(),
    Shape(loose=1),
    Shape(loose=1, graph=True),
    *(Shape(sessions=((how, n),)) for how in ("remember", "turn") for n in SESSION_SIZES),
    *(Shape(sessions=((how, n),), graph=True) for how in ("remember", "turn") for n in (3, 10, 50)),
    Shape(loose=3, sessions=(("turn", 5), ("remember", 4), ("turn", 1)), graph=True),
    Shape(sessions=(("turn", 5),), delete_middle=True),
    Shape(sessions=(("remember", 7),), graph=True, delete_middle=True),
)


def hashed_vector(text: str) -> list[float]:
    """A bag of words folded into DIM axes: texts sharing words are near."""
    vector = [0.0] * DIM
    for word in re.findall(r"\w+", text.lower()):
        vector[zlib.crc32(word.encode()) % DIM] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector] if any(vector) else [0.0] * (DIM - 1) + [1.0]


def build(stack: Stack, shape: Shape) -> dict[str, list[str]]:
    """Write the namespace `shape.name`; its session ids and their memory ids."""
    namespace = shape.name
    sessions: dict[str, list[str]] = {}
    for i in range(shape.loose):
        stack.remember(f"{TURNS[i % len(TURNS)]}, loose note {i}", namespace=namespace)
    for s, (how, n) in enumerate(shape.sessions):
        session = f"s{s}"
        ids = sessions.setdefault(session, [])
        for i in range(n):
            content = f"{TURNS[(i + s) % len(TURNS)]}, turn {i} of {session}"
            if how == "remember":
                who = "user" if i % 2 == 0 else "Alice"
                memory = stack.remember(content, namespace=namespace, session_id=session, who=who)
            else:
                role = store_pb2.TURN_ROLE_USER if i % 2 == 0 else store_pb2.TURN_ROLE_ASSISTANT
                memory = stack.store.AppendTurn(
                    store_pb2.AppendTurnRequest(
                        namespace=namespace, session_id=session, role=role, content=content
                    )
                ).memory
            ids.append(memory.id)
    if shape.graph:
        write_graph(stack, namespace, sessions)
    if shape.delete_middle:
        middle = next(iter(sessions.values()))
        stack.store.DeleteMemory(
            store_pb2.DeleteMemoryRequest(
                namespace=namespace, id=middle[len(middle) // 2], reason="probe"
            )
        )
    return sessions


def write_graph(stack: Stack, namespace: str, sessions: dict[str, list[str]]) -> None:
    """Entities for every memory (its extract job completed as the pipeline's
    worker would), and causal links along each session (a new session ends the
    last one; each consolidate job is completed with a chain of causes)."""
    targets = ("Porto", "Acme Corp", "the hotel", "Bob")
    jobs = stack.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EXTRACT, max_jobs=500, namespaces=[namespace])
    ).jobs
    for i, job in enumerate(jobs):
        done = complete(
            stack,
            job,
            [],
            entities=[
                jq.EntityTriple(
                    source="Alice", relationship="mentioned", target=targets[i % 4], confidence=0.9
                )
            ],
            named_entities=[jq.NamedEntity(name="Alice", entity_type="person", aliases=["Ali"])],
        )
        assert done.outcome == jq.LEASE_OUTCOME_OK and done.graph_error == ""
    if not sessions:
        return
    stack.remember("the last word", namespace=namespace, session_id="closing")
    consolidations = stack.jobs.LeaseJobs(
        jq.LeaseJobsRequest(
            job_type=job_pb2.JOB_TYPE_CONSOLIDATE_SESSION, max_jobs=50, namespaces=[namespace]
        )
    ).jobs
    assert {j.session_id for j in consolidations} == set(sessions)
    for job in consolidations:
        ids = sessions[job.session_id]
        done = stack.jobs.CompleteConsolidateJob(
            jq.CompleteConsolidateJobRequest(
                lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token),
                model="scripted-llm",
                causal_links=[
                    jq.CausalLink(cause_memory_id=cause, effect_memory_id=effect)
                    for cause, effect in itertools.pairwise(ids)
                ],
            )
        )
        assert (done.outcome, done.causal_links) == (jq.LEASE_OUTCOME_OK, len(ids) - 1)


def ask_everything(stack: Stack, shapes: dict[str, dict[str, list[str]]]) -> list[str]:
    """Every question on every namespace by Recall (alone, and eight namespaces
    at once) and AssembleContext (in the namespace's first session, as an agent
    asks, when it has one); the "when" question also by session filter, as of
    a past moment and with each routed intent asked for. What failed, as `RPC
    namespace question: code details`."""
    failures: list[str] = []
    every = list(shapes)

    def call(what: str, rpc: Callable[[Any], Any], request: Any) -> None:
        try:
            rpc(request, timeout=30)
        except grpc.RpcError as error:
            failures.append(f"{what}: {error.code().name} {error.details()}")

    def context(question: str, namespace: str, **fields: Any) -> None:
        request = search_pb2.AssembleContextRequest(
            namespaces=[namespace], query=question, **fields
        )
        call(
            f"AssembleContext {fields} {namespace} {question!r}",
            stack.search.AssembleContext,
            request,
        )

    for question, _ in QUESTIONS:
        for namespace, sessions in shapes.items():
            call(
                f"Recall {namespace} {question!r}",
                stack.search.Recall,
                recall_request(question, [namespace]),
            )
            context(
                question, namespace, **({"session_id": next(iter(sessions))} if sessions else {})
            )
        for at in range(0, len(every), MAX_NAMESPACES):  # in a request's limit
            several = every[at : at + MAX_NAMESPACES]
            call(
                f"Recall {several} {question!r}",
                stack.search.Recall,
                recall_request(question, several),
            )
    past = timestamp(datetime.now(UTC) - timedelta(days=1))
    for namespace, sessions in shapes.items():
        context(WHEN, namespace)
        context(WHEN, namespace, as_of=past)
        for session in sessions:
            request = recall_request(WHEN, [namespace])
            request.filter.session_id = session
            call(f"Recall session {session} {namespace}", stack.search.Recall, request)
        for intent in ROUTED:
            request = recall_request(WHEN, [namespace])
            request.intent = intent
            call(f"Recall intent {intent} {namespace}", stack.search.Recall, request)
    return failures


def recall_request(query: str, namespaces: list[str]) -> search_pb2.RecallRequest:
    return search_pb2.RecallRequest(namespaces=namespaces, query=query, limit=10)


@pytest.fixture(scope="module")
def vector_stack(module_recall_stack: Callable[..., Stack]) -> Iterator[Stack]:
    """Vectors for every memory and query (hashed_vector), the entity graph
    written and read, sessions consolidated, questions split into parts."""
    server = ollama_server(hashed_vector).start()
    try:
        yield module_recall_stack(
            fake_embedding_overrides(
                server.url,
                **{
                    "memory.pipelineV2.enabled": True,
                    "memory.pipelineV2.graphEnabled": True,
                    "sessions.consolidate": "on",
                    "search.decompose_weight": 0.5,
                },
            )
        )
    finally:
        server.stop()


@pytest.fixture(scope="module")
def keyword_stack(module_recall_stack: Callable[..., Stack]) -> Stack:
    """Keywords alone (no embedding provider), the graph neither written nor read."""
    return module_recall_stack(
        {**KEYWORDS_ONLY, "memory.pipelineV2.enabled": True, "sessions.consolidate": "on"}
    )


def test_every_intents_question_on_every_namespace_shape_keywords_only(
    keyword_stack: Stack,
) -> None:
    shapes = {s.name: build(keyword_stack, s) for s in SHAPES if not s.graph}
    biggest = max(shapes, key=lambda n: sum(len(ids) for ids in shapes[n].values()))
    intents = {
        q: keyword_stack.search.Recall(recall_request(q, [biggest]), timeout=30).intent
        for q, _ in QUESTIONS
    }
    assert intents == {q: intent for q, intent in QUESTIONS}, "each intent's question is routed"
    assert set(intents.values()) == set(ROUTED), "every intent the classifier knows"
    assert ask_everything(keyword_stack, shapes) == []


def test_every_intents_question_on_every_namespace_shape_with_vectors_and_graph(
    vector_stack: Stack,
) -> None:
    shapes = {s.name: build(vector_stack, s) for s in SHAPES if s.graph or s.turns in PLAIN_SIZES}
    vector_stack.embed_pending(hashed_vector)
    assert ask_everything(vector_stack, shapes) == []
