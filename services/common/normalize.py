"""The one content normaliser (seed 002 "Content Normalization", plus Unicode NFC).

storage    = NFC, trimmed, whitespace runs collapsed to one space (casing kept)
normalized = storage lower-cased, trailing [.,!?;:] removed
hash       = sha256(normalized or storage.lower())
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

_WHITESPACE = re.compile(r"\s+")
_TRAILING_PUNCTUATION = re.compile(r"[.,!?;:]+$")


@dataclass(frozen=True)
class NormalizedContent:
    storage: str
    normalized: str
    content_hash: str


def is_blank(text: str) -> bool:
    """True when `text` shows nothing: only whitespace and Unicode format
    characters (category Cf: zero-width space U+200B, joiners, BOM, bidi marks).
    Such text is checked as empty but never rewritten: stripping Cf characters
    would change the content hash of stored memories."""
    return all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text)


def normalize_content(text: str) -> NormalizedContent:
    storage = _WHITESPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()
    normalized = _TRAILING_PUNCTUATION.sub("", storage.lower())
    basis = normalized or storage.lower()
    return NormalizedContent(
        storage=storage,
        normalized=normalized,
        content_hash=hashlib.sha256(basis.encode("utf-8")).hexdigest(),
    )
