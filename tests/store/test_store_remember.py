from pathlib import Path

import pytest
from google.protobuf import timestamp_pb2

from engram.store.v1 import store_pb2
from store_helpers import fts_ids, remember, rows, scalar, table_counts


def test_remember_returns_the_stored_memory(store, db_path: Path) -> None:
    response = remember(
        store,
        "  The build uses   Bazel.  ",
        who="agent-1",
        why="noticed",
        source_type="chat",
        source_id="m-7",
    )
    memory = response.memory
    assert not response.deduplicated
    assert memory.id and memory.namespace == "default"
    assert memory.content == "The build uses Bazel."
    assert memory.type == "fact"
    assert memory.importance == pytest.approx(0.8)
    assert (memory.who, memory.why, memory.source_type, memory.source_id) == (
        "agent-1",
        "noticed",
        "chat",
        "m-7",
    )
    assert memory.version == 1 and not memory.deleted
    assert memory.create_time.seconds > 0 and memory.event_time == memory.create_time
    assert store.GetMemory(store_pb2.GetMemoryRequest(id=memory.id)).memory == memory


def test_remember_commits_row_fts_history_and_jobs_before_replying(store, db_path: Path) -> None:
    memory = remember(store, "Kafka retention is seven days").memory
    assert scalar(db_path, "SELECT count(*) FROM memories WHERE id = ?", memory.id) == 1
    assert fts_ids(db_path, "kafka") == {memory.id}
    history = rows(
        db_path, "SELECT event, new_content FROM memory_history WHERE memory_id = ?", memory.id
    )
    assert [tuple(h) for h in history] == [("created", "Kafka retention is seven days")]
    jobs = rows(
        db_path,
        "SELECT job_type, status FROM memory_jobs WHERE memory_id = ? ORDER BY job_type",
        memory.id,
    )
    # No extract job: the pipeline is off by default (the next test turns it on).
    assert [tuple(j) for j in jobs] == [("embed", "pending")]


def test_duplicate_content_returns_the_existing_memory_and_writes_nothing(
    store, db_path: Path
) -> None:
    first = remember(store, "User prefers dark mode.").memory
    before = table_counts(db_path)
    again = remember(store, "  user PREFERS dark   mode!! ")
    assert again.deduplicated
    assert again.memory.id == first.id and again.memory.content == "User prefers dark mode."
    assert table_counts(db_path) == before


def test_other_namespaces_never_dedupe(store) -> None:
    a = remember(store, "shared sentence", namespace="team-a").memory
    b = remember(store, "shared sentence", namespace="team-b")
    assert not b.deduplicated and b.memory.id != a.id and b.memory.namespace == "team-b"


def test_critical_prefix_pins_with_full_importance(store) -> None:
    memory = remember(store, "critical: never expose tokens", importance=0.2).memory
    assert memory.pinned and memory.importance == 1.0
    assert memory.content == "never expose tokens"


def test_tag_prefix_sets_tags_and_merges_with_given_tags(store) -> None:
    memory = remember(store, "[Project, auth]: rotate keys monthly", tags=["ops", "auth"]).memory
    assert list(memory.tags) == ["project", "auth", "ops"]
    assert memory.content == "rotate keys monthly"


def test_critical_and_tag_prefixes_combine(store) -> None:
    memory = remember(store, "critical: [project,auth]: never expose tokens").memory
    assert memory.pinned and list(memory.tags) == ["project", "auth"]
    assert memory.content == "never expose tokens"


def test_pinned_field_sets_full_importance(store) -> None:
    memory = remember(store, "pin me", pinned=True, importance=0.3).memory
    assert memory.pinned and memory.importance == 1.0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("Alice prefers tea over coffee", "preference"),
        ("Bob likes long walks", "preference"),
        ("The team wants faster CI", "preference"),
        ("We decided to ship on Friday", "decision"),
        ("Everyone agreed on the API shape", "decision"),
        ("We will use PostgreSQL", "decision"),
        ("Never commit secrets", "rule"),
        ("Always run the linter", "rule"),
        ("Migrations must be reversible", "rule"),
        ("I learned that WAL helps readers", "learning"),
        ("We discovered a faster path", "learning"),
        ("There is a bug in the parser", "issue"),
        ("The deploy script is broken", "issue"),
        ("The cache has a problem", "issue"),
        ("The sky is blue", "fact"),
        ("Preferences page exists", "fact"),  # whole words only
    ],
)
def test_type_is_inferred_from_keywords(store, content: str, expected: str) -> None:
    assert remember(store, content).memory.type == expected


def test_explicit_type_and_importance_win(store) -> None:
    memory = remember(store, "Alice prefers tea", type="semantic", importance=0.25).memory
    assert memory.type == "semantic" and memory.importance == pytest.approx(0.25)


def test_importance_zero_is_kept_not_defaulted(store) -> None:
    assert remember(store, "unimportant", importance=0.0).memory.importance == 0.0


def test_event_time_is_stored(store) -> None:
    when = timestamp_pb2.Timestamp(seconds=1_600_000_000, nanos=123_000)
    memory = remember(store, "happened long ago", event_time=when).memory
    assert memory.event_time == when
    assert memory.create_time != when


def test_unicode_is_stored_in_nfc(store) -> None:
    assert remember(store, "Cafe\u0301 opens at nine").memory.content == "Caf\u00e9 opens at nine"
