"""The pure parts of document ingest: chunk windows and HTML reduced to text."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.pipeline.documents import (
    chunk_spans,
    chunk_text,
    html_to_text,
    permanent_status,
)


def test_a_text_no_longer_than_one_window_is_one_chunk() -> None:
    assert chunk_text("a" * 2000, 2000, 200) == ["a" * 2000]
    assert chunk_text("short", 2000, 200) == ["short"]


def test_a_word_longer_than_the_window_is_cut_hard_with_the_overlap() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(5000))
    chunks = chunk_text(text, 2000, 200)
    assert [len(c) for c in chunks] == [2000, 2000, 1400]
    assert chunks == [text[0:2000], text[1800:3800], text[3600:]]
    for before, after in itertools.pairwise(chunks):
        assert before[-200:] == after[:200]
    assert chunks[-1].endswith(text[-10:])


def test_a_text_ending_on_a_window_boundary_has_no_empty_tail() -> None:
    assert chunk_text("x" * 3800, 2000, 200) == ["x" * 2000, "x" * 2000]


def test_chunks_are_cut_on_word_boundaries() -> None:
    text = (
        "The monthly report lists every database we run: Postgres, MySQL and SQLite. "
        "Each one is backed up nightly."
    )
    chunks = chunk_text(text, 40, 12)
    assert chunks == [
        "The monthly report lists every database",
        "database we run: Postgres, MySQL and",
        "MySQL and SQLite. Each one is backed up",
        "is backed up nightly.",
    ]
    words = set(text.split())
    assert all(set(chunk.split()) <= words for chunk in chunks)


def _word_lengths(text: str) -> dict[int, int]:
    """Position -> the length of the word (maximal non-whitespace run) covering it."""
    covering = {}
    for match in re.finditer(r"\S+", text):
        for position in range(match.start(), match.end()):
            covering[position] = match.end() - match.start()
    return covering


def _inside_a_word(text: str, position: int) -> bool:
    """A cut at `position` splits a word (non-whitespace on both sides)."""
    return (
        0 < position < len(text)
        and not text[position - 1].isspace()
        and not text[position].isspace()
    )


_TEXTS = st.lists(
    st.one_of(
        st.text(alphabet="abcdé.,:", min_size=1, max_size=14),
        st.text(alphabet="xyz", min_size=15, max_size=60),  # longer than some windows
    ),
    max_size=60,
).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(text=_TEXTS, size=st.integers(2, 40), overlap_share=st.floats(0, 0.95))
def test_no_chunk_starts_or_ends_inside_a_word_and_the_chunks_cover_the_text(
    text: str, size: int, overlap_share: float
) -> None:
    overlap = min(int(size * overlap_share), size - 1)
    spans = chunk_spans(text, size, overlap)
    word_length = _word_lengths(text)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for start, end in spans:
        assert 0 <= start < end <= len(text) or text == ""
        assert end - start <= size
        for cut in (start, end):
            if _inside_a_word(text, cut):  # only a word longer than the window is split
                assert word_length[cut] > size
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start <= end or text[end:start].isspace()  # nothing but whitespace is skipped
        assert end - start <= overlap  # at most the configured overlap is repeated
    assert chunk_text(text, size, overlap) == [text[a:b] for a, b in spans]


def test_overlap_must_be_smaller_than_the_window() -> None:
    with pytest.raises(ValueError):
        chunk_text("text", 200, 200)


def test_html_keeps_visible_text_and_the_title() -> None:
    fetched = html_to_text(
        "<html><head><title>A &amp; B</title><script>x()</script></head>"
        "<body><p>One</p><p>Two &lt;3</p><style>p{}</style><noscript>no</noscript></body></html>"
    )
    assert fetched.title == "A & B"
    assert fetched.text.split() == ["One", "Two", "<3"]


def test_client_errors_are_permanent_except_the_ones_that_mean_not_now() -> None:
    assert [s for s in (400, 401, 403, 404, 410, 451) if permanent_status(s)] == [
        400, 401, 403, 404, 410, 451
    ]  # fmt: skip
    assert not [s for s in (408, 425, 429, 500, 502, 503, 504) if permanent_status(s)]
