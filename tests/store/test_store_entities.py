"""Entity types and aliases (seed 003 "entities") written through
CompleteExtractJob, read back with GetEntity and ListEntities on a real store:
a name resolves by canonical name or alias within a namespace, new aliases
merge, a specific type replaces `thing`, facts are the live memories that
mention the entity, neighbours come with relation and strength; bad input is
INVALID_ARGUMENT naming each field, another namespace's entity NOT_FOUND."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from extract_write_helpers import ADD, BASE, complete, counts, extract_job, proposal
from grpc_helpers import error_of
from recall_helpers import Stack

GRAPH = {"memory.pipelineV2.graphEnabled": True}


@pytest.fixture
def stack(recall_stack: Callable[..., Stack]) -> Stack:
    return recall_stack({**BASE, **GRAPH}, search=False)


def named(name: str, entity_type: str = "", *aliases: str) -> jq.NamedEntity:
    return jq.NamedEntity(name=name, entity_type=entity_type, aliases=aliases)


def triple(source: str, relationship: str, target: str, confidence: float = 0.9) -> jq.EntityTriple:
    return jq.EntityTriple(
        source=source, relationship=relationship, target=target, confidence=confidence
    )


def extract(
    stack: Stack,
    memory: Any,
    facts: list[str],
    names: list[jq.NamedEntity],
    triples: list[jq.EntityTriple] | None = None,
) -> list[str]:
    """Complete `memory`'s extract job; the ids of the facts written."""
    response = complete(
        stack,
        extract_job(stack, memory),
        [proposal(ADD, f) for f in facts],
        entities=triples or [],
        named_entities=names,
    )
    assert response.outcome == jq.LEASE_OUTCOME_OK and response.graph_error == ""
    return [r.memory_id for r in response.results]


def get(stack: Stack, **fields: Any) -> store_pb2.GetEntityResponse:
    return stack.store.GetEntity(store_pb2.GetEntityRequest(**fields))


def listed(stack: Stack, **fields: Any) -> list[str]:
    return [
        e.name for e in stack.store.ListEntities(store_pb2.ListEntitiesRequest(**fields)).entities
    ]


def test_names_resolve_by_canonical_name_or_alias_and_aliases_merge(stack: Stack) -> None:
    first = stack.remember("Ana Silva lives in Lisbon and works at Acme Corp")
    lisbon_fact, acme_fact = extract(
        stack,
        first,
        ["Ana Silva lives in Lisbon", "Ana works at Acme Corp"],
        [named("Ana Silva", "person", "Ana"), named("Acme Corp", "organization", "Acme")],
        [triple("Ana Silva", "lives in", "Lisbon"), triple("Ana", "works_at", "Acme Corp")],
    )
    found = get(stack, name="  ana ")  # an alias, case and spacing aside
    entity = found.entity
    assert (entity.name, entity.entity_type, list(entity.aliases)) == (
        "Ana Silva",
        "person",
        ["Ana"],
    )
    # the source memory and both facts name her (one by her alias)
    assert entity.mention_count == 3
    assert {m.id for m in found.facts} == {first.id, lisbon_fact, acme_fact}
    neighbours = [(n.entity.name, n.relation_type, n.outgoing, n.strength) for n in found.neighbors]
    assert sorted(neighbours) == [
        ("Acme Corp", "works_at", True, 1.0),
        ("Lisbon", "lives_in", True, 1.0),
    ]
    [acme] = [n.entity for n in found.neighbors if n.entity.name == "Acme Corp"]
    assert (acme.entity_type, list(acme.aliases)) == ("organization", ["Acme"])
    # Lisbon came from a triple only: a `thing` until someone says what it is
    assert get(stack, name="Lisbon").entity.entity_type == "thing"

    second = stack.remember("Ana from Acme visited Lisbon")
    extract(
        stack,
        second,
        [],
        [named("Ana", "person", "Ana S.", "Ana Silva"), named("Acme"), named("Lisbon", "place")],
    )
    again = get(stack, id=entity.id)
    assert list(again.entity.aliases) == ["Ana", "Ana S."]
    assert again.entity.mention_count == 4
    assert get(stack, name="ana s.").entity.id == entity.id
    assert get(stack, name="acme").entity.entity_type == "organization"  # not back to thing
    assert get(stack, name="lisbon").entity.entity_type == "place"  # thing became place
    # seen from Lisbon the relation comes in
    [incoming] = get(stack, name="Lisbon").neighbors
    assert (incoming.entity.name, incoming.relation_type, incoming.outgoing) == (
        "Ana Silva",
        "lives_in",
        False,
    )


def test_an_alias_never_merges_two_entities(stack: Stack) -> None:
    memory = stack.remember("Sam Lee and Sam Park met")
    extract(stack, memory, [], [named("Sam Lee", "person", "Sam"), named("Sam Park", "person")])
    other = stack.remember("Sam Park, also known as Sam Lee")
    extract(stack, other, [], [named("Sam Park", "person", "Sam Lee", "Sam")])
    park = get(stack, name="Sam Park").entity
    assert list(park.aliases) == []  # both names are taken by Sam Lee
    assert get(stack, name="Sam").entity.name == "Sam Lee"


def test_facts_are_the_live_memories_valid_now(stack: Stack) -> None:
    memory = stack.remember("Bo lives in Paris")
    [paris] = extract(stack, memory, ["Bo has his home in Paris"], [named("Bo", "person")])
    [result] = stack.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(
            patches=[store_pb2.MemoryPatch(id=paris, content="Bo lives in Rome", supersede=True)],
            reason="moved",
        )
    ).results
    assert result.status == store_pb2.PATCH_STATUS_UPDATED
    assert [m.id for m in get(stack, name="Bo").facts] == [memory.id]
    stack.store.DeleteMemory(store_pb2.DeleteMemoryRequest(id=memory.id, reason="test"))
    found = get(stack, name="Bo")
    assert list(found.facts) == [] and found.entity.mention_count == 2


def test_get_entity_pages_facts_and_neighbours_by_the_limits_asked(stack: Stack) -> None:
    memory = stack.remember("Cy knows many people")
    friends = [f"Friend {n}" for n in range(3)]
    extract(
        stack,
        memory,
        [f"Cy knows {f}" for f in friends],
        [named("Cy", "person")],
        [triple("Cy", "knows", f) for f in friends],
    )
    found = get(stack, name="Cy", max_facts=2, max_neighbors=1)
    assert (len(found.facts), found.facts_truncated) == (2, True)
    assert (len(found.neighbors), found.neighbors_truncated) == (1, True)
    full = get(stack, name="Cy")
    assert (len(full.facts), full.facts_truncated, len(full.neighbors)) == (4, False, 3)


def test_list_entities_filters_orders_by_mentions_and_pages(stack: Stack) -> None:
    for n, text in enumerate(["Dana met Eli", "Dana met Eli again", "Dana alone"]):
        memory = stack.remember(text)
        names = [named("Dana", "person")] + ([named("Eli", "person")] if n < 2 else [])
        extract(stack, memory, [], names)
    extract(stack, stack.remember("Berlin trip"), [], [named("Berlin", "place")])
    extract(stack, stack.remember("Engram repo"), [], [named("Engram", "project", "the repo")])
    assert listed(stack) == ["Dana", "Eli", "Berlin", "Engram"]
    assert listed(stack, entity_type="place") == ["Berlin"]
    assert listed(stack, name_prefix="E") == ["Eli", "Engram"]
    assert listed(stack, min_mentions=2) == ["Dana", "Eli"]
    [engram] = stack.store.ListEntities(store_pb2.ListEntitiesRequest(name_prefix="eng")).entities
    assert (engram.entity_type, list(engram.aliases), engram.mention_count) == (
        "project",
        ["the repo"],
        1,
    )
    seen: list[str] = []
    token = ""
    while True:
        page = stack.store.ListEntities(
            store_pb2.ListEntitiesRequest(page_size=1, page_token=token)
        )
        seen += [e.name for e in page.entities]
        token = page.next_page_token
        if not token:
            break
    assert seen == ["Dana", "Eli", "Berlin", "Engram"]
    first = stack.store.ListEntities(store_pb2.ListEntitiesRequest(page_size=1))
    code, _, fields = error_of(
        lambda: stack.store.ListEntities(
            store_pb2.ListEntitiesRequest(
                page_size=1, entity_type="person", page_token=first.next_page_token
            )
        )
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["page_token"])


def test_entities_are_namespace_scoped_and_not_found_says_nothing(stack: Stack) -> None:
    memory = stack.remember("Fay is secret", namespace="team-a")
    extract(stack, memory, [], [named("Fay", "person", "F.")])
    entity = get(stack, namespace="team-a", name="Fay").entity
    for fields in ({"id": entity.id}, {"name": "Fay"}, {"name": "F."}):
        code, reason, _ = error_of(lambda f=fields: get(stack, namespace="team-b", **f))
        assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
    with pytest.raises(grpc.RpcError) as caught:
        get(stack, namespace="team-b", id=entity.id)
    assert "Fay" not in (caught.value.details() or "")
    assert listed(stack, namespace="team-b") == []
    assert listed(stack, namespace="team-a") == ["Fay"]


def test_bad_requests_are_invalid_argument_naming_each_field_and_write_nothing(
    stack: Stack,
) -> None:
    before = counts(stack)
    cases = [
        ({}, ["id", "name"]),
        ({"id": "x", "name": "y"}, ["id", "name"]),
        ({"id": "x" * 129}, ["id"]),
        (
            {"name": "n" * 201, "max_facts": 101, "max_neighbors": -1},
            ["name", "max_facts", "max_neighbors"],
        ),
        ({"namespace": "bad namespace!", "name": "x"}, ["namespace"]),
    ]
    for fields, named_fields in cases:
        code, _, violations = error_of(lambda f=fields: get(stack, **f))
        assert (code, violations) == (grpc.StatusCode.INVALID_ARGUMENT, named_fields), fields
    code, _, violations = error_of(
        lambda: stack.store.ListEntities(
            store_pb2.ListEntitiesRequest(
                name_prefix="p" * 201,
                entity_type="spaceship",
                min_mentions=-1,
                page_size=501,
                page_token="garbage",
            )
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert violations == ["name_prefix", "entity_type", "min_mentions", "page_size", "page_token"]
    assert counts(stack) == before


def test_the_store_refuses_bad_named_entities_and_writes_nothing(stack: Stack) -> None:
    memory = stack.remember("Gus is here")
    job = extract_job(stack, memory)
    before = counts(stack)
    for bad, field in (
        (named("", "person"), "named_entities[0].name"),
        (named("Gus", "spaceship"), "named_entities[0].entity_type"),
        (named("Gus", "person", *[f"g{n}" for n in range(11)]), "named_entities[0].aliases"),
        (named("Gus", "person", " "), "named_entities[0].aliases"),
    ):
        code, _, violations = error_of(lambda b=bad: complete(stack, job, [], named_entities=[b]))
        assert (code, violations) == (grpc.StatusCode.INVALID_ARGUMENT, [field])
    assert counts(stack) == before


def test_memories_naming_one_entity_are_chained_by_entity_links(stack: Stack) -> None:
    """Seed 003's `entity` edge: each memory the pipeline links to an entity gets
    a link from the memory that named it before (one chain, not every pair);
    another entity, and another namespace's same name, start their own."""
    first = stack.remember("Ana Silva joined the climbing club")
    second = stack.remember("Ana Silva climbed at the quarry on Sunday")
    third = stack.remember("Bruno fixed the club van")
    elsewhere = stack.remember("Ana Silva is a customer", namespace="other")
    extract(stack, first, [], [named("Ana Silva", "person")])
    extract(stack, second, [], [named("Ana Silva", "person"), named("Ana Silva", "person")])
    extract(stack, third, [], [named("Bruno", "person")])
    extract(stack, elsewhere, [], [named("Ana Silva", "person")])

    def entity_links(memory: Any, namespace: str = "") -> list[tuple[str, str, float]]:
        reply = stack.store.ListMemoryLinks(
            store_pb2.ListMemoryLinksRequest(
                namespace=namespace, memory_id=memory.id, link_types=["entity"]
            )
        )
        return [(link.from_memory_id, link.to_memory_id, link.confidence) for link in reply.links]

    assert entity_links(first) == [(first.id, second.id, 1.0)]
    assert entity_links(second) == [(first.id, second.id, 1.0)]
    assert entity_links(third) == []
    assert entity_links(elsewhere, "other") == []
