"""What every channel of one Recall reads one namespace under (RecallScope)."""

from __future__ import annotations

from dataclasses import dataclass

from services.common import clock
from services.common.memory_filter import MemoryFilterSpec
from services.storage.db import Reads
from services.storage.dialect import Dialect


@dataclass(frozen=True, slots=True)
class RecallScope:
    """One namespace of one Recall, built once before its channels read: the
    Recall's read snapshot, the namespace, the filter every channel applies
    inside its SQL (its `as_of` instant and `valid_during` ranges included),
    and two facts read once in the snapshot: whether the unfiltered namespace
    holds every live memory (`whole_index`: SQLite's channels then use FTS5's
    own statistics and the plain vector scan; always False on Postgres, whose
    statistics are per namespace) and the vector index's model. `dialect`: the
    SQL the query builders write (the read pool's)."""

    reads: Reads
    namespace: str
    spec: MemoryFilterSpec
    whole_index: bool
    model: str
    dialect: Dialect

    def at(self) -> str:
        """The instant a link must be valid at: the filter's `as_of`, else now."""
        return self.spec.as_of or clock.now_text()
