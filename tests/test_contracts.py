"""The code and the protos name the same things: every error reason the code
can send is an engram.common.v1.ErrorReason value, and every history event the
store writes is a HistoryEventType value (never UNSPECIFIED).

The code is read, not run: each reason and event is a string literal at the
place that raises or writes it, so collecting the literals finds them all."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engram.common.v1 import error_reason_pb2
from engram.store.v1 import store_pb2
from services.common.remote_errors import REASONS_WITHOUT_DETAILS
from services.store.servicer import history_event_type

SERVICES = Path(__file__).resolve().parent.parent / "services"
REASON = re.compile(r"^[A-Z][A-Z_]+$")


def _trees() -> Iterator[ast.AST]:
    for path in sorted(SERVICES.rglob("*.py")):
        yield ast.parse(path.read_text(), filename=str(path))


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _raised_reasons() -> set[str]:
    """`reason="X"` keyword arguments and `reason = "X"` class attributes."""
    found: set[str] = set(REASONS_WITHOUT_DETAILS.values())
    for tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                values = [_literal(k.value) for k in node.keywords if k.arg == "reason"]
            elif isinstance(node, ast.ClassDef):
                values = [
                    _literal(item.value)
                    for item in node.body
                    if isinstance(item, ast.Assign | ast.AnnAssign)
                    and any(
                        isinstance(t, ast.Name) and t.id == "reason"
                        for t in (item.targets if isinstance(item, ast.Assign) else [item.target])
                    )
                ]
            else:
                continue
            found.update(v for v in values if v is not None and REASON.match(v))
    return found


def _written_events() -> set[str]:
    """`event="x"` keyword arguments (history rows) and `*_EVENT = "x"` constants."""
    found: set[str] = set()
    for tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                found.update(
                    v
                    for k in node.keywords
                    if k.arg == "event" and (v := _literal(k.value)) is not None
                )
            elif (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id.endswith("_EVENT") for t in node.targets)
                and (v := _literal(node.value)) is not None
            ):
                found.add(v)
    return found


def _enum_names(enum: Any, prefix: str) -> set[str]:
    names = {value.name.removeprefix(prefix) for value in enum.DESCRIPTOR.values}
    return names - {"UNSPECIFIED"}


def test_every_error_reason_the_code_sends_is_an_error_reason_value() -> None:
    raised = _raised_reasons()
    declared = _enum_names(error_reason_pb2.ErrorReason, "ERROR_REASON_")
    assert raised - declared == set(), "reasons sent but not in ErrorReason"
    assert declared - raised == set(), "ErrorReason values no code sends"


def test_every_history_event_the_store_writes_is_a_history_event_type() -> None:
    written = _written_events()
    assert {"created", "deleted", "purged"} <= written  # the collection sees the writers
    for event in written:
        assert history_event_type(event) != store_pb2.HISTORY_EVENT_TYPE_UNSPECIFIED
    declared = _enum_names(store_pb2.HistoryEventType, "HISTORY_EVENT_TYPE_")
    assert {e.upper() for e in written} == declared
