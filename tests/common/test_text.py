"""The shared tokeniser (services/common/text.py) cuts text where FTS5's
unicode61 tokenizer does, so query terms are the tokens the index holds."""

from __future__ import annotations

import pytest

from services.common.text import STOP_WORDS, distinct_words, unspaced, without_stop_words, words
from services.storage.db import sqlite3  # the project's driver

SAMPLES = [
    "Dark mode, please! (not light)",
    "don't stop; Frank\u2019s t-shirt",
    "snake_case and 50_50 and c\u00b2d",
    "caf\u00e9 au lait, cafe\u0301 noir",  # composed and decomposed accents
    "\u6771\u4eac\u306b\u884c\u304d\u305f\u3044 \u3068 \u5927\u962a",  # 東京に行きたい と 大阪
    "\uc11c\uc6b8\uc5d0 \uac11\ub2c8\ub2e4",  # Korean
    "\u0939\u093f\u0928\u094d\u0926\u0940 text",  # Devanagari: its vowel signs separate
    "emoji \U0001f600 between words; private \ue000use",
    "Numbers 1,024.5 and v2.0-beta",
]


@pytest.fixture(scope="module")
def vocabulary() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE docs USING fts5(content, tokenize='unicode61 remove_diacritics 0')"
    )
    conn.execute("CREATE VIRTUAL TABLE terms USING fts5vocab(docs, 'row')")
    return conn


@pytest.mark.parametrize("text", SAMPLES)
def test_words_are_the_tokens_fts5_unicode61_makes(
    vocabulary: sqlite3.Connection, text: str
) -> None:
    vocabulary.execute("DELETE FROM docs")
    vocabulary.execute("INSERT INTO docs(content) VALUES (?)", (text,))
    indexed = {row[0] for row in vocabulary.execute("SELECT term FROM terms")}
    assert set(words(text)) == indexed


def test_words_keep_order_and_repeats_distinct_words_do_not() -> None:
    assert words("Dark dark MODE") == ["dark", "dark", "mode"]
    assert distinct_words("Dark dark MODE, caf\u00e9") == ["dark", "mode", "caf\u00e9"]
    assert distinct_words("a b c d", limit=2) == ["a", "b"]


def test_stop_words_go_unless_nothing_else_is_left() -> None:
    assert without_stop_words(["what", "does", "alice", "drink"]) == ["alice", "drink"]
    assert without_stop_words(["who", "is", "she"]) == ["who", "is", "she"]
    assert {"don", "t", "the"} <= STOP_WORDS


def test_unspaced_scripts_are_told_apart() -> None:
    assert unspaced("\u6771\u4eac")  # 東京
    assert unspaced("iphone\u624b\u673a")  # mixed: iphone手机
    assert not unspaced("caf\u00e9")
    assert not unspaced("42")
