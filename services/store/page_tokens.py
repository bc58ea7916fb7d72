"""Opaque page tokens bound to the listing they came from.

A token records where the previous page ended and a fingerprint of the listing
(kind, namespace, filter). A token that does not decode, was issued for another
listing, or holds a position no listing could have written (not the shape the
listing asked for, or a value that is not a short string or a 64-bit integer:
e.g. a forged 10**30, which SQLite cannot bind) is INVALID_ARGUMENT on
`page_token`. Listings decode through the typed functions (`decode_int_position`,
`decode_pair_position`, `decode_time_position`,
`decode_ranked_position`), so no listing checks a
position's shape itself.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from services.common import clock
from services.common.errors import InvalidArgument

_FIELD = "page_token"
# Tokens we issue are well under these; anything longer is not ours.
MAX_TOKEN_CHARS = 2048
_MAX_POSITION_STRING = 512
_INT64 = (-(2**63), 2**63 - 1)


def _binding(kind: str, scope: str) -> str:
    return hashlib.sha256(f"{kind}\x00{scope}".encode()).hexdigest()[:16]


def encode_page_token(kind: str, scope: str, position: list[Any]) -> str:
    body = json.dumps({"b": _binding(kind, scope), "p": position}, separators=(",", ":"))
    return base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def decode_int_position(token: str, kind: str, scope: str) -> int | None:
    """None for the first page; else the one integer after which the next page starts."""
    position = _decode(token, kind, scope)
    if position is None:
        return None
    if len(position) != 1 or not isinstance(position[0], int):
        raise _malformed()
    return int(position[0])


def decode_pair_position(token: str, kind: str, scope: str) -> tuple[str, str] | None:
    """None for the first page; else the two strings (a sort key and an id) after
    which the next page starts."""
    position = _decode(token, kind, scope)
    if position is None:
        return None
    if len(position) != 2 or not all(isinstance(value, str) for value in position):
        raise _malformed()
    return str(position[0]), str(position[1])


def decode_ranked_position(token: str, kind: str, scope: str) -> tuple[int, str, str] | None:
    """None for the first page; else a rank (an integer), a name and an id after
    which the next page starts (ListEntities: -mentions, canonical name, id)."""
    position = _decode(token, kind, scope)
    if position is None:
        return None
    if (
        len(position) != 3
        or not isinstance(position[0], int)
        or not all(isinstance(value, str) for value in position[1:])
    ):
        raise _malformed()
    return int(position[0]), str(position[1]), str(position[2])


def decode_time_position(token: str, kind: str, scope: str) -> tuple[str, str] | None:
    """As decode_pair_position, for a position whose sort key is a stored time:
    that time in today's form (services.common.clock.current_form), so a token
    issued before times had nine fraction digits still continues where its
    page ended; a key that is no time is a malformed token."""
    position = decode_pair_position(token, kind, scope)
    if position is None:
        return None
    try:
        return clock.current_form(position[0]), position[1]
    except ValueError as exc:
        raise _malformed() from exc


def _malformed() -> InvalidArgument:
    return InvalidArgument(_FIELD, "malformed page token")


def _decode(token: str, kind: str, scope: str) -> list[Any] | None:
    """None for the first page; the position after which the next page starts."""
    if not token:
        return None
    if len(token) > MAX_TOKEN_CHARS:
        raise _malformed()
    try:
        padded = token + "=" * (-len(token) % 4)
        body = json.loads(base64.urlsafe_b64decode(padded.encode()).decode())
        binding, position = body["b"], body["p"]
    except (
        binascii.Error,
        ValueError,
        UnicodeDecodeError,
        KeyError,
        TypeError,
        RecursionError,
    ) as exc:  # RecursionError: a forged body nested deeper than json.loads goes
        raise _malformed() from exc
    if binding != _binding(kind, scope):
        raise InvalidArgument(_FIELD, "page token was issued for a different listing or filter")
    if not isinstance(position, list) or not all(_bindable(value) for value in position):
        raise _malformed()
    return position


def _bindable(value: Any) -> bool:
    """A value a listing writes into a token: a short string or a 64-bit int."""
    if isinstance(value, str):
        return len(value) <= _MAX_POSITION_STRING
    if isinstance(value, int) and not isinstance(value, bool):
        return _INT64[0] <= value <= _INT64[1]
    return False
