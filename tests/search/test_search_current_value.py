"""The current value of a fact first (issue 35) through the public gRPC API: two
live memories stating one fact's values in different words rank newest valid
time first (services/search/current_value.py); `as_of` an instant between the
two writes reads the value current then; another person's fact is not reordered.

The keyword channel alone ranks here (no embedder): the older text shares more
words with the question, so without the rule it ranks first."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from google.protobuf import timestamp_pb2

from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from recall_helpers import Stack, timestamp

QUESTION = "When is Maria's flight to Oslo?"
OLDER = "Maria's flight to Oslo is on 12 March."
NEWER = "Maria now flies to Oslo on 13 March."


@pytest.fixture
def stack(recall_stack: Callable[..., Stack]) -> Stack:
    return recall_stack({"providers.embedding.kind": "none"})


def ranked(stack: Stack, as_of: timestamp_pb2.Timestamp | None = None) -> list[str]:
    request = search_pb2.RecallRequest(query=QUESTION, limit=10, min_score=0)
    if as_of is not None:
        request.as_of.CopyFrom(as_of)
    return [r.memory.content for r in stack.search.Recall(request, timeout=30).results]


def test_the_newer_value_of_one_fact_ranks_first(stack: Stack) -> None:
    older = stack.remember(OLDER, event_time=timestamp(datetime(2026, 1, 5, tzinfo=UTC)))
    stack.remember(NEWER, event_time=timestamp(datetime(2026, 2, 9, tzinfo=UTC)))
    stack.remember("Maria's sister lives in Bergen.")

    now = ranked(stack)
    assert now[:2] == [NEWER, OLDER]
    # as of an instant after the first write and before the second, only the
    # value known then is a candidate: it ranks first
    assert ranked(stack, as_of=older.create_time)[0] == OLDER


def test_the_order_by_valid_time_not_by_write_order(stack: Stack) -> None:
    """Written newest value first (a late import of an old statement): the valid
    time decides, not when the store heard it."""
    stack.remember(NEWER, event_time=timestamp(datetime(2026, 2, 9, tzinfo=UTC)))
    stack.remember(OLDER, event_time=timestamp(datetime(2026, 1, 5, tzinfo=UTC)))
    assert ranked(stack)[:2] == [NEWER, OLDER]


def test_another_persons_fact_is_not_reordered(stack: Stack) -> None:
    stack.remember(OLDER, event_time=timestamp(datetime(2026, 1, 5, tzinfo=UTC)))
    ravi = "Ravi now flies to Oslo on 13 March."
    stack.remember(ravi, event_time=timestamp(datetime(2026, 2, 9, tzinfo=UTC)))
    assert ranked(stack)[:2] == [OLDER, ravi]


def test_a_state_that_changed_ranks_its_newer_polarity_first(stack: Stack) -> None:
    stack.remember("Ravi is vegetarian.", event_time=timestamp(datetime(2026, 1, 5, tzinfo=UTC)))
    later = "Ravi is not vegetarian."
    stack.remember(later, event_time=timestamp(datetime(2026, 2, 9, tzinfo=UTC)))
    request = search_pb2.RecallRequest(query="Is Ravi vegetarian?", limit=10, min_score=0)
    results = stack.search.Recall(request, timeout=30).results
    assert [r.memory.content for r in results][:2] == [later, "Ravi is vegetarian."]


def test_another_name_in_the_same_words_is_the_newer_value(stack: Stack) -> None:
    """ "Who is Ravi's manager?" names Ravi, not the managers: the same words around
    another name are the fact's newer value; a flight to another city the question
    names is another fact and keeps its place."""
    stack.remember(
        "Ravi's manager is Anna.", event_time=timestamp(datetime(2026, 1, 5, tzinfo=UTC))
    )
    later = "Ravi's manager is Bruno."
    stack.remember(later, event_time=timestamp(datetime(2026, 2, 9, tzinfo=UTC)))
    request = search_pb2.RecallRequest(query="Who is Ravi's manager, Anna?", limit=10, min_score=0)
    named = [r.memory.content for r in stack.search.Recall(request, timeout=30).results]
    assert named[0] == "Ravi's manager is Anna."  # the question names Anna: not grouped
    request = search_pb2.RecallRequest(query="Who is Ravi's manager?", limit=10, min_score=0)
    results = [r.memory.content for r in stack.search.Recall(request, timeout=30).results]
    assert results[:2] == [later, "Ravi's manager is Anna."]

    stack.remember(OLDER, event_time=timestamp(datetime(2026, 1, 5, tzinfo=UTC)))
    bergen = "Maria's flight to Bergen is on 12 March."
    stack.remember(bergen, event_time=timestamp(datetime(2026, 2, 9, tzinfo=UTC)))
    assert ranked(stack)[:2] == [OLDER, bergen]


def ask(stack: Stack, question: str) -> list[str]:
    request = search_pb2.RecallRequest(query=question, limit=10, min_score=0)
    return [r.memory.content for r in stack.search.Recall(request, timeout=30).results]


def test_one_question_answered_in_other_words_ranks_the_newer_value_first(stack: Stack) -> None:
    """The older text shares more of the question's words, so the keyword channel ranks it
    first; both answer "which train" about Ravi with another time: the newer leads. The
    same question in the past asks about an event: the order is the channel's."""
    older = "Ravi takes the 9:00 train to work."
    stack.remember(older, event_time=timestamp(datetime(2026, 1, 5, tzinfo=UTC)))
    newer = "These days Ravi commutes on the 11:00 train."
    stack.remember(newer, event_time=timestamp(datetime(2026, 2, 9, tzinfo=UTC)))
    assert ask(stack, "Which train does Ravi take to work?")[:2] == [newer, older]
    assert ask(stack, "Which train did Ravi take to work?")[:2] == [older, newer]


def test_a_yes_no_question_ranks_the_newer_answer_first(stack: Stack) -> None:
    stack.remember("Ravi has a car.", event_time=timestamp(datetime(2026, 1, 5, tzinfo=UTC)))
    later = "Ravi sold the car and has none now."
    stack.remember(later, event_time=timestamp(datetime(2026, 2, 9, tzinfo=UTC)))
    assert ask(stack, "Does Ravi have a car?")[:2] == [later, "Ravi has a car."]


def test_another_fact_sharing_a_word_of_the_question_keeps_its_place(stack: Stack) -> None:
    office = "Ravi works from the Kingsway office."
    stack.remember(office, event_time=timestamp(datetime(2026, 1, 5, tzinfo=UTC)))
    train = "Ravi takes the 11:00 train to work."
    stack.remember(train, event_time=timestamp(datetime(2026, 2, 9, tzinfo=UTC)))
    assert ask(stack, "Which office does Ravi work from?")[:2] == [office, train]


def _history(stack: Stack, memory_id: str) -> list[store_pb2.HistoryEvent]:
    request = store_pb2.ListMemoryHistoryRequest(memory_id=memory_id)
    return list(stack.store.ListMemoryHistory(request, timeout=10).events)


def test_a_state_flipped_back_ranks_the_restated_value_first(stack: Stack) -> None:
    """ "has a car" / "does not have a car" / "has a car": the third write is
    deduplicated into the first memory, which records it as a restatement, so the
    first memory's value is the current one again; `as_of` before the restatement
    was recorded still reads the middle state. A re-sent write (the same valid time)
    records nothing more."""
    question = "Does Ravi have a car?"
    has, has_not = "Ravi has a car.", "Ravi does not have a car."

    def first(as_of: timestamp_pb2.Timestamp | None = None) -> str:
        request = search_pb2.RecallRequest(query=question, limit=10, min_score=0)
        if as_of is not None:
            request.as_of.CopyFrom(as_of)
        return stack.search.Recall(request, timeout=30).results[0].memory.content

    week = [timestamp(datetime(2026, 1, 5 + 7 * i, tzinfo=UTC)) for i in range(3)]
    first_write = stack.remember(has, event_time=week[0])
    middle = stack.remember(has_not, event_time=week[1])
    assert first() == has_not
    again = stack.store.Remember(store_pb2.RememberRequest(content=has, event_time=week[2]))
    assert again.deduplicated and again.memory.id == first_write.id
    assert first() == has
    assert first(as_of=middle.create_time) == has_not

    restated = [
        e
        for e in _history(stack, first_write.id)
        if e.event_type == store_pb2.HISTORY_EVENT_TYPE_RESTATED
    ]
    assert len(restated) == 1
    assert restated[0].metadata["valid_time"].startswith("2026-01-19")
    assert restated[0].new_content == has
    stack.store.Remember(store_pb2.RememberRequest(content=has, event_time=week[2]))
    stack.store.Remember(store_pb2.RememberRequest(content=has, event_time=week[0]))
    events = _history(stack, first_write.id)
    assert [e.event_type for e in events].count(store_pb2.HISTORY_EVENT_TYPE_RESTATED) == 1


def test_a_state_flipped_back_within_one_import_batch_is_restated(stack: Stack) -> None:
    """The same three statements in one ImportMemories message: the third is
    deduplicated into the first memory of the same batch, and restates it."""
    has, has_not = "Ravi has a car.", "Ravi does not have a car."
    week = [timestamp(datetime(2026, 1, 5 + 7 * i, tzinfo=UTC)) for i in range(3)]
    items = [
        store_pb2.ImportItem(content=text, event_time=when)
        for text, when in zip((has, has_not, has), week, strict=True)
    ]
    reply = stack.store.ImportMemories(iter([store_pb2.ImportMemoriesRequest(items=items)]))
    first_id = reply.results[0].memory_id
    assert reply.results[2].memory_id == first_id
    assert reply.results[2].status == store_pb2.IMPORT_STATUS_DEDUPLICATED
    events = [e.event_type for e in _history(stack, first_id)]
    assert events.count(store_pb2.HISTORY_EVENT_TYPE_RESTATED) == 1
    request = search_pb2.RecallRequest(query="Does Ravi have a car?", limit=10, min_score=0)
    assert stack.search.Recall(request, timeout=30).results[0].memory.content == has


def test_a_restatement_in_another_namespace_does_not_cross(stack: Stack) -> None:
    """The same words later in another namespace are that namespace's own memory: the
    first namespace's memory records no restatement and keeps its order."""
    has, has_not = "Ravi has a car.", "Ravi does not have a car."
    week = [timestamp(datetime(2026, 1, 5 + 7 * i, tzinfo=UTC)) for i in range(3)]
    mine = stack.remember(has, namespace="team-a", event_time=week[0])
    stack.remember(has_not, namespace="team-a", event_time=week[1])
    other = stack.remember(has, namespace="team-b", event_time=week[2])
    assert other.id != mine.id
    request = store_pb2.ListMemoryHistoryRequest(namespace="team-a", memory_id=mine.id)
    events = [e.event_type for e in stack.store.ListMemoryHistory(request, timeout=10).events]
    assert store_pb2.HISTORY_EVENT_TYPE_RESTATED not in events
    recall = search_pb2.RecallRequest(
        query="Does Ravi have a car?", namespace="team-a", limit=10, min_score=0
    )
    assert stack.search.Recall(recall, timeout=30).results[0].memory.content == has_not
