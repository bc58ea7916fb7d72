"""Recall's keyword channel (embeddings off: providers.embedding.kind none), the
query builder's promise that no user text can break it, and bad input.

One store + search pair serves the whole module (hypothesis runs many examples
against it); every test writes into its own namespace.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import grpc
import pytest
from google.protobuf import timestamp_pb2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engram.common.v1 import memory_pb2
from engram.search.v1 import search_pb2
from grpc_helpers import error_of
from recall_helpers import Stack, ids


@pytest.fixture(scope="module")
def words(module_recall_stack: Callable[..., Stack]) -> Stack:
    stack = module_recall_stack({"providers.embedding.kind": "none"})
    for content in (
        'The user said "use tabs" (not spaces)',
        "Deploy AND rollback procedures: see the runbook*",
        "NEAR the office there is a café",
        "column:value pairs are config syntax",
    ):
        stack.remember(content, namespace="fuzz")
    return stack


def fresh() -> str:
    return f"kw-{uuid.uuid4().hex[:10]}"


# ---- the keyword channel --------------------------------------------------------------


def test_any_query_term_may_match_and_more_matching_terms_rank_higher(words: Stack) -> None:
    ns = fresh()
    tea = words.remember("Alice drinks green tea every morning", namespace=ns)
    both = words.remember("Bob switched from coffee to tea", namespace=ns)
    coffee = words.remember("The coffee machine is broken", namespace=ns)
    words.remember("Nothing to see here", namespace=ns)
    response = words.recall("tea or coffee?", namespace=ns)
    assert ids(response)[0] == both.id
    assert set(ids(response)) == {tea.id, both.id, coffee.id}
    assert not response.degraded, "no embedding provider is configured: nothing is missing"
    for result in response.results:
        assert result.keyword.rank >= 1 and result.keyword.score > 0
        assert (result.vector.rank, result.vector.score) == (0, 0.0)


def test_stop_words_do_not_match_unless_nothing_else_is_asked(words: Stack) -> None:
    ns = fresh()
    budget = words.remember("The budget is due on Friday", namespace=ns)
    words.remember("What is it that you want", namespace=ns)
    assert ids(words.recall("what is the budget", namespace=ns)) == [budget.id]
    assert len(words.recall("what is", namespace=ns).results) == 2


def test_word_forms_match_through_stemming_and_case(words: Stack) -> None:
    ns = fresh()
    deployed = words.remember("We deployed the service on Tuesday", namespace=ns)
    assert ids(words.recall("DEPLOYING", namespace=ns)) == [deployed.id]


def test_a_query_without_any_matching_word_returns_nothing(words: Stack) -> None:
    ns = fresh()
    words.remember("Alice likes tea", namespace=ns)
    response = words.recall("quantum chromodynamics", namespace=ns)
    assert list(response.results) == []
    assert not response.degraded


@pytest.mark.parametrize(
    "query",
    [
        '"use tabs',
        "tabs)",
        "(((",
        "deploy AND",
        "OR OR OR",
        "NOT rollback",
        "NEAR(office café)",
        "NEAR/3",
        "runbook*",
        "*",
        "column:value",
        "content:tabs",
        "^deploy",
        "-rollback",
        "+café",
        "{column} : [x]",
        "tabs' OR '1'='1",
        "'; DROP TABLE memories; --",
        "\\",
        "🦓 zebra 🦓",
        "...",
    ],
)
def test_query_syntax_characters_are_just_text(words: Stack, query: str) -> None:
    response = words.recall(query, namespace="fuzz")
    assert all(r.memory.namespace == "fuzz" for r in response.results)


def test_a_nul_character_in_the_query_is_invalid_argument(words: Stack) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        words.recall("\x00tabs", namespace="fuzz")
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_operator_words_still_find_memories_that_contain_them(words: Stack) -> None:
    contents = {r.memory.content for r in words.recall("near", namespace="fuzz").results}
    assert contents == {"NEAR the office there is a café"}
    contents = {r.memory.content for r in words.recall("runbook*", namespace="fuzz").results}
    assert contents == {"Deploy AND rollback procedures: see the runbook*"}


@pytest.mark.parametrize(
    "query",
    [
        "what happened in December 9999",
        "January 0000 notes",
        "on 1 January 0001",
        "31 December 9999",
        "February 30 2024",
        "0 March 2020",
    ],
)
def test_impossible_dates_in_the_query_are_just_text(words: Stack, query: str) -> None:
    """Recall reads calendar references from the query; nonsense dates must not crash it."""
    words.recall(query, namespace="fuzz")


QUERY_PIECE = st.one_of(
    st.sampled_from(list("\"'()*:^-+{}[]/\\,.;!?&|~<>= \t\n")),
    st.sampled_from(["AND", "OR", "NOT", "NEAR", "NEAR/2", "content:", "tabs", "café"]),
    st.builds(  # calendar references: recall reads dates out of the query
        "{} {} {:04d} ".format,
        st.integers(0, 40),
        st.sampled_from(["January", "dec", "February", "Sept."]),
        st.integers(0, 9999),
    ),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=8),
)
QUERY_TEXT = st.lists(QUERY_PIECE, min_size=1, max_size=12).map("".join)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(query=st.lists(QUERY_TEXT, min_size=1, max_size=4).map(" ".join))
@example(query='" OR content:* NEAR(( AND')
@example(query="\u0301\u0301 tabs\u0000")
def test_recall_never_fails_internally_whatever_the_user_types(words: Stack, query: str) -> None:
    request = search_pb2.RecallRequest(namespace="fuzz", query=query[:2000])
    try:
        response = words.search.Recall(request, timeout=30)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, (exc.code(), exc.details())
        # a blank query, or one holding U+0000 (no backend stores it: services/common/validation.py)
        assert not query[:2000].strip() or "\x00" in query[:2000], "only a blank or NUL query"
    else:
        assert all(r.memory.namespace == "fuzz" for r in response.results)


# ---- bad input ---------------------------------------------------------------------------


def _ts(seconds: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds)


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "   \n\t"}, "query"),
        ({"query": "x" * 2001}, "query"),
        ({"query": "tea", "limit": -1}, "limit"),
        ({"query": "tea", "limit": 101}, "limit"),
        ({"query": "tea", "namespace": "no spaces allowed"}, "namespace"),
        ({"query": "tea", "namespace": "x" * 129}, "namespace"),
        (
            {"query": "tea", "filter": memory_pb2.MemoryFilter(types=["nonsense"])},
            "filter.types[0]",
        ),
        (
            {"query": "tea", "filter": memory_pb2.MemoryFilter(types=["fact", "bogus"])},
            "filter.types[1]",
        ),
        (
            {"query": "tea", "filter": memory_pb2.MemoryFilter(since=_ts(2000), until=_ts(1000))},
            "filter.since",
        ),
        (
            {"query": "tea", "filter": memory_pb2.MemoryFilter(importance_min=1.5)},
            "filter.importance_min",
        ),
        (
            {"query": "tea", "filter": memory_pb2.MemoryFilter(importance_min=-0.1)},
            "filter.importance_min",
        ),
    ],
    ids=[
        "empty",
        "blank",
        "too-long",
        "negative-limit",
        "limit-over-100",
        "bad-namespace",
        "long-namespace",
        "unknown-type",
        "second-type-unknown",
        "since-after-until",
        "importance-over-1",
        "importance-negative",
    ],
)
def test_bad_requests_are_invalid_and_name_the_field(
    words: Stack, request_fields: dict[str, object], field: str
) -> None:
    code, reason, fields = error_of(
        lambda: words.search.Recall(search_pb2.RecallRequest(**request_fields))  # type: ignore[arg-type]
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert fields == [field]
    assert reason


def test_the_longest_query_and_largest_limit_are_accepted(words: Stack) -> None:
    ns = fresh()
    words.remember("tea time", namespace=ns)
    query = ("tea " * 500)[:2000]
    assert len(query) == 2000
    response = words.search.Recall(search_pb2.RecallRequest(namespace=ns, query=query, limit=100))
    assert len(response.results) == 1


def test_an_equal_since_and_until_is_an_empty_window_not_an_error(words: Stack) -> None:
    ns = fresh()
    words.remember("tea time", namespace=ns)
    response = words.recall("tea", namespace=ns, since=_ts(1000), until=_ts(1000))
    assert list(response.results) == []


def test_a_bad_request_names_every_bad_field_at_once(words: Stack) -> None:
    code, _, fields = error_of(
        lambda: words.search.Recall(
            search_pb2.RecallRequest(
                namespace="bad ns",
                query=" ",
                limit=101,
                filter=memory_pb2.MemoryFilter(
                    types=["gossip"],
                    importance_min=2,
                    until=timestamp_pb2.Timestamp(seconds=-(10**12)),
                ),
            )
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert sorted(fields) == [
        "filter.importance_min",
        "filter.types[0]",
        "filter.until",
        "limit",
        "namespace",
        "query",
    ]
