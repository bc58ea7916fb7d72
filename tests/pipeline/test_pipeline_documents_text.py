"""The pure parts of document ingest: chunk windows and HTML reduced to text."""

from __future__ import annotations

import itertools

import pytest

from services.pipeline.documents import chunk_text, html_to_text


def test_a_text_no_longer_than_one_window_is_one_chunk() -> None:
    assert chunk_text("a" * 2000, 2000, 200) == ["a" * 2000]
    assert chunk_text("short", 2000, 200) == ["short"]


def test_windows_overlap_by_the_configured_amount_and_cover_the_text() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(5000))
    chunks = chunk_text(text, 2000, 200)
    assert [len(c) for c in chunks] == [2000, 2000, 1400]
    assert chunks == [text[0:2000], text[1800:3800], text[3600:]]
    for before, after in itertools.pairwise(chunks):
        assert before[-200:] == after[:200]
    assert chunks[-1].endswith(text[-10:])


def test_a_text_ending_on_a_window_boundary_has_no_empty_tail() -> None:
    assert chunk_text("x" * 3800, 2000, 200) == ["x" * 2000, "x" * 2000]


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
