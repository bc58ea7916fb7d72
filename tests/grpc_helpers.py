"""Assertion helpers for gRPC errors (importable from any test module)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status


def error_of(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str, list[str]]:
    """Run a call expected to fail: (code, ErrorInfo reason, BadRequest field names)."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error = caught.value
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    reason = ""
    fields: list[str] = []
    assert status is not None, "every error carries google.rpc.Status details"
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
            assert info.domain == "engram.dev"
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields.extend(v.field for v in bad.field_violations)
    return error.code(), reason, fields  # type: ignore[attr-defined]
