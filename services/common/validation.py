"""Request rules shared by every service."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from services.common import clock
from services.common.errors import FieldViolation, InvalidArgument, Violations

DEFAULT_NAMESPACE = "default"
_NAMESPACE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# A namespace pattern (API keys, per-namespace settings): an exact name, or
# `prefix*` for every namespace starting with prefix (`*` alone: all).
NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9._:-]{0,128}\*?")
# Ids are UUIDs (36 characters); the cap keeps an id that is echoed in an error
# or bound into a query small, whatever a client sends.
MAX_ID_CHARS = 128
MAX_SESSION_ID_CHARS = 128
_SESSION_ID = re.compile(rf"[^\s\x00-\x1f\x7f-\x9f]{{1,{MAX_SESSION_ID_CHARS}}}")
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


# ---- control characters ----------------------------------------------------------------
#
# The one rule for control characters in text a caller writes (issue 34): no C0
# control but tab, line feed and carriage return (CRLF text), no DEL, no C1
# (U+0080-U+009F). ESC and CSI would otherwise be stored and printed raw into an
# operator's terminal (`engram list`), and the others show nothing or rewrite the
# line. Refused, not stripped: a write that stores something other than what was
# sent should say so, and INVALID_ARGUMENT names the field. Content is normalised
# (every whitespace character, \v, \f and U+001C-U+001F included, becomes one
# space) before it is stored, so `whitespace_ok` lets those through there.
# Printing escapes the same characters (`escape_control`), for rows written
# before the rule and for text no caller wrote (fetched pages, LLM answers).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# every character the rule refuses, for code that must find them in another form
# (JSON escapes in an LLM's answer: services/common/providers/llm.py)
CONTROL_CHARACTERS = "".join(chr(code) for code in range(0xA0) if _CONTROL.match(chr(code)))
_NON_SPACE_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")


def check_no_control(value: str, field: str, *, whitespace_ok: bool = False) -> str:
    """`value` unless it holds a control character (see above): INVALID_ARGUMENT
    naming `field`, the first such character and where it is."""
    found = (_NON_SPACE_CONTROL if whitespace_ok else _CONTROL).search(value)
    if found is not None:
        raise InvalidArgument(
            field,
            "must not contain control characters other than tab and line breaks "
            f"(found U+{ord(found.group()):04X} at character {found.start()})",
        )
    return value


def without_control(text: str) -> str:
    """`text` with each control character (see above) replaced by a space: for
    text no caller wrote and that must not fail its write (a fetched page)."""
    return _CONTROL.sub(" ", text)


_PRINTED_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # CR too: it rewrites the line


def escape_control(text: str) -> str:
    """`text` safe to print to a terminal: each control character (see above, and
    carriage return) shown as its escape (`\\x1b`, `\\x0d`), tab and line feed kept."""
    return _PRINTED_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


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


# ---- enum values the proto does not define ---------------------------------------------
#
# Proto3 enums are open: a value the schema does not define (999, -7) parses and
# reaches the handler as a plain int, where a lookup table or an `if` ladder would
# quietly read it as the default (ForgetMemories once took mode 999 for a preview).
# One check over the request's descriptor refuses every such value, on every RPC,
# before any handler runs (services/common/interceptors.py).


class _EnumPlan:
    """Where a message type can hold enum values: its own enum fields, and the
    message fields (and map values) whose types can, found once per type."""

    __slots__ = ("enums", "messages")

    def __init__(self) -> None:
        self.enums: list[Any] = []  # FieldDescriptor (its optional parts typed loosely)
        self.messages: list[Any] = []


_ENUM_PLANS: dict[str, _EnumPlan] = {}


def _enum_plan(descriptor: Any) -> _EnumPlan:
    plan = _ENUM_PLANS.get(descriptor.full_name)
    if plan is not None:
        return plan
    plan = _ENUM_PLANS[descriptor.full_name] = _EnumPlan()  # before recursing: cycles end here
    field: Any
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_ENUM:
            plan.enums.append(field)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            target = field.message_type
            if target.GetOptions().map_entry:
                target = target.fields_by_name["value"]
                if target.type == FieldDescriptor.TYPE_ENUM:
                    plan.messages.append(field)
                    continue
                if target.type != FieldDescriptor.TYPE_MESSAGE:
                    continue
                target = target.message_type
            if _can_hold_enums(target):
                plan.messages.append(field)
    return plan


def _can_hold_enums(descriptor: Any, seen: frozenset[str] = frozenset()) -> bool:
    if descriptor.full_name in seen:
        return False
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_ENUM:
            return True
        if field.type == FieldDescriptor.TYPE_MESSAGE and _can_hold_enums(
            field.message_type, seen | {descriptor.full_name}
        ):
            return True
    return False


def _enum_violation(field: Any, value: int, path: str) -> FieldViolation:
    enum = field.enum_type
    names = ", ".join(v.name for v in enum.values)
    return FieldViolation(path, f"{value} is not a value of {enum.name}; one of {names}")


def undefined_enum_fields(message: Message, prefix: str = "") -> list[FieldViolation]:
    """Every enum field of `message` (nested, repeated and map values too) that
    holds a number its enum does not define, by path (`mode`, `patches[0].status`)."""
    plan = _enum_plan(message.DESCRIPTOR)
    found: list[FieldViolation] = []
    for field in plan.enums:
        defined = field.enum_type.values_by_number
        value = getattr(message, field.name)
        if field.is_repeated:
            found.extend(
                _enum_violation(field, v, f"{prefix}{field.name}[{i}]")
                for i, v in enumerate(value)
                if v not in defined
            )
        elif value not in defined:
            found.append(_enum_violation(field, value, f"{prefix}{field.name}"))
    for field in plan.messages:
        path = f"{prefix}{field.name}"
        if field.message_type.GetOptions().map_entry:
            value_field: Any = field.message_type.fields_by_name["value"]
            for key, item in getattr(message, field.name).items():
                entry = f"{path}[{key!r}]"
                if value_field.type == FieldDescriptor.TYPE_ENUM:
                    if item not in value_field.enum_type.values_by_number:
                        found.append(_enum_violation(value_field, item, entry))
                else:
                    found.extend(undefined_enum_fields(item, f"{entry}."))
        elif field.is_repeated:
            for index, item in enumerate(getattr(message, field.name)):
                found.extend(undefined_enum_fields(item, f"{path}[{index}]."))
        elif message.HasField(field.name):
            found.extend(undefined_enum_fields(getattr(message, field.name), f"{path}."))
    return found


def reject_undefined_enums(message: Message) -> None:
    """INVALID_ARGUMENT naming every enum field that holds an undefined value."""
    plan = _enum_plan(message.DESCRIPTOR)
    if not plan.enums and not plan.messages:
        return  # most requests: nothing to look at
    found = undefined_enum_fields(message)
    if found:
        first, *rest = found
        raise InvalidArgument(first.field, first.description, *rest)
