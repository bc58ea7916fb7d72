"""An in-memory copy of the vector index's sign bits, per namespace, for the
Hamming first pass (numpy `bitwise_count` instead of a sqlite-vec table scan).

Coherence with the store's writes comes from the change log of migration 5:
every insert, replace, update or delete of a `memory_vectors` row (the store's
own writes, the tombstone/content/purge triggers, a model change clearing the
index) appends the memory's rowid to `memory_vector_changes`. Before each scan
the cache reads the log's newest sequence number (one index seek); when it has
moved, the rows named since the last look are re-read from `memory_vectors` and
replace whatever the cache held for them (present: new bits, possibly another
namespace; absent: removed). The log and the rows are read in one read
transaction, so the cache is exactly the index as of the log position it records. The log prunes itself; a reader that fell behind
the pruned window reloads in full.

The cache only proposes candidates. Recall still joins them back to SQL
(`queries.pool_rows`: live memories of the caller's namespace only, exact float32
vectors; a rowid the cache got wrong never reaches the response), and a query
with a filter does not use the cache at all: its first pass stays in SQL with
the filter applied before the cut.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common.metrics import VECTOR_CACHE_ROWS
from services.storage.db import DEFAULT_READ_MMAP_MB, open_read_only
from services.storage.search import vector_changes

_CHUNK_ROWS = 65_536  # scan block: keeps the XOR temporaries in cache


def quantize(vector_f32: bytes) -> bytes:
    """Sign bits exactly as sqlite-vec's vec_quantize_binary (bit i of byte i/8,
    least significant first, set when the component is > 0)."""
    values = np.frombuffer(vector_f32, dtype=np.float32)
    return np.packbits(values > 0, bitorder="little").tobytes()


@dataclass
class _Namespace:
    rowids: npt.NDArray[np.int64]
    words: npt.NDArray[Any]  # (capacity, words per vector); rows [:size] are live
    size: int
    width: int  # bytes per vector

    @classmethod
    def empty(cls, width: int) -> _Namespace:
        dtype = np.uint64 if width % 8 == 0 else np.uint8
        per_row = width // np.dtype(dtype).itemsize
        return cls(np.empty(0, np.int64), np.empty((0, per_row), dtype), 0, width)

    def _as_words(self, blobs: Sequence[bytes]) -> npt.NDArray[Any]:
        raw = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), self.width)
        return raw.view(self.words.dtype)

    def remove(self, rowids: npt.NDArray[np.int64]) -> None:
        if not self.size or not len(rowids):
            return
        gone = np.isin(self.rowids[: self.size], rowids)
        if not gone.any():
            return
        keep = ~gone
        kept = int(keep.sum())
        self.rowids[:kept] = self.rowids[: self.size][keep]
        self.words[:kept] = self.words[: self.size][keep]
        self.size = kept

    def append(self, rowids: Sequence[int], blobs: Sequence[bytes]) -> None:
        if not rowids:
            return
        needed = self.size + len(rowids)
        if needed > len(self.rowids):
            capacity = max(needed, 2 * len(self.rowids), 1024)
            grown_rowids = np.empty(capacity, np.int64)
            grown_rowids[: self.size] = self.rowids[: self.size]
            grown_words = np.empty((capacity, self.words.shape[1]), self.words.dtype)
            grown_words[: self.size] = self.words[: self.size]
            self.rowids, self.words = grown_rowids, grown_words
        self.rowids[self.size : needed] = np.asarray(rowids, np.int64)
        self.words[self.size : needed] = self._as_words(blobs)
        self.size = needed

    def nearest(self, query_bits: bytes, limit: int) -> list[int]:
        """Rowids of the `limit` smallest Hamming distances, nearest first (ties by rowid)."""
        if not self.size:
            return []
        query = self._as_words([query_bits])[0]
        distances = np.empty(self.size, np.int32)
        for start in range(0, self.size, _CHUNK_ROWS):
            end = min(start + _CHUNK_ROWS, self.size)
            block = np.bitwise_xor(self.words[start:end], query)
            distances[start:end] = np.bitwise_count(block).sum(axis=1, dtype=np.int32)
        rowids = self.rowids[: self.size]
        if limit < self.size:
            # every row at or under the limit-th distance, so ties break by rowid
            kth = np.partition(distances, limit - 1)[limit - 1]
            picked = np.flatnonzero(distances <= kth)
        else:
            picked = np.arange(self.size)
        order = np.lexsort((rowids[picked], distances[picked]))[:limit]
        return [int(r) for r in rowids[picked][order]]


class VectorCache:
    """Per-namespace sign-bit matrices kept coherent through the change log.

    All SQLite and numpy work runs on one dedicated thread with its own
    read-only connection (numpy and SQLite release the GIL), off the event loop.
    """

    def __init__(
        self,
        path: str | Path,
        busy_timeout_ms: int = 5000,
        max_rows: int = 5_000_000,
        mmap_mb: int = DEFAULT_READ_MMAP_MB,
    ) -> None:
        self._path = path
        self._mmap_mb = mmap_mb
        self._max_rows = max_rows  # least recently searched namespaces leave beyond this
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: Any = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="vector-cache")
        self._lock = threading.Lock()
        self._seq = 0
        self._namespaces: dict[str, _Namespace | None] = {}  # None: not cacheable now
        self._available: bool | None = None
        self.reloads = 0  # full namespace loads (for tests and benchmarks)

    async def nearest(self, namespace: str, query_f32: bytes, limit: int) -> list[int] | None:
        """The namespace's `limit` nearest rowids by Hamming distance, or None when
        the cache cannot answer (no change log, mixed widths): use SQL then."""
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self._nearest, namespace, query_f32, limit
        )

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close)
        self._thread.shutdown(wait=True)

    # ---- on the cache thread ----------------------------------------------------------

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = open_read_only(
                self._path, busy_timeout_ms=self._busy_timeout_ms, mmap_mb=self._mmap_mb
            )
        return self._conn

    def _nearest(self, namespace: str, query_f32: bytes, limit: int) -> list[int] | None:
        with self._lock:
            conn = self._connection()
            if self._available is None:
                self._available = vector_changes.has_change_log(conn)
            if not self._available:
                return None
            vector_changes.begin_snapshot(conn)  # the log position and the rows: one snapshot
            try:
                self._catch_up(conn)
                if namespace not in self._namespaces:
                    self._load(conn, namespace)
                cached = self._namespaces[namespace]
                if cached is None:
                    self._load(conn, namespace)  # widths were mixed: maybe settled now
                    cached = self._namespaces[namespace]
            finally:
                vector_changes.end_snapshot(conn)
            query_bits = quantize(query_f32)
            if cached is None or (cached.size and cached.width != len(query_bits)):
                return None
            self._namespaces[namespace] = self._namespaces.pop(namespace)  # most recent last
            self._evict(keep=namespace)
            VECTOR_CACHE_ROWS.set(sum(c.size for c in self._namespaces.values() if c is not None))
            return cached.nearest(query_bits, limit)

    def _evict(self, keep: str) -> None:
        total = sum(c.size for c in self._namespaces.values() if c is not None)
        for space in list(self._namespaces):
            if total <= self._max_rows:
                return
            if space != keep:
                cached = self._namespaces.pop(space)
                total -= cached.size if cached is not None else 0

    def _catch_up(self, conn: Any) -> None:
        newest = vector_changes.newest_change(conn)
        if newest == self._seq:
            return
        oldest = vector_changes.oldest_change(conn)
        if not self._namespaces or newest < self._seq or oldest > self._seq + 1:
            # nothing cached yet, or the log was pruned past us: start over
            self._namespaces.clear()
            self._seq = newest
            return
        changed = vector_changes.changed_rowids(conn, self._seq, newest)
        self._seq = newest
        changed_array = np.asarray(changed, np.int64)
        for cached in self._namespaces.values():
            if cached is not None:
                cached.remove(changed_array)
        added: dict[str, tuple[list[int], list[bytes]]] = {}
        for rowid, space, bits in vector_changes.vector_rows(conn, changed):
            if space in self._namespaces:
                rowids, blobs = added.setdefault(space, ([], []))
                rowids.append(rowid)
                blobs.append(bits)
        for space, (rowids, blobs) in added.items():
            cached = self._namespaces[space]
            if cached is not None and cached.size == 0:
                cached = self._namespaces[space] = _Namespace.empty(len(blobs[0]))
            if cached is None or any(len(b) != cached.width for b in blobs):
                self._namespaces[space] = None
                continue
            cached.append(rowids, blobs)

    def _load(self, conn: Any, namespace: str) -> None:
        """Read the namespace in full, in the transaction that read the log
        position (in _catch_up): the rows are as of that position."""
        self.reloads += 1
        rows = vector_changes.namespace_rows(conn, namespace)
        widths = {len(row[1]) for row in rows}
        if len(widths) > 1:
            self._namespaces[namespace] = None
            return
        cached = _Namespace.empty(widths.pop() if widths else 0)
        if rows:
            cached.append([row[0] for row in rows], [row[1] for row in rows])
        self._namespaces[namespace] = cached
