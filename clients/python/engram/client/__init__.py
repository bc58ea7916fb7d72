"""The Python client of Engram's public gRPC APIs.

    from engram.client import Engram, NotFound

    with Engram("127.0.0.1:50051") as engram:
        memory = engram.remember("Alice prefers tea", namespace="team-a").memory
        for hit in engram.recall("tea", namespace="team-a").results:
            print(hit.memory.content)

Method names are the RPC names in snake_case, with keyword arguments named like the
request fields. Results are the generated protobuf messages: the response itself,
or, when the response holds nothing but one message (GetMemory's `memory`), that
message. Listings are iterators that fetch page after page.
"""

from engram.client._common import (
    ImportProgress,
    ImportSummary,
    export_item,
    memory_filter,
    timestamp,
)
from engram.client.aio import AsyncEngram
from engram.client.channel import RetryPolicy, Tls, service_config
from engram.client.errors import (
    AlreadyExists,
    DeadlineExceeded,
    EngramError,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    PrivacyBlocked,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    VersionConflict,
    WrongSuite,
)
from engram.client.sync import Engram
from engram.common.v1.memory_pb2 import Memory, MemoryFilter
from engram.store.v1.store_pb2 import (
    FORGET_MODE_EXECUTE,
    FORGET_MODE_PREVIEW,
    ImportItem,
    MemoryPatch,
)

__all__ = [
    "FORGET_MODE_EXECUTE",
    "FORGET_MODE_PREVIEW",
    "AlreadyExists",
    "AsyncEngram",
    "DeadlineExceeded",
    "Engram",
    "EngramError",
    "FailedPrecondition",
    "FieldViolation",
    "ImportItem",
    "ImportProgress",
    "ImportSummary",
    "InvalidArgument",
    "Memory",
    "MemoryFilter",
    "MemoryPatch",
    "NotFound",
    "PermissionDenied",
    "PrivacyBlocked",
    "ResourceExhausted",
    "RetryPolicy",
    "Tls",
    "Unauthenticated",
    "Unavailable",
    "VersionConflict",
    "WrongSuite",
    "export_item",
    "memory_filter",
    "service_config",
    "timestamp",
]
