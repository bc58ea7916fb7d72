"""The one FTS5 query builder: user text in, a MATCH expression that cannot fail.

Every term is extracted as a run of letters/digits and emitted as a quoted FTS5
string, so no user input (quotes, operators, column filters, parentheses, NEAR,
stray `*`) can ever produce an FTS5 syntax error.
"""

from __future__ import annotations

import re

_TERM = re.compile(r"[^\W_]+", re.UNICODE)
MAX_TERMS = 64


def fts_terms(text: str) -> list[str]:
    """Distinct lower-cased terms in order of first appearance."""
    seen: dict[str, None] = {}
    for match in _TERM.finditer(text.lower()):
        seen.setdefault(match.group(0), None)
        if len(seen) >= MAX_TERMS:
            break
    return list(seen)


def build_fts_query(text: str, *, match_all: bool) -> str | None:
    """A MATCH expression over the terms of `text`, or None when it has none.

    match_all=True requires every term (for destructive selection, e.g. forget);
    match_all=False matches any term, ranked by BM25 (for recall).
    """
    terms = fts_terms(text)
    if not terms:
        return None
    joiner = " AND " if match_all else " OR "
    return joiner.join(f'"{term}"' for term in terms)
