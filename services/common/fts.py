"""The one FTS5 MATCH builder: user text in, a MATCH expression that cannot fail.

Terms are the words of services.common.text (the tokens FTS5's unicode61 makes),
each emitted as a quoted FTS5 string, so no user input (quotes, operators,
column filters, parentheses, NEAR, stray `*`) can ever produce an FTS5 syntax
error.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.common.text import distinct_words, without_stop_words

MAX_TERMS = 64
# The longest keyword query accepted (Recall's `query`, ForgetMemories' `query`).
MAX_QUERY_CHARS = 2000


def fts_terms(text: str) -> list[str]:
    """Distinct lower-cased terms in order of first appearance, at most MAX_TERMS."""
    return distinct_words(text, MAX_TERMS)


def quoted(term: str) -> str:
    """One term as an FTS5 string (a phrase of its tokens), whatever it holds."""
    return '"' + term.replace('"', '""') + '"'


def any_of(expressions: Iterable[str]) -> str:
    """Matches a document matching any of `expressions` (quoted terms or groups)."""
    return " OR ".join(expressions)


def all_of(expressions: Iterable[str]) -> str:
    """Matches a document matching every one of `expressions`, each grouped."""
    return " AND ".join(f"({e})" for e in expressions)


def keyword_terms(query: str) -> list[str]:
    """A keyword query's terms, as Recall's keyword channel and ForgetMemories'
    query read them (a memory matches when it holds any of them): stop words
    dropped unless nothing else is left."""
    return without_stop_words(fts_terms(query))


def build_fts_query(text: str, *, match_all: bool) -> str | None:
    """A MATCH expression over every term of `text` (stop words included), or
    None when it has none: match_all=True requires every term, False any."""
    terms = [quoted(term) for term in fts_terms(text)]
    if not terms:
        return None
    return all_of(terms) if match_all else any_of(terms)
