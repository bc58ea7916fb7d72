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
