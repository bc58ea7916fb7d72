"""Request rules shared by every service."""

from __future__ import annotations

import re
from collections.abc import Sequence

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from services.common import clock
from services.common.errors import InvalidArgument, Violations

DEFAULT_NAMESPACE = "default"
_NAMESPACE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# A namespace pattern (API keys, per-namespace settings): an exact name, or
# `prefix*` for every namespace starting with prefix (`*` alone: all).
NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9._:-]{0,128}\*?")
# Ids are UUIDs (36 characters); the cap keeps an id that is echoed in an error
# or bound into a query small, whatever a client sends.
MAX_ID_CHARS = 128
MAX_SESSION_ID_CHARS = 128
_SESSION_ID = re.compile(rf"[^\s\x00-\x1f\x7f]{{1,{MAX_SESSION_ID_CHARS}}}")
# Namespaces one read may span (Recall's and AssembleContext's `namespaces`): each is
# searched on its own, so the cost grows with the count.
MAX_NAMESPACES = 8


def validate_namespace(namespace: str, field: str = "namespace") -> str:
    """Empty means the default namespace; anything else must match the pattern."""
    if namespace == "":
        return DEFAULT_NAMESPACE
    if not _NAMESPACE.fullmatch(namespace):
        raise InvalidArgument(field, "must match [A-Za-z0-9._:-]{1,128}")
    return namespace


def pattern_covers(pattern: str, namespace: str) -> bool:
    """Whether a namespace pattern (see NAMESPACE_PATTERN) covers `namespace`."""
    return pattern == namespace or (pattern.endswith("*") and namespace.startswith(pattern[:-1]))


def named_namespaces(request: object) -> tuple[str, ...] | None:
    """Every namespace a request names, for the key check (services.common.auth): its
    `namespace` (empty: the default one) and each of its repeated `namespaces` when it
    has that field. A request that sets both names both, so no validation rule can let
    an uncovered namespace through. None when the request has no namespace field."""
    one = getattr(request, "namespace", None)
    many = getattr(request, "namespaces", None)
    names = [str(n) for n in many] if many is not None and not isinstance(many, str) else []
    if isinstance(one, str) and (one or not names):
        names.append(one)
    if not names:  # only a repeated field, left empty: the default namespace
        return (DEFAULT_NAMESPACE,) if many is not None else None
    return tuple(n or DEFAULT_NAMESPACE for n in names)


def validate_namespaces(
    namespaces: Sequence[str], single: str = "", field: str = "namespaces"
) -> tuple[str, ...]:
    """The namespaces of a call that reads several (Recall's and AssembleContext's
    `namespaces`): 1 to MAX_NAMESPACES distinct valid names, or, when empty, the single
    `namespace` (empty: the default one). Setting both is an error, not a union: a
    caller that meant one of them gets told rather than a wider search."""
    if not namespaces:
        return (validate_namespace(single),)
    bad = Violations()
    if single:
        bad.add(field, "set either namespace or namespaces, not both")
    if len(namespaces) > MAX_NAMESPACES:
        bad.add(field, f"at most {MAX_NAMESPACES} namespaces")
    seen: set[str] = set()
    for index, name in enumerate(namespaces):
        checked = bad.check(name, validate_namespace, name, f"{field}[{index}]")
        if checked in seen:
            bad.add(f"{field}[{index}]", "appears more than once")
        seen.add(checked)
    bad.raise_if_any()
    return tuple(validate_namespace(n) for n in namespaces)


def validate_id(value: str, field: str) -> str:
    """A required id of at most MAX_ID_CHARS characters."""
    if not value:
        raise InvalidArgument(field, "required")
    if len(value) > MAX_ID_CHARS:
        raise InvalidArgument(field, f"must be at most {MAX_ID_CHARS} characters")
    return value


def check_session_id(value: str, field: str) -> str:
    """A session id (RememberRequest, AppendTurn, MemoryFilter): 1 to 128
    characters, no whitespace or control characters (harnesses use UUIDs or
    `channel:thread` forms; anything printable is theirs to choose)."""
    if not _SESSION_ID.fullmatch(value):
        raise InvalidArgument(
            field,
            f"must be 1 to {MAX_SESSION_ID_CHARS} characters without whitespace or control characters",
        )
    return value


def validate_ids(values: list[str] | tuple[str, ...], field: str) -> tuple[str, ...]:
    """Every id of a repeated id field (every bad one named by its index)."""
    bad = Violations()
    for index, value in enumerate(values):
        bad.check("", validate_id, value, f"{field}[{index}]")
    bad.raise_if_any()
    return tuple(values)


def check_timestamp(seconds: int, nanos: int, field: str) -> None:
    """google.protobuf.Timestamp's own range: 0001-01-01T00:00:00Z to
    9999-12-31T23:59:59.999999999Z, nanos in [0, 1e9)."""
    if not 0 <= nanos <= 999_999_999:
        raise InvalidArgument(field, "nanos must be between 0 and 999999999")
    if not clock.MIN_SECONDS <= seconds <= clock.MAX_SECONDS:
        raise InvalidArgument(
            field, "must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999999Z"
        )


NUL_DESCRIPTION = "must not contain the NUL character (U+0000)"


def nul_fields(message: Message, prefix: str = "") -> list[str]:
    """Every string field of `message` (nested, repeated and map fields too) that holds
    U+0000, by path (`items[0].content`, `metadata["k"]`). PostgreSQL's text type
    cannot store NUL, so one rule for both backends refuses it in every request."""
    found: list[str] = []
    for field, value in message.ListFields():
        path = f"{prefix}{field.name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_field, value_field = field.message_type.fields
            for key, item in value.items():
                entry = f"{path}[{key!r}]"
                if key_field.type == FieldDescriptor.TYPE_STRING and "\x00" in key:
                    found.append(f"{path} key {key!r}")
                if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    found.extend(nul_fields(item, f"{entry}."))
                elif value_field.type == FieldDescriptor.TYPE_STRING and "\x00" in item:
                    found.append(entry)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.is_repeated:
                for index, item in enumerate(value):
                    found.extend(nul_fields(item, f"{path}[{index}]."))
            else:
                found.extend(nul_fields(value, f"{path}."))
        elif field.type == FieldDescriptor.TYPE_STRING:
            if field.is_repeated:
                found.extend(f"{path}[{i}]" for i, text in enumerate(value) if "\x00" in text)
            elif "\x00" in value:
                found.append(path)
    return found


def reject_nul(message: Message) -> None:
    """INVALID_ARGUMENT naming every string field that holds U+0000 (see nul_fields)."""
    fields = nul_fields(message)
    if fields:
        bad = Violations()
        for field in fields:
            bad.add(field, NUL_DESCRIPTION)
        bad.raise_if_any()
