"""Weak memories (seed 003 "weak_facts"): live memories whose current decayed
confidence is below `memory.decay_threshold`. Listed per namespace, counted
for diagnostics, and soft-deleted by the retention sweep only when
`memory.decay_prune` is on (services/store/admin.py), each with a `deleted`
history event whose actor is `decay`, so RecoverMemory brings one back."""

from __future__ import annotations

from dataclasses import dataclass

from services.common import clock
from services.common.config import Config
from services.common.memory_record import MemoryRecord
from services.storage.connection import Connection
from services.storage.db import ReadPool
from services.storage.store import decay_sql
from services.store import mutations
from services.store.inputs import WeakPageInput
from services.store.page_tokens import encode_page_token

DECAY_ACTOR = "decay"
PAGE_KIND = "weak_memories"  # what its page tokens are bound to


@dataclass(frozen=True)
class DecayPolicy:
    threshold: float = 0.05
    default_rate: float = 0.1
    prune: bool = False

    @classmethod
    def from_config(cls, config: Config) -> DecayPolicy:
        m = config.memory
        return cls(m.decay_threshold, m.decay_rate_default, m.decay_prune)


@dataclass(frozen=True)
class WeakMemory:
    memory: MemoryRecord
    current_confidence: float


class WeakMemories:
    def __init__(self, reads: ReadPool, policy: DecayPolicy) -> None:
        self._reads = reads
        self.policy = policy

    async def page(self, asked: WeakPageInput) -> tuple[list[WeakMemory], str]:
        """A page of the namespace's weak memories, in the order they were written."""
        namespace, size, after = asked.namespace, asked.page_size, asked.after
        p = self.policy
        rows = await self._reads.fetch_all(
            decay_sql.weak_page_query(
                namespace,
                p.threshold,
                p.default_rate,
                clock.now_text(),
                after,
                size + 1,
                dialect=self._reads.dialect,
            )
        )
        found = [WeakMemory(MemoryRecord.from_row(r), r["current_confidence"]) for r in rows]
        next_token = ""
        if len(rows) > size:
            found = found[:size]
            next_token = encode_page_token(PAGE_KIND, namespace, [rows[size - 1]["rowid"]])
        return found, next_token

    async def count(self) -> int:
        p = self.policy
        row = await self._reads.fetch_one(
            decay_sql.weak_count_query(
                p.threshold, p.default_rate, clock.now_text(), dialect=self._reads.dialect
            )
        )
        return int(row[0])

    def prune(self, conn: Connection, at: str, limit: int) -> int:
        """Soft-delete up to `limit` weak memories in the caller's transaction."""
        p = self.policy
        rows = decay_sql.weakest_batch(conn, p.threshold, p.default_rate, at, limit)
        for row in rows:
            mutations.soft_delete(
                conn,
                MemoryRecord.from_row(row),
                actor=DECAY_ACTOR,
                reason=(
                    f"decayed: confidence {row['current_confidence']:.4f} below "
                    f"decay_threshold {p.threshold:g}"
                ),
                at=at,
                metadata={"current_confidence": row["current_confidence"]},
            )
        return len(rows)
