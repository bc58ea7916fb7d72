import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.fts import build_fts_query, fts_terms
from services.storage.db import sqlite3  # the project's driver


@pytest.fixture(scope="module")
def fts() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE docs USING fts5(content, tokenize='porter unicode61')")
    conn.executemany(
        "INSERT INTO docs(content) VALUES (?)",
        [("the user prefers dark mode",), ("deploy with postgres",), ("café au lait",)],
    )
    return conn


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_no_user_text_produces_an_fts5_syntax_error(fts: sqlite3.Connection, text: str) -> None:
    for match_all in (True, False):
        query = build_fts_query(text, match_all=match_all)
        if query is not None:
            fts.execute("SELECT rowid FROM docs WHERE docs MATCH ?", (query,)).fetchall()


@pytest.mark.parametrize(
    "text",
    [
        '"unbalanced',
        "content:dark",
        "NEAR(a b)",
        "a AND OR NOT b",
        "(a*) OR",
        "^start",
        "col:x*",
        "-dark",
    ],
)
def test_fts5_operators_are_treated_as_words(fts: sqlite3.Connection, text: str) -> None:
    query = build_fts_query(text, match_all=False)
    assert query is not None
    fts.execute("SELECT rowid FROM docs WHERE docs MATCH ?", (query,)).fetchall()


def test_match_all_requires_every_term(fts: sqlite3.Connection) -> None:
    query = build_fts_query("dark postgres", match_all=True)
    assert fts.execute("SELECT count(*) FROM docs WHERE docs MATCH ?", (query,)).fetchone()[0] == 0
    query = build_fts_query("dark user", match_all=True)
    assert fts.execute("SELECT count(*) FROM docs WHERE docs MATCH ?", (query,)).fetchone()[0] == 1


def test_match_any_matches_either_term(fts: sqlite3.Connection) -> None:
    query = build_fts_query("dark postgres", match_all=False)
    assert fts.execute("SELECT count(*) FROM docs WHERE docs MATCH ?", (query,)).fetchone()[0] == 2


def test_text_without_words_builds_no_query() -> None:
    assert build_fts_query("?! ... ***", match_all=False) is None
    assert build_fts_query("", match_all=True) is None


def test_terms_are_lowercased_and_deduplicated_in_order() -> None:
    assert fts_terms("Dark dark MODE, café") == ["dark", "mode", "café"]
