"""The one error mapper, exercised on a real server: domain errors become rich
statuses; unexpected exceptions become INTERNAL without leaking a stack trace."""

import asyncio
import threading

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.interceptors import REQUEST_ID_KEY
from services.common.server import Listener, start_server

RAISES = {
    "/t.T/Invalid": InvalidArgument("widget.size", "too big"),
    "/t.T/Precondition": FailedPrecondition("not now", reason="NOT_DELETED", metadata={"k": "v"}),
    "/t.T/Crash": RuntimeError("secret internal detail"),
}


class _Handlers(grpc.GenericRpcHandler):
    def service(self, details):
        async def behaviour(request, context):
            if details.method == "/t.T/Ok":
                return request
            raise RAISES[details.method]

        return grpc.unary_unary_rpc_method_handler(behaviour)


@pytest.fixture(scope="module")
def channel():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    running = asyncio.run_coroutine_threadsafe(
        start_server(
            Listener("127.0.0.1", 0, max_message_bytes=1024 * 1024),
            [],
            lambda s: s.add_generic_rpc_handlers((_Handlers(),)),
        ),
        loop,
    ).result()
    with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
        yield ch
    asyncio.run_coroutine_threadsafe(running.stop(0), loop).result()
    loop.call_soon_threadsafe(loop.stop)


def _fail(channel, method):
    with pytest.raises(grpc.RpcError) as caught:
        channel.unary_unary(method)(b"x", metadata=((REQUEST_ID_KEY, "req-123"),))
    return caught.value


def test_invalid_argument_carries_error_info_and_bad_request(channel) -> None:
    error = _fail(channel, "/t.T/Invalid")
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(error)
    info, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
    status.details[0].Unpack(info)
    status.details[1].Unpack(bad)
    assert (info.reason, info.domain) == ("INVALID_ARGUMENT", "engram.dev")
    assert [(v.field, v.description) for v in bad.field_violations] == [("widget.size", "too big")]


def test_reason_and_metadata_reach_the_client(channel) -> None:
    error = _fail(channel, "/t.T/Precondition")
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = error_details_pb2.ErrorInfo()
    rpc_status.from_call(error).details[0].Unpack(info)
    assert info.reason == "NOT_DELETED" and dict(info.metadata) == {"k": "v"}


def test_unexpected_exception_is_internal_without_details(channel) -> None:
    error = _fail(channel, "/t.T/Crash")
    assert error.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in error.details() and "Traceback" not in error.details()
    assert "req-123" in error.details()


def test_request_id_is_echoed_in_trailers(channel) -> None:
    _, call = channel.unary_unary("/t.T/Ok").with_call(b"hi", metadata=((REQUEST_ID_KEY, "req-9"),))
    assert dict(call.trailing_metadata())[REQUEST_ID_KEY] == "req-9"
