"""The queries behind ListMemories and ForgetMemories (services/store/memories.py)
on both backends, with the dialect the read pool passes: filters over the JSON
tags and categories, and forgetting by keyword terms (FTS5 MATCH on SQLite,
content_tsv on Postgres). Same assertions on a migrated SQLite file and a
migrated PostgreSQL database (pattern: test_pg_repository.py)."""

from __future__ import annotations

from typing import Any

from pg_rows import T0, dialect, insert, memory

from services.common.fts import keyword_terms, quoted
from services.common.memory_filter import MemoryFilterSpec
from services.storage.store import repository as repo


def _insert(conn: Any, memory_id: str, content: str, at: str, **overrides: Any) -> None:
    fields = {"content_hash": f"h-{memory_id}", "created_at": at, "event_time": at, **overrides}
    insert(conn, memory(memory_id, content, **fields))


def _at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}.000000000Z"


def test_listing_filters_on_tags_and_categories(conn: Any) -> None:
    _insert(conn, "a", "alpha", _at(1), tags='["work", "urgent"]', categories='["plan"]')
    _insert(conn, "b", "beta", _at(2), tags='["work"]')
    _insert(conn, "c", "gamma", _at(3), tags='["home"]', categories='["plan"]')
    _insert(conn, "d", "delta", _at(4), tags='["work"]', pinned=1)
    repo.update_memory(conn, "d", {"is_deleted": 1, "deleted_at": _at(5)})

    def listed(spec: MemoryFilterSpec) -> list[str]:
        query = repo.list_memories_query("ns", spec, None, 10, dialect=dialect(conn))
        return [r["id"] for r in repo.fetch_all(conn, query)]

    assert listed(MemoryFilterSpec(tags=("work",))) == ["b", "a"]
    assert listed(MemoryFilterSpec(tags=("work", "urgent"))) == ["a"]
    assert listed(MemoryFilterSpec(categories=("plan",))) == ["c", "a"]
    assert listed(MemoryFilterSpec(tags=("nothing",))) == []
    tombstones = repo.list_tombstones_query(
        "ns", MemoryFilterSpec(tags=("work",)), T0, None, 10, dialect=dialect(conn)
    )
    assert [r["id"] for r in repo.fetch_all(conn, tombstones)] == ["d"]


def _candidates(conn: Any, query: str, **kwargs: Any) -> list[str]:
    terms = [quoted(term) for term in keyword_terms(query)]
    sql = repo.forget_candidates_query(
        "ns",
        kwargs.get("ids", ()),
        terms,
        kwargs.get("spec", MemoryFilterSpec()),
        kwargs.get("include_pinned", False),
        10,
        dialect=dialect(conn),
    )
    return [r["id"] for r in repo.fetch_all(conn, sql)]


def test_forgetting_by_terms_ranks_memories_matching_more_terms_first(conn: Any) -> None:
    _insert(conn, "one", "The cat sat on the mat", _at(1))
    _insert(conn, "both", "My cat loves the garden", _at(2))
    _insert(conn, "other", "Dogs run in the garden", _at(3))
    _insert(conn, "none", "Nothing relevant here", _at(4))
    _insert(conn, "pinned", "A pinned cat", _at(5), pinned=1)
    _insert(conn, "gone", "A deleted cat", _at(6))
    _insert(conn, "elsewhere", "A cat elsewhere", _at(7), namespace="other")
    repo.update_memory(conn, "gone", {"is_deleted": 1, "deleted_at": _at(8)})

    assert _candidates(conn, "cat garden") == ["both", "other", "one"]
    assert _candidates(conn, "cats") == ["both", "one"]  # stemmed alike
    assert _candidates(conn, "cat", include_pinned=True) == ["pinned", "both", "one"]
    assert _candidates(conn, "cat", ids=("one", "other")) == ["one"]
    assert _candidates(conn, '"garden"') == ["other", "both"]  # quotes are only punctuation
    assert _candidates(conn, "sat on the mat") == ["one"]
