"""The range, link and mention reads start where they are selective (an index
range, the seed rowids, the entity's mentions), never with a walk over the
namespace's memories: at 100k memories such a walk cost 50 ms per Recall
(bench/README.md, "Intent routing at 100k"). Checked on the store's own
migrated file with the production driver; without ANALYZE statistics SQLite
plans the same on an empty file as on a full one (as many seeds as Recall
sends: with two, the planner starts from them anyway)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from admin_helpers import AdminStore, admin_store
from services.common.memory_filter import MemoryFilterSpec
from services.storage.search import graph_queries, queries
from services.storage.store import entities_sql

pytestmark = pytest.mark.sqlite_only(
    "SQLite's EXPLAIN QUERY PLAN (Postgres plans: tests/postgres/test_pg_vectors.py, test_pg_text.py)"
)

AT = "2026-01-01T00:00:00.000000000Z"
MAY = ("2023-05-01T00:00:00.000000000Z", "2023-06-01T00:00:00.000000000Z")
FILTERED = MemoryFilterSpec(who="ana", types=("fact",))
SEEDS = list(range(1, 11))  # what Recall's link routes start from (CAUSAL_SEEDS per channel)
ENTITIES = [f"e{i}" for i in range(10)]


@pytest.fixture
def st(start_store_server: Callable[..., Any], make_config: Callable[..., Any]) -> AdminStore:
    return admin_store(start_store_server, make_config)


def plan(st: AdminStore, query: tuple[str, list[Any]]) -> list[str]:
    sql, params = query
    return [row[-1] for row in st.rows(f"EXPLAIN QUERY PLAN {sql}", *params)]


@pytest.mark.parametrize("spec", [MemoryFilterSpec(), FILTERED], ids=["unfiltered", "filtered"])
@pytest.mark.parametrize(
    ("name", "build", "first_step"),
    [
        (
            "range",
            lambda spec: queries.in_time_windows("ns", [MAY], spec, 100),
            "SEARCH m USING INDEX memories_event_time (namespace=? AND event_time>? AND event_time<?)",
        ),
        (
            "closed range",
            lambda spec: queries.closed_valid_in_windows(
                "ns", MemoryFilterSpec(who=spec.who, valid_during=(MAY,)), 100
            ),
            "SEARCH m USING INDEX memories_valid_until",
        ),
        (
            "links",
            lambda spec: graph_queries.linked_memories("ns", SEEDS, ("causal",), spec, AT),
            "SEARCH f USING INTEGER PRIMARY KEY (rowid=?)",
        ),
        (
            "mentions",
            lambda spec: graph_queries.mentioning_memories("ns", ENTITIES, spec, 100),
            "SEARCH mm USING INDEX memory_entity_mentions_entity (entity_id=?)",
        ),
        (
            "entity facts",
            lambda spec: entities_sql.facts("ns", "e1", 20),
            "SEARCH mm USING INDEX memory_entity_mentions_entity (entity_id=?)",
        ),
    ],
)
def test_reads_start_where_they_are_selective(
    st: AdminStore,
    name: str,
    build: Callable[[MemoryFilterSpec], tuple[str, list[Any]]],
    first_step: str,
    spec: MemoryFilterSpec,
) -> None:
    steps = [s for s in plan(st, build(spec)) if s.startswith(("SEARCH", "SCAN"))]
    assert steps[0].startswith(first_step), (name, steps)
    walks = [s for s in steps if "memories_namespace_order" in s or "memories_listing" in s]
    assert not walks and not any(s.startswith("SCAN m") for s in steps), (name, steps)
