"""What a fact is, for the pipeline that extracts facts and the store that
writes them: one definition of the fact types and of the limits the store
enforces, so the pipeline never produces what the store would refuse."""

from __future__ import annotations

from dataclasses import dataclass

# seed 000 "Extraction Stage": the types a fact may have (also memory types).
FACT_TYPES = ("fact", "preference", "decision", "procedural", "semantic")
MAX_FACT_CHARS = 2000
MAX_ENTITIES = 50  # entity triples per extraction
MAX_ENTITY_CHARS = 200  # an entity name or a relationship


# seed 003 "entities": the types an entity may have. The extraction's word
# for a type maps onto one of them (a few common synonyms too); anything else
# is DEFAULT_ENTITY_TYPE, so the set stays closed and filterable.
ENTITY_TYPES = ("person", "place", "organization", "project", "concept", "tool", "event", "thing")
DEFAULT_ENTITY_TYPE = "thing"
MAX_NAMED_ENTITIES = 50  # entities (with type and aliases) per extraction
MAX_ALIASES = 10  # aliases of one entity per extraction
_ENTITY_TYPE_SYNONYMS = {
    "organisation": "organization",
    "org": "organization",
    "company": "organization",
    "team": "organization",
    "location": "place",
    "city": "place",
    "country": "place",
    "human": "person",
    "software": "tool",
    "technology": "tool",
    "product": "tool",
    "idea": "concept",
    "topic": "concept",
}


def entity_type_of(raw: object) -> str | None:
    """The store's entity type for the extraction's word (case and spacing
    aside); None when it is none the store knows."""
    if not isinstance(raw, str):
        return None
    word = "_".join(raw.strip().lower().split())
    word = _ENTITY_TYPE_SYNONYMS.get(word, word)
    return word if word in ENTITY_TYPES else None


@dataclass(frozen=True)
class NamedEntity:
    """An entity the extraction found, with its type and other names."""

    name: str
    type: str = DEFAULT_ENTITY_TYPE
    aliases: tuple[str, ...] = ()


# Session consolidation (issue 17): per consolidate_session job
MAX_SESSION_FACTS = 50
MAX_FACT_SOURCES = 200  # session memories one consolidated fact is drawn from
MAX_CAUSAL_LINKS = 200

# seed 004 §5-6: how long a fact stays true, and its semantic categories
TEMPORAL_CLASSES = ("permanent", "long_term", "short_term")
MAX_CATEGORIES = 8
MAX_CATEGORY_CHARS = 64


@dataclass(frozen=True)
class Fact:
    content: str
    type: str
    confidence: float
    importance: float | None = None  # None: the confidence stands in (seed 002)
    temporal_class: str = ""  # one of TEMPORAL_CLASSES, or "" when the model did not say
    valid_until: str | None = None  # clock text; short-term facts only
    categories: tuple[str, ...] = ()
