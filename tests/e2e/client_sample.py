"""A user's program: remember, recall, handle a NotFound (type-checked with mypy --strict)."""

import sys

from engram.client import Engram, NotFound

with Engram(sys.argv[1], search_address=sys.argv[2]) as engram:
    stored = engram.remember("Alice prefers green tea", namespace="sample", tags=["alice"])
    print("remembered", stored.memory.id)
    for hit in engram.recall("green tea", namespace="sample").results:
        print("recalled", hit.memory.content)
    try:
        engram.get_memory("no-such-id", namespace="sample")
    except NotFound as error:
        print("not found", error.reason, error.request_id)
