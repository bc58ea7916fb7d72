"""Inputs that once poisoned a namespace or crashed a call (issue 11, items 3 and 4).

Each one must now be a precise error that writes nothing, or, where the input is
valid (a Timestamp anywhere in google.protobuf.Timestamp's range), work end to
end: Remember, then Get, List and Recall return it unchanged, and the namespace
stays readable. One store + search pair (keyword channel only) serves the module;
every test writes into its own namespace.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import backend_db
from engram.common.v1 import memory_pb2
from engram.search.v1 import search_pb2
from engram.store.internal.v1 import access_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from recall_helpers import Stack
from services.common.memory_filter import MemoryFilterSpec
from services.store.page_tokens import encode_page_token
from store_helpers import table_counts

MIN_SECONDS = -62_135_596_800  # 0001-01-01T00:00:00Z
MAX_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z
STORE = "/engram.store.v1.MemoryStoreService"
INVALID = (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")


@pytest.fixture(scope="module")
def stack(module_recall_stack: Callable[..., Stack]) -> Stack:
    return module_recall_stack({"providers.embedding.kind": "none"})


@pytest.fixture
def db(stack: Stack) -> Path:
    return Path(stack.config.storage.path)


def fresh() -> str:
    return f"poison-{uuid.uuid4().hex[:10]}"


def ts(seconds: int, nanos: int = 0) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


def remember(stack: Stack, namespace: str, content: str, **fields: Any) -> memory_pb2.Memory:
    return stack.store.Remember(
        store_pb2.RememberRequest(namespace=namespace, content=content, **fields)
    ).memory


def invalid_fields(call: Callable[[], Any]) -> list[str]:
    code, reason, fields = error_of(call)
    assert (code, reason) == INVALID, (code, reason)
    return fields


# ---- timestamps -----------------------------------------------------------------------


def test_year_one_event_time_round_trips_and_the_namespace_stays_readable(stack: Stack) -> None:
    """Was: Remember INTERNAL with the row committed, then List, Recall and Delete in
    that namespace INTERNAL until the row was gone."""
    ns = fresh()
    first_instant = ts(MIN_SECONDS)
    stored = remember(stack, ns, "the founding of the lighthouse", event_time=first_instant)
    assert stored.event_time == first_instant
    got = stack.store.GetMemory(store_pb2.GetMemoryRequest(namespace=ns, id=stored.id)).memory
    assert got.event_time == first_instant
    listed = stack.store.ListMemories(store_pb2.ListMemoriesRequest(namespace=ns)).memories
    assert [m.event_time for m in listed] == [first_instant]
    recalled = stack.recall("lighthouse", namespace=ns).results
    assert [r.memory.event_time for r in recalled] == [first_instant]
    deleted = stack.store.DeleteMemory(
        store_pb2.DeleteMemoryRequest(namespace=ns, id=stored.id, reason="test")
    ).memory
    assert deleted.deleted and deleted.event_time == first_instant


OUT_OF_RANGE: list[tuple[str, timestamp_pb2.Timestamp]] = [
    ("one second before year 1", ts(MIN_SECONDS - 1)),
    ("one second after year 9999", ts(MAX_SECONDS + 1)),
    ("2**62 seconds", ts(2**62)),
    ("-2**62 seconds", ts(-(2**62))),
    ("negative nanos", ts(0, -1)),
    ("nanos of 2e9", ts(0, 2_000_000_000)),
    ("nanos of 1e9", ts(0, 1_000_000_000)),
]
OUT_OF_RANGE_IDS = [name for name, _ in OUT_OF_RANGE]


@pytest.mark.parametrize(("name", "moment"), OUT_OF_RANGE, ids=OUT_OF_RANGE_IDS)
def test_remember_rejects_an_event_time_out_of_range(
    stack: Stack, db: Path, name: str, moment: timestamp_pb2.Timestamp
) -> None:
    ns = fresh()
    before = table_counts(db)
    fields = invalid_fields(lambda: remember(stack, ns, "when was this", event_time=moment))
    assert fields == ["event_time"]
    assert table_counts(db) == before


@pytest.mark.parametrize(("name", "moment"), OUT_OF_RANGE, ids=OUT_OF_RANGE_IDS)
def test_import_fails_only_the_item_with_an_event_time_out_of_range(
    stack: Stack, db: Path, name: str, moment: timestamp_pb2.Timestamp
) -> None:
    ns = fresh()
    before = table_counts(db)
    response = stack.store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    namespace=ns,
                    items=[
                        store_pb2.ImportItem(content="a fine item"),
                        store_pb2.ImportItem(content="a poisoned item", event_time=moment),
                    ],
                )
            ]
        )
    )
    assert [r.status for r in response.results] == [
        store_pb2.IMPORT_STATUS_CREATED,
        store_pb2.IMPORT_STATUS_FAILED,
    ]
    assert response.results[1].error.startswith("items[1].event_time:")
    assert table_counts(db)["memories"] == before["memories"] + 1


@pytest.mark.parametrize(("name", "moment"), OUT_OF_RANGE, ids=OUT_OF_RANGE_IDS)
@pytest.mark.parametrize("bound", ["since", "until"])
def test_filters_reject_since_and_until_out_of_range(
    stack: Stack, db: Path, name: str, moment: timestamp_pb2.Timestamp, bound: str
) -> None:
    ns = fresh()
    remember(stack, ns, "a memory to filter")
    before = table_counts(db)
    memory_filter = memory_pb2.MemoryFilter(**{bound: moment})
    calls: list[Callable[[], Any]] = [
        lambda: stack.store.ListMemories(
            store_pb2.ListMemoriesRequest(namespace=ns, filter=memory_filter)
        ),
        lambda: stack.store.ForgetMemories(
            store_pb2.ForgetMemoriesRequest(
                namespace=ns,
                filter=memory_filter,
                mode=store_pb2.FORGET_MODE_EXECUTE,
                reason="test",
            )
        ),
        lambda: stack.search.Recall(
            search_pb2.RecallRequest(namespace=ns, query="memory", filter=memory_filter)
        ),
    ]
    for call in calls:
        assert invalid_fields(call) == [f"filter.{bound}"]
    assert table_counts(db) == before


# Every instant Timestamp can hold.
_nanos = st.integers(min_value=0, max_value=999_999_999)
_seconds = st.integers(min_value=MIN_SECONDS, max_value=MAX_SECONDS)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(seconds=_seconds, nanos=_nanos)
@example(seconds=MIN_SECONDS, nanos=0)
@example(seconds=MAX_SECONDS, nanos=999_999_999)
@example(seconds=-1, nanos=999_999_999)
@example(seconds=0, nanos=1)
@example(seconds=-62_104_060_801, nanos=0)  # 0001-12-31T23:59:59Z
@example(seconds=-59_042_995_201, nanos=500_000_000)  # 0098-12-31T23:59:59.5Z
@example(seconds=-30_641_760_001, nanos=1_001)  # 0998-12-31T23:59:59Z
def test_any_valid_timestamp_survives_remember_get_list_and_recall(
    stack: Stack, seconds: int, nanos: int
) -> None:
    """Exact to the nanosecond (was: nanos finer than a microsecond were cut)."""
    ns = fresh()
    given_time = ts(seconds, nanos)
    stored = remember(stack, ns, "an instant worth keeping", event_time=given_time)
    assert stored.event_time == given_time
    got = stack.store.GetMemory(store_pb2.GetMemoryRequest(namespace=ns, id=stored.id)).memory
    assert got.event_time == given_time
    listed = stack.store.ListMemories(store_pb2.ListMemoriesRequest(namespace=ns)).memories
    assert [m.event_time for m in listed] == [given_time]
    recalled = stack.recall("instant", namespace=ns).results
    assert [r.memory.event_time for r in recalled] == [given_time]


def test_since_and_until_compare_to_the_nanosecond(stack: Stack) -> None:
    """Was: a bound's nanos were cut to the microsecond, so `since` one
    nanosecond after a memory's create_time still listed it."""
    ns = fresh()
    memory = remember(stack, ns, "an exact instant")
    created = memory.create_time
    just_after = ts(created.seconds, created.nanos + 1)

    def listed(**bounds: timestamp_pb2.Timestamp) -> list[str]:
        request = store_pb2.ListMemoriesRequest(
            namespace=ns, filter=memory_pb2.MemoryFilter(**bounds)
        )
        return [m.id for m in stack.store.ListMemories(request).memories]

    assert listed(since=created) == [memory.id]
    assert listed(since=just_after) == []
    assert listed(until=just_after) == [memory.id]
    assert listed(until=created) == []


def test_since_and_until_at_the_ends_of_the_range_are_accepted(stack: Stack) -> None:
    ns = fresh()
    memory = remember(stack, ns, "inside every range")
    whole_range = memory_pb2.MemoryFilter(since=ts(MIN_SECONDS), until=ts(MAX_SECONDS, 999_999_999))
    listed = stack.store.ListMemories(
        store_pb2.ListMemoriesRequest(namespace=ns, filter=whole_range)
    ).memories
    assert [m.id for m in listed] == [memory.id]
    recalled = stack.search.Recall(
        search_pb2.RecallRequest(namespace=ns, query="range", filter=whole_range)
    ).results
    assert [r.memory.id for r in recalled] == [memory.id]


# ---- request bytes that do not parse ---------------------------------------------------


def _string_field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


# Field 1 is `namespace` (a string) in every request used here.
MALFORMED: list[tuple[str, bytes]] = [
    ("invalid UTF-8 in a string field", _string_field(1, b"caf\xe9 \xff")),
    ("an overlong NUL in a string field", _string_field(1, b"a\xc0\x80b")),
    ("a truncated message", bytes([1 << 3 | 2, 20]) + b"only a few"),
    (
        "groups nested 200 deep",
        bytes([15 << 3 | 3]) * 200 + bytes([15 << 3 | 4]) * 200,
    ),
]


@pytest.mark.parametrize(("name", "payload"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_request_bytes_that_do_not_parse_are_invalid_argument(
    stack: Stack, db: Path, name: str, payload: bytes
) -> None:
    """Was: INTERNAL from grpc's deserialiser."""
    before = table_counts(db)
    store_channel = grpc.insecure_channel(f"127.0.0.1:{stack.store_thread.app.port}")
    search_channel = grpc.insecure_channel(f"127.0.0.1:{stack.search_thread.app.port}")
    try:
        calls: list[Callable[[], Any]] = [
            lambda: store_channel.unary_unary(f"{STORE}/Remember")(payload, timeout=10),
            lambda: store_channel.unary_unary(f"{STORE}/ListMemories")(payload, timeout=10),
            lambda: search_channel.unary_unary("/engram.search.v1.SearchService/Recall")(
                payload, timeout=10
            ),
            # A good batch, then a bad one: the import stops before writing anything.
            lambda: store_channel.stream_unary(f"{STORE}/ImportMemories")(
                iter(
                    [
                        store_pb2.ImportMemoriesRequest(
                            items=[store_pb2.ImportItem(content=f"good {uuid.uuid4()}")]
                        ).SerializeToString(),
                        payload,
                    ]
                ),
                timeout=10,
            ),
        ]
        for call in calls:
            code, reason, fields = error_of(call)
            assert (code, reason, fields) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "MALFORMED_REQUEST",
                [],
            )
    finally:
        store_channel.close()
        search_channel.close()
    assert table_counts(db) == before


# ---- repeated filter fields are capped --------------------------------------------------


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("tags", [f"t{i}" for i in range(33)]),
        ("tags", [f"t{i}" for i in range(1000)]),  # was INTERNAL: expression tree too large
        ("types", ["fact"] * 17),
        ("types", ["fact"] * 5000),
    ],
    ids=["33 tags", "1000 tags", "17 types", "5000 types"],
)
def test_filter_lists_over_their_cap_are_invalid_argument(
    stack: Stack, db: Path, field: str, values: list[str]
) -> None:
    ns = fresh()
    remember(stack, ns, "a memory to filter", tags=["t0"])
    before = table_counts(db)
    memory_filter = memory_pb2.MemoryFilter(**{field: values})
    calls: list[Callable[[], Any]] = [
        lambda: stack.store.ListMemories(
            store_pb2.ListMemoriesRequest(namespace=ns, filter=memory_filter)
        ),
        lambda: stack.store.ForgetMemories(
            store_pb2.ForgetMemoriesRequest(namespace=ns, filter=memory_filter)
        ),
        lambda: stack.search.Recall(
            search_pb2.RecallRequest(namespace=ns, query="memory", filter=memory_filter)
        ),
    ]
    for call in calls:
        assert invalid_fields(call) == [f"filter.{field}"]
    assert table_counts(db) == before


def test_a_filter_at_its_caps_is_accepted(stack: Stack) -> None:
    ns = fresh()
    tags = [f"t{i}" for i in range(32)]
    memory = remember(stack, ns, "a memory with every tag", tags=tags)
    memory_filter = memory_pb2.MemoryFilter(tags=tags, types=["fact"] * 16)
    listed = stack.store.ListMemories(
        store_pb2.ListMemoriesRequest(namespace=ns, filter=memory_filter)
    ).memories
    assert [m.id for m in listed] == [memory.id]
    recalled = stack.search.Recall(
        search_pb2.RecallRequest(namespace=ns, query="memory", filter=memory_filter)
    ).results
    assert [r.memory.id for r in recalled] == [memory.id]


# ---- forged page tokens -----------------------------------------------------------------


@pytest.mark.parametrize(
    "position",
    [[10**30], [-(10**30)], [2**63], [1.5], [True], [None], [{"a": 1}], ["x" * 10_000]],
    ids=["10**30", "-10**30", "2**63", "float", "bool", "null", "object", "long string"],
)
def test_forged_history_page_tokens_are_invalid_argument(stack: Stack, position: list[Any]) -> None:
    """Was (for 10**30): INTERNAL, SQLite cannot bind the integer."""
    ns = fresh()
    memory = remember(stack, ns, "a memory with history")
    token = encode_page_token("history", f"{ns}\x00{memory.id}", position)
    fields = invalid_fields(
        lambda: stack.store.ListMemoryHistory(
            store_pb2.ListMemoryHistoryRequest(namespace=ns, memory_id=memory.id, page_token=token)
        )
    )
    assert fields == ["page_token"]


@pytest.mark.parametrize(
    "position",
    [
        ["2026-01-01T00:00:00.000000Z", 10**30],
        [10**30, "id"],
        ["x" * 10_000, "id"],
        ["yesterday", "id"],
    ],
    ids=["huge id", "huge time", "long string", "not a time"],
)
def test_forged_listing_page_tokens_are_invalid_argument(stack: Stack, position: list[Any]) -> None:
    ns = fresh()
    remember(stack, ns, "a memory to list")
    token = encode_page_token("memories", f"{ns}\x00{MemoryFilterSpec().fingerprint()}", position)
    fields = invalid_fields(
        lambda: stack.store.ListMemories(
            store_pb2.ListMemoriesRequest(namespace=ns, page_token=token)
        )
    )
    assert fields == ["page_token"]


def test_a_listing_token_from_before_nanoseconds_continues_where_its_page_ended(
    stack: Stack,
) -> None:
    """Tokens once held six fraction digits; compared as text with today's nine
    they sorted after their own row, which came back on the next page."""
    ns = fresh()
    for content in ("first written", "second written", "third written"):
        remember(stack, ns, content)
    listed = stack.store.ListMemories(store_pb2.ListMemoriesRequest(namespace=ns)).memories
    newest = listed[0]
    stored = newest.create_time.ToDatetime().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    scope = f"{ns}\x00{MemoryFilterSpec().fingerprint()}"
    old_token = encode_page_token("memories", scope, [stored, newest.id])
    rest = stack.store.ListMemories(
        store_pb2.ListMemoriesRequest(namespace=ns, page_token=old_token)
    ).memories
    assert [m.id for m in rest] == [m.id for m in listed[1:]]


@pytest.mark.parametrize(
    "token",
    ["A" * 100_000, base64.urlsafe_b64encode(b"[" * 1500).decode()],
    ids=["100 000 characters", "JSON nested 1500 deep"],
)
def test_oversized_and_deeply_nested_page_tokens_are_invalid_argument(
    stack: Stack, token: str
) -> None:
    fields = invalid_fields(
        lambda: stack.store.ListMemories(store_pb2.ListMemoriesRequest(page_token=token))
    )
    assert fields == ["page_token"]


# ---- ids are capped and nothing unbounded is echoed -------------------------------------

HUGE = "i" * (1024 * 1024)
LONG = "i" * 129


def _id_calls(ns: str, bad: str, real: str) -> list[tuple[str, Callable[[Stack], Any]]]:
    return [
        ("id", lambda s: s.store.GetMemory(store_pb2.GetMemoryRequest(namespace=ns, id=bad))),
        (
            "id",
            lambda s: s.store.DeleteMemory(
                store_pb2.DeleteMemoryRequest(namespace=ns, id=bad, reason="r")
            ),
        ),
        (
            "id",
            lambda s: s.store.RecoverMemory(
                store_pb2.RecoverMemoryRequest(namespace=ns, id=bad, reason="r")
            ),
        ),
        (
            "memory_id",
            lambda s: s.store.ListMemoryHistory(
                store_pb2.ListMemoryHistoryRequest(namespace=ns, memory_id=bad)
            ),
        ),
        (
            "patches[1].id",
            lambda s: s.store.ModifyMemories(
                store_pb2.ModifyMemoriesRequest(
                    namespace=ns,
                    reason="r",
                    patches=[
                        store_pb2.MemoryPatch(id=real, who="x"),
                        store_pb2.MemoryPatch(id=bad, who="x"),
                    ],
                )
            ),
        ),
        (
            "ids[1]",
            lambda s: s.store.ForgetMemories(
                store_pb2.ForgetMemoriesRequest(
                    namespace=ns, ids=[real, bad], mode=store_pb2.FORGET_MODE_EXECUTE, reason="r"
                )
            ),
        ),
        (
            "memory_ids[1]",
            lambda s: s.access.RecordAccess(
                access_pb2.RecordAccessRequest(namespace=ns, memory_ids=[real, bad])
            ),
        ),
    ]


@pytest.mark.parametrize("bad", [LONG, HUGE], ids=["129 chars", "1 MiB"])
def test_ids_over_128_characters_are_invalid_argument(stack: Stack, db: Path, bad: str) -> None:
    """Was (1 MiB): the id echoed in NOT_FOUND overflowed the client's metadata
    limit, and the caller saw RESOURCE_EXHAUSTED."""
    ns = fresh()
    real = remember(stack, ns, "a real memory").id
    before = table_counts(db)
    for field, call in _id_calls(ns, bad, real):
        code, reason, fields = error_of(lambda call=call: call(stack))
        assert (code, reason, fields) == (*INVALID, [field])
    assert table_counts(db) == before


def test_a_huge_unknown_type_is_not_echoed_whole(stack: Stack, db: Path) -> None:
    """Was: the 1 MiB type came back in the message, and the caller saw
    RESOURCE_EXHAUSTED."""
    ns = fresh()
    before = table_counts(db)
    with pytest.raises(grpc.RpcError) as caught:
        remember(stack, ns, "typed", type=HUGE)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert len(caught.value.details()) < 2048  # type: ignore[attr-defined]
    listing = memory_pb2.MemoryFilter(types=[HUGE])
    fields = invalid_fields(
        lambda: stack.store.ListMemories(
            store_pb2.ListMemoriesRequest(namespace=ns, filter=listing)
        )
    )
    assert fields == ["filter.types[0]"]
    assert table_counts(db) == before


# ---- content that shows nothing ------------------------------------------------------------

INVISIBLE = [
    "\u200b",
    "\u200b\u200b\u200b",
    " \u200b \u2060 \ufeff ",
    "\u200d\u200c\u200e\u200f",
    "critical: [a]: \u200b",
]


@pytest.mark.parametrize("content", INVISIBLE, ids=[repr(c) for c in INVISIBLE])
def test_content_of_only_format_characters_is_empty(stack: Stack, db: Path, content: str) -> None:
    ns = fresh()
    real = remember(stack, ns, "visible words").id
    before = table_counts(db)
    assert invalid_fields(lambda: remember(stack, ns, content)) == ["content"]
    imported = stack.store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    namespace=ns, items=[store_pb2.ImportItem(content=content)]
                )
            ]
        )
    )
    assert [r.status for r in imported.results] == [store_pb2.IMPORT_STATUS_FAILED]
    if not content.startswith("critical:"):  # Modify keeps a prefix as text: not empty
        fields = invalid_fields(
            lambda: stack.store.ModifyMemories(
                store_pb2.ModifyMemoriesRequest(
                    namespace=ns,
                    reason="r",
                    patches=[store_pb2.MemoryPatch(id=real, content=content)],
                )
            )
        )
        assert fields == ["patches[0].content"]
    assert table_counts(db) == before


def test_content_with_format_characters_and_words_is_kept_as_given(stack: Stack) -> None:
    ns = fresh()
    stored = remember(stack, ns, "zero\u200bwidth joiner")
    assert stored.content == "zero\u200bwidth joiner"


def test_a_tag_of_only_format_characters_is_empty(stack: Stack) -> None:
    assert invalid_fields(lambda: remember(stack, fresh(), "ok", tags=["fine", "\u200b"])) == [
        "tags[1]"
    ]


# ---- rows an older release already wrote ------------------------------------------------


def test_a_row_with_an_unpadded_year_from_an_older_release_is_readable(
    recall_stack: Callable[..., Stack], db_path: Path
) -> None:
    """Older releases stored year 1 as `1-01-01T...`; such a row must not keep
    its namespace failing after the upgrade."""
    stack = recall_stack({"providers.embedding.kind": "none"}, search=False)
    memory = remember(stack, "legacy", "remembered by an older release")
    stack.store_thread.stop()
    backend_db.execute(
        db_path,
        "UPDATE memories SET event_time = '1-01-01T00:00:00.000000Z' WHERE id = ?",
        memory.id,
    )
    stack = recall_stack({"providers.embedding.kind": "none"}, search=True)
    listed = stack.store.ListMemories(store_pb2.ListMemoriesRequest(namespace="legacy")).memories
    assert [m.event_time for m in listed] == [ts(MIN_SECONDS)]
    recalled = stack.recall("older", namespace="legacy").results
    assert [r.memory.event_time for r in recalled] == [ts(MIN_SECONDS)]
    stack.store.DeleteMemory(
        store_pb2.DeleteMemoryRequest(namespace="legacy", id=memory.id, reason="cleanup")
    )


# ---- the NUL character ----------------------------------------------------------------


def test_a_nul_character_in_any_text_field_is_invalid_and_writes_nothing(
    stack: Stack, db: Path
) -> None:
    """Was: stored on SQLite, INTERNAL on Postgres (its text type cannot hold U+0000).
    Now one rule on both backends: every field holding it is named, nothing written."""
    ns = fresh()
    real = remember(stack, ns, "a memory to patch").id
    before = table_counts(db)
    assert invalid_fields(
        lambda: remember(stack, ns, "a \x00 b", who="x\x00", tags=["fine", "t\x00"])
    ) == ["content", "tags[1]", "who"]
    # A good batch, then one holding a NUL: the import stops, nothing is written.
    with pytest.raises(grpc.RpcError) as caught:
        stack.store.ImportMemories(
            iter(
                [
                    store_pb2.ImportMemoriesRequest(
                        namespace=ns, items=[store_pb2.ImportItem(content="good words")]
                    ),
                    store_pb2.ImportMemoriesRequest(
                        namespace=ns,
                        items=[
                            store_pb2.ImportItem(content="fine"),
                            store_pb2.ImportItem(content="bad", why="because\x00"),
                        ],
                    ),
                ]
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert invalid_fields(
        lambda: stack.store.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(
                namespace=ns,
                reason="r",
                patches=[
                    store_pb2.MemoryPatch(
                        id=real, content="new\x00", tags=store_pb2.TagList(values=["\x00"])
                    )
                ],
            )
        )
    ) == ["patches[0].content", "patches[0].tags.values[0]"]
    assert invalid_fields(
        lambda: stack.store.AppendTurn(
            store_pb2.AppendTurnRequest(
                namespace=ns,
                session_id="s-1",
                role=store_pb2.TURN_ROLE_USER,
                content="said \x00 this",
            )
        )
    ) == ["content"]
    assert invalid_fields(
        lambda: stack.search.Recall(search_pb2.RecallRequest(namespace=ns, query="a\x00b"))
    ) == ["query"]
    assert table_counts(db) == before
    assert [
        m.id for m in stack.store.ListMemories(store_pb2.ListMemoriesRequest(namespace=ns)).memories
    ] == [real]
