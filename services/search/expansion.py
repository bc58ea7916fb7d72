"""Second-hop expansion (issue 19): a second retrieval seeded by the first pass's best hits.

Multi-hop and counting questions ("how many musical instruments do I own?") need
turns that share no word with the question (one mentioning a Yamaha guitar). The
first pass finds some of the evidence; the words and the meaning of those hits
lead to the rest:

- lexical pseudo-relevance feedback (RM3 on BM25): the terms most distinctive of
  the best hits (their share of each hit's words, times the term's IDF in the
  searched collection), the query's own terms and stop words excluded, run
  through the keyword channel again; each memory's keyword score becomes its
  first score plus `weight` x the expansion's, both scaled by their best
  (the interpolated query model of RM3, BM25 being a sum over terms);
- a moved query vector (Rocchio): q + b x the mean of the best hits' vectors,
  scanned by the vector channel again for candidates the first scan missed,
  the pool's cosine taken to it.

Pure functions; services/search/recall.py runs the channels. Both are off by
default (search.expansion_terms 0, search.expansion_vector_weight 0): small
gains that do not hold across both benchmarks once cross-validated, for 1.3
(vector) and 1.9 (lexical) times the Recall's time (bench/README.md
"Second-hop expansion").
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from services.common.db import Reads
from services.common.fts import quoted
from services.common.memory_filter import MemoryFilterSpec
from services.common.text import STOP_WORDS, words
from services.search import pg_text, queries
from services.search.scoring import Candidate, coverage_idf
from services.search.text import keyword_terms

# Shorter words are mostly fragments ("t" of "don't", "ok") and digits alone
# are amounts, not topics.
MIN_TERM_CHARS = 3
# Terms whose collection counts are read: the best by their share of the hits'
# words, before the IDF decides.
TERM_SHORTLIST = 40


def feedback_rowids(pool: Sequence[Candidate], docs: int) -> list[int]:
    """The first pass's best `docs` candidates (by score after the boosts)."""
    ranked = sorted(pool, key=lambda c: (-c.score, c.rowid))
    return [c.rowid for c in ranked[:docs]]


def shortlist(contents: Sequence[str], query: str, size: int = TERM_SHORTLIST) -> dict[str, float]:
    """Candidate expansion terms -> their weight in the feedback model: the sum
    over the hits of the term's share of the hit's words (RM3's P(w|D), hits
    weighted alike; stop words, short words and bare numbers are not words
    here), the query's own terms left out; the best `size`."""
    own = set(keyword_terms(query))
    model: dict[str, float] = {}
    for content in contents:
        tokens = [
            w
            for w in words(content)
            if len(w) >= MIN_TERM_CHARS and not w.isdigit() and w not in STOP_WORDS
        ]
        for term, count in Counter(tokens).items():
            if term not in own:
                model[term] = model.get(term, 0.0) + count / len(tokens)
    best = sorted(model.items(), key=lambda item: (-item[1], item[0]))[:size]
    return dict(best)


def pick_terms(
    model: dict[str, float],
    counts: dict[str, int],
    collection_size: int,
    feedback_counts: dict[str, int],
    terms: int,
) -> list[str]:
    """The `terms` best of `model` by weight x IDF in the collection (`counts`:
    memories holding each term). A term no memory beyond the hits holds
    (`feedback_counts`: how many hits hold it) cannot bring a new candidate."""
    scored = [
        (weight * coverage_idf(collection_size, counts.get(term, 0)), term)
        for term, weight in model.items()
        if counts.get(term, 0) > feedback_counts.get(term, 0)
    ]
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [term for _, term in scored[:terms]]


def holding(contents: Sequence[str], terms: Sequence[str]) -> dict[str, int]:
    """How many of `contents` hold each term."""
    sets = [set(words(content)) for content in contents]
    return {term: sum(term in s for s in sets) for term in terms}


def merge_keywords(
    first: Sequence[tuple[int, float]], expansion: Sequence[tuple[int, float]], weight: float
) -> list[tuple[int, float]]:
    """(rowid, score) best first: first / its best + weight x expansion / its
    best, in the first list's units (its best score) so the keyword channel's
    scale is kept; the expansion alone, scaled the same way, when the first is empty."""
    if not expansion or weight <= 0:
        return list(first)
    top_first = max((s for _, s in first), default=0.0)
    top_expansion = max(s for _, s in expansion)
    unit = top_first if top_first > 0 else 1.0
    merged: dict[int, float] = {}
    for rowid, score in first:
        merged[rowid] = score / unit if top_first > 0 else 0.0
    if top_expansion > 0:
        for rowid, score in expansion:
            merged[rowid] = merged.get(rowid, 0.0) + weight * score / top_expansion
    ranked = sorted(merged.items(), key=lambda item: (-item[1], item[0]))
    return [(rowid, score * unit) for rowid, score in ranked]


def moved_vector(query: Sequence[float], hits: Sequence[bytes], weight: float) -> list[float]:
    """Rocchio's query: the unit query vector plus `weight` x the mean of the
    hits' unit vectors (float32 blobs), as a unit vector; the query when there
    are no hits."""
    q = np.asarray(query, dtype=np.float32)
    q = q / (float(np.linalg.norm(q)) or 1.0)
    if not hits or weight <= 0:
        return [float(x) for x in q]
    raw = np.frombuffer(b"".join(hits), dtype=np.float32).reshape(len(hits), -1)
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    unit = raw / np.where(norms > 0, norms, 1.0)
    moved = q + weight * unit.mean(axis=0)
    norm = float(np.linalg.norm(moved))
    return [float(x) for x in (moved / norm if norm > 0 else q)]


async def collection_counts(
    reads: Reads, dialect: str, namespace: str, terms: Sequence[str], spec: MemoryFilterSpec
) -> tuple[int, dict[str, int]]:
    """(memories searched, memories holding each term) with the keyword channel's
    statistics rules: the namespace and filter on SQLite, the kept per-namespace
    statistics on Postgres (services/search/pg_text.py)."""
    if not terms:
        return 0, {}
    if dialect == "postgres":
        size, _, kept = await reads.fetch_one(pg_text.kept_statistics(list(terms), namespace))
        return int(size or 0), {t: int(n) for t, n in zip(terms, kept or [], strict=False)}
    size_row, *rows = await asyncio.gather(
        reads.fetch_one(queries.live_count(namespace, spec)),
        *(
            reads.fetch_one(queries.term_collection_count(quoted(t), namespace, spec))
            for t in terms
        ),
    )
    return int(size_row[0]), {t: int(row[0]) for t, row in zip(terms, rows, strict=True)}


async def contents(reads: Reads, dialect: str, namespace: str, rowids: Sequence[int]) -> list[str]:
    """The contents of `rowids` (memories of the namespace), in `rowids` order."""
    if not rowids:
        return []
    rows: list[Any] = await reads.fetch_all(queries.contents(namespace, rowids, dialect=dialect))
    by_rowid = {row[0]: row[1] for row in rows}
    return [by_rowid[r] for r in rowids if r in by_rowid]
