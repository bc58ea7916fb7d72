import hashlib

import pytest

from services.common.normalize import normalize_content

# (input, storage, normalized): seed 002 "Content Normalization" plus Unicode NFC.
CASES = [
    ("hello", "hello", "hello"),
    ("  Hello   World  ", "Hello World", "hello world"),
    ("tabs\tand\nnewlines\r\n here", "tabs and newlines here", "tabs and newlines here"),
    ("Ends with dot.", "Ends with dot.", "ends with dot"),
    ("Many marks?!;:,.", "Many marks?!;:,.", "many marks"),
    ("inner. punctuation, stays.", "inner. punctuation, stays.", "inner. punctuation, stays"),
    ("trailing space after dot.   ", "trailing space after dot.", "trailing space after dot"),
    ("Cafe\u0301", "Caf\u00e9", "caf\u00e9"),  # NFD input composes to NFC
    ("\u00a0non-breaking\u2003spaces\u00a0", "non-breaking spaces", "non-breaking spaces"),
    ("ÄÖÜ ß", "ÄÖÜ ß", "äöü ß"),
    ("...", "...", ""),
    ("", "", ""),
]


@pytest.mark.parametrize(("text", "storage", "normalized"), CASES)
def test_normalize_content_table(text: str, storage: str, normalized: str) -> None:
    result = normalize_content(text)
    assert result.storage == storage
    assert result.normalized == normalized


@pytest.mark.parametrize(("text", "_storage", "normalized"), CASES)
def test_hash_is_sha256_of_normalized_or_lowercased_storage(
    text: str, _storage: str, normalized: str
) -> None:
    result = normalize_content(text)
    basis = normalized or result.storage.lower()
    assert result.content_hash == hashlib.sha256(basis.encode()).hexdigest()


def test_equivalent_texts_share_a_hash() -> None:
    variants = ["User prefers dark mode.", "user prefers   dark mode", " USER PREFERS DARK MODE!! "]
    assert len({normalize_content(v).content_hash for v in variants}) == 1


def test_different_texts_do_not_share_a_hash() -> None:
    assert (
        normalize_content("dark mode").content_hash != normalize_content("light mode").content_hash
    )
