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


def normalize_content(text: str) -> NormalizedContent:
    storage = _WHITESPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()
    normalized = _TRAILING_PUNCTUATION.sub("", storage.lower())
    basis = normalized or storage.lower()
    return NormalizedContent(
        storage=storage,
        normalized=normalized,
        content_hash=hashlib.sha256(basis.encode("utf-8")).hexdigest(),
    )
