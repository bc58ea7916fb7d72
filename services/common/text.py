"""The one tokeniser and stop-word list every service uses on text.

Words are what SQLite FTS5's `unicode61` tokenizer (the one `memories_fts` uses)
takes as tokens: runs of letters, digits and combining diacritics (Unicode
categories L* and N*, the private use area and U+0300..U+036F); everything else, the underscore
and apostrophes included, separates words. So the terms built from a query are
the tokens FTS5 indexed, and "don't" is "don" + "t" here as there.

Scripts written without spaces between words (Chinese, Japanese, Thai, ...) are
not segmented by `unicode61`: "東京に行きたい" is one token. `unspaced` tells
such a token apart, so a caller that looks for names inside the text (the graph
boost) can match them as substrings instead of whole words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_WORD = re.compile(r"(?:[^\W_]|[\u0300-\u036f\ue000-\uf8ff])+")

# The first halves of "n't" contractions, as the tokeniser splits them
# ("doesn't" -> "doesn", "t"); "can" ("can't") is a word of its own too.
NOT_STEMS = frozenset(
    {
        "can",
        "ain",
        "aren",
        "couldn",
        "didn",
        "doesn",
        "don",
        "hadn",
        "hasn",
        "haven",
        "isn",
        "mightn",
        "mustn",
        "needn",
        "shan",
        "shouldn",
        "wasn",
        "weren",
        "won",
        "wouldn",
    }
)
# NLTK's English stop words (179), apostrophe forms split into their parts as
# the tokeniser splits them ("don't" -> "don", "t"), which leaves 152.
STOP_WORDS = (
    frozenset(
        [
            "i",
            "me",
            "my",
            "myself",
            "we",
            "our",
            "ours",
            "ourselves",
            "you",
            "re",
            "ve",
            "ll",
            "d",
            "your",
            "yours",
            "yourself",
            "yourselves",
            "he",
            "him",
            "his",
            "himself",
            "she",
            "s",
            "her",
            "hers",
            "herself",
            "it",
            "its",
            "itself",
            "they",
            "them",
            "their",
            "theirs",
            "themselves",
            "what",
            "which",
            "who",
            "whom",
            "this",
            "that",
            "these",
            "those",
            "am",
            "is",
            "are",
            "was",
            "were",
            "be",
            "been",
            "being",
            "have",
            "has",
            "had",
            "having",
            "do",
            "does",
            "did",
            "doing",
            "a",
            "an",
            "the",
            "and",
            "but",
            "if",
            "or",
            "because",
            "as",
            "until",
            "while",
            "of",
            "at",
            "by",
            "for",
            "with",
            "about",
            "against",
            "between",
            "into",
            "through",
            "during",
            "before",
            "after",
            "above",
            "below",
            "to",
            "from",
            "up",
            "down",
            "in",
            "out",
            "on",
            "off",
            "over",
            "under",
            "again",
            "further",
            "then",
            "once",
            "here",
            "there",
            "when",
            "where",
            "why",
            "how",
            "all",
            "any",
            "both",
            "each",
            "few",
            "more",
            "most",
            "other",
            "some",
            "such",
            "no",
            "nor",
            "not",
            "only",
            "own",
            "same",
            "so",
            "than",
            "too",
            "very",
            "t",
            "can",
            "will",
            "just",
            "should",
            "now",
            "o",
            "y",
            "ma",
        ]
    )
    | NOT_STEMS
)

# Scripts written without spaces between words (code point ranges): Thai, Lao,
# Myanmar, Khmer, kana, CJK ideographs, Hangul syllables (whose particles attach
# to the word), and the CJK compatibility and supplementary ideographs.
_UNSPACED = (
    (0x0E00, 0x0EFF),
    (0x1000, 0x109F),
    (0x1780, 0x17FF),
    (0x3040, 0x30FF),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
    (0x20000, 0x3FFFF),
)


def words(text: str) -> list[str]:
    """Every lower-cased word of `text`, in order, repeats included."""
    return _WORD.findall(text.lower())


def distinct_words(text: str, limit: int | None = None) -> list[str]:
    """Lower-cased words in order of first appearance, each once; at most `limit`."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(text.lower()):
        seen.setdefault(match.group(0), None)
        if limit is not None and len(seen) >= limit:
            break
    return list(seen)


def without_stop_words(terms: Iterable[str]) -> list[str]:
    """`terms` minus the stop words, unless nothing else is left (a query of
    stop words only still means something)."""
    kept = list(terms)
    content = [t for t in kept if t not in STOP_WORDS]
    return content or kept


def unspaced(word: str) -> bool:
    """Whether `word` holds a character of a script written without spaces, so
    that it may be several words run together."""
    return any(lo <= ord(ch) <= hi for ch in word for lo, hi in _UNSPACED)


# A sentence ends at . ! or ? followed by space, or at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# Fragments shorter than this many words join the sentence before them ("Yes.",
# "e.g. this", list markers): alone they match too many questions.
MIN_SENTENCE_WORDS = 5
# At most this many sentences of one text get vectors (the rest ride on the
# whole text's vector): bounds a long document chunk's embedding cost.
MAX_SENTENCES = 256


def sentences(text: str) -> list[str]:
    """The sentences a memory's part vectors are made of (issue 19): the text
    split at sentence ends and line breaks, short fragments joined to the one
    before. A single sentence is returned as is; callers embed parts only when
    there are two or more. The one splitter of the pipeline and the benches."""
    out: list[str] = []
    for piece in _SENTENCE_END.split(text):
        piece = piece.strip()
        if not piece:
            continue
        if out and len(piece.split()) < MIN_SENTENCE_WORDS:
            out[-1] += " " + piece
        else:
            out.append(piece)
    return out[:MAX_SENTENCES]
