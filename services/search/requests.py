"""The parse step of each SearchService RPC: the proto request becomes one typed
input (services/search/inputs.py), or INVALID_ARGUMENT naming every bad field,
before any read."""

from __future__ import annotations

from collections.abc import Callable

from engram.search.v1 import search_pb2
from services.common import clock
from services.common.convert import filter_from_proto, time_field, with_as_of
from services.common.errors import Violations
from services.common.validation import DEFAULT_NAMESPACE, check_session_id, validate_namespaces
from services.search.inputs import ContextInput, RecallInput
from services.search.query_intent import Intent
from services.search.recall import check_recall_request

_INTENTS = frozenset(int(i) for i in Intent)


def recall(request: search_pb2.RecallRequest) -> RecallInput:
    bad = Violations()
    if request.intent not in search_pb2.QueryIntent.values():
        bad.add("intent", "must be a QueryIntent value")
    asked_at = time_field(bad, request, "asked_at", "asked_at")
    namespaces = bad.check(
        (DEFAULT_NAMESPACE,), validate_namespaces, request.namespaces, request.namespace
    )
    spec = with_as_of(filter_from_proto(request.filter, bad=bad), request, bad)
    min_score = request.min_score if request.HasField("min_score") else None
    checked = bad.check_all(
        None, check_recall_request, request.query, request.limit, spec, min_score
    )
    bad.raise_if_any()
    assert checked is not None  # else raised above
    query, limit, spec, min_score = checked
    return RecallInput(
        namespaces=namespaces,
        query=query,
        limit=limit,
        spec=spec,
        track_access=not request.skip_access_tracking,
        min_score=min_score,
        intent=Intent(request.intent) if request.intent in _INTENTS else Intent.UNSPECIFIED,
        asked_at=clock.from_text(asked_at) if asked_at else None,
    )


def assemble_context(
    request: search_pb2.AssembleContextRequest, check_question: Callable[[str, int], int]
) -> ContextInput:
    """`check_question`: ContextAssembler.check_question, which knows the
    configured budgets: the budget once it and the query are valid."""
    bad = Violations()
    namespaces = bad.check((DEFAULT_NAMESPACE,), validate_namespaces, request.namespaces)
    session_id = (
        bad.check("", check_session_id, request.session_id, "session_id")
        if request.session_id
        else ""
    )
    as_of = time_field(bad, request, "as_of", "as_of")
    budget = bad.check_all(0, check_question, request.query, request.token_budget)
    bad.raise_if_any()
    return ContextInput(namespaces, request.query, budget, session_id, as_of)
