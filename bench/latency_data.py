"""Data for bench/recall_latency.py: realistic memories, their vectors, and the
databases, built with the store's own write path and cached on disk.

Text: the 2,760 LoCoMo turns ("Speaker: text", their session dates), then
synthetic memories, each made of k sentences taken from k different random
turns (k drawn from the turns' own sentence-count distribution), prefixed with
the speaker of the first source turn; exact duplicates are redrawn. Term
statistics therefore stay those of the conversations. Synthetic memories come
in sessions of 10-30 consecutive memories sharing one event time, sessions
0.1-1 day apart from 2018 on.

Vectors: the first 10,000 memories (all real turns and 7,240 synthetic ones) and
every distinct "Speaker: sentence" are embedded for real with the local MiniLM.
Every later memory gets a derived vector: the normalised mean of its sentences'
vectors plus a Gaussian direction of norm r, re-normalised, where r is
calibrated on the 7,240 synthetic memories that also have a real embedding: with
c = mean cos(real embedding, normalised sentence mean), r = sqrt(1/c^2 - 1), so a
derived vector sits as far from the sentence mean as a real embedding does.
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import json
import math
import os
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from services.common import clock
from services.common.normalize import normalize_content
from services.common.providers.embedding import LOCAL_MODEL, LocalEmbedding
from services.storage.db import ReadPool, open_read_write
from services.storage.sqlite_migrations import apply_migrations
from services.storage.store import repository as repo
from services.store.memories import MemoryStore
from services.store.rules import MemoryFields, draft_memory
from services.store.writer import Writer
from suite import shared_dataset

LOCOMO = shared_dataset("locomo/generic")
NAMESPACE = "latency"
DIMENSIONS = 384
REAL_VECTORS = 10_000  # memories embedded for real; later ones get derived vectors
DATA_VERSION = 1  # bump when the synthesis changes, so cached files are rebuilt
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Corpus:
    contents: list[str]  # memory content, insertion order
    speakers: list[str]
    event_times: list[str]
    source_ids: list[str]  # LoCoMo turn id for real turns, syn-N for synthetic ones
    parts: list[tuple[int, ...]]  # sentence indices of a synthetic memory; () for real
    sentences: list[str]  # "Speaker: sentence", distinct
    real_turns: int


def load_turns() -> list[dict[str, Any]]:
    with open(LOCOMO / "corpus.jsonl") as handle:
        return [json.loads(line) for line in handle]


def load_queries() -> list[dict[str, Any]]:
    with open(LOCOMO / "queries.jsonl") as handle:
        return [json.loads(line) for line in handle]


def _session_time(date: str) -> str:
    return clock.to_text(datetime.fromisoformat(date).replace(tzinfo=UTC))


def build_corpus(size: int, seed: int = 7) -> Corpus:
    turns = load_turns()
    rng = random.Random(seed)
    contents = [f"{t['speaker']}: {t['text']}" for t in turns]
    speakers = [t["speaker"] for t in turns]
    event_times = [_session_time(t["date"]) for t in turns]
    source_ids = [t["id"] for t in turns]
    parts: list[tuple[int, ...]] = [() for _ in turns]
    sentence_index: dict[str, int] = {}
    by_turn: list[list[int]] = []
    for turn in turns:
        pieces = [s for s in _SENTENCE.split(turn["text"].strip()) if s]
        by_turn.append(
            [
                sentence_index.setdefault(f"{turn['speaker']}: {s}", len(sentence_index))
                for s in pieces
            ]
        )
    sentences = list(sentence_index)
    texts = [s.split(": ", 1)[1] for s in sentences]
    counts = [len(p) for p in by_turn]
    seen = {normalize_content(c).content_hash for c in contents}
    start = datetime(2018, 1, 1, 9, 0, tzinfo=UTC)
    session_left = 0
    session_time = ""
    while len(contents) < size:
        k = rng.choice(counts)
        source_turns = rng.sample(range(len(turns)), k)
        picked = tuple(rng.choice(by_turn[t]) for t in source_turns)
        speaker = turns[source_turns[0]]["speaker"]
        content = f"{speaker}: " + " ".join(texts[i] for i in picked)
        content_hash = normalize_content(content).content_hash
        if content_hash in seen:  # the store would deduplicate it
            continue
        seen.add(content_hash)
        if session_left == 0:
            session_left = rng.randint(10, 30)
            start += timedelta(days=rng.uniform(0.1, 1.0))
            session_time = clock.to_text(start.replace(second=0, microsecond=0))
        session_left -= 1
        contents.append(content)
        speakers.append(speaker)
        event_times.append(session_time)
        source_ids.append(f"syn-{len(contents) - len(turns)}")
        parts.append(picked)
    return Corpus(contents, speakers, event_times, source_ids, parts, sentences, len(turns))


# ---- page cache ------------------------------------------------------------------------


class PageCacheLock:
    """Keep files resident in the page cache (mmap + mlock) while held.

    This VM runs DAMON page-out of memory idle for ~30 s, which drops database
    pages between queries; a server with enough memory keeps its database in
    the page cache, and that steady state is what the figures should describe.
    """

    def __init__(self, paths: list[Path]) -> None:
        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self._libc.mmap.restype = ctypes.c_void_p
        self._libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        self._libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._maps: list[tuple[int, int, int]] = []
        self.locked: list[str] = []
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            size = os.fstat(fd).st_size
            addr = self._libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
            if addr in (None, ctypes.c_void_p(-1).value):
                os.close(fd)
                continue
            self._maps.append((addr, size, fd))
            if self._libc.mlock(ctypes.c_void_p(addr), size) == 0:
                self.locked.append(str(path))

    def release(self) -> None:
        for addr, size, fd in self._maps:
            self._libc.munmap(ctypes.c_void_p(addr), size)  # also unlocks
            os.close(fd)
        self._maps.clear()


# ---- vectors ------------------------------------------------------------------------


def _digest(texts: list[str]) -> str:
    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]


def embed_cached(
    provider: LocalEmbedding, texts: list[str], cache_dir: Path, name: str
) -> np.ndarray:
    """MiniLM vectors (normalised, float32) of `texts`, cached by content digest."""
    path = cache_dir / f"{name}-{_digest(texts)}.npy"
    if path.exists():
        return np.load(path)
    print(f"  embedding {len(texts)} {name} with the local MiniLM ...", flush=True)
    # the provider's own encoder (either runtime), in batches
    batches = [provider._encode(texts[i : i + 64]) for i in range(0, len(texts), 64)]
    vectors = _unit(np.asarray([v for batch in batches for v in batch], dtype=np.float32))
    np.save(path, vectors)
    return vectors


def _unit(matrix: np.ndarray) -> np.ndarray:
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


@dataclass
class Vectors:
    memories: np.ndarray  # one row per memory of the corpus, float32, unit length
    sentences: np.ndarray
    real: int  # rows embedded for real
    calibration_cos: float  # mean cos(real embedding, sentence mean) of synthetic memories
    noise_norm: float


def corpus_vectors(
    provider: LocalEmbedding,
    corpus: Corpus,
    cache_dir: Path,
    real_vectors: int = REAL_VECTORS,
    seed: int = 11,
) -> Vectors:
    real = min(real_vectors, len(corpus.contents))
    embedded = embed_cached(provider, corpus.contents[:real], cache_dir, "memories")
    sentences = embed_cached(provider, corpus.sentences, cache_dir, "sentences")
    means = np.zeros((len(corpus.contents), DIMENSIONS), dtype=np.float32)
    for i in range(corpus.real_turns, len(corpus.contents)):
        means[i] = sentences[list(corpus.parts[i])].mean(axis=0)
    # calibrated on the same memories whatever `real_vectors` is
    calibration = slice(corpus.real_turns, min(real, REAL_VECTORS))
    if calibration.stop > calibration.start:
        unit_means = _unit(means[calibration])
        cos = float(np.mean(np.sum(unit_means * embedded[calibration], axis=1)))
    else:
        cos = 0.9
    noise_norm = math.sqrt(1.0 / cos**2 - 1.0)
    vectors = np.empty((len(corpus.contents), DIMENSIONS), dtype=np.float32)
    vectors[:real] = embedded
    if len(corpus.contents) > real:
        rng = np.random.default_rng(seed)
        derived = _unit(means[real:])
        noise = rng.standard_normal(derived.shape).astype(np.float32)
        noise *= noise_norm / np.linalg.norm(noise, axis=1, keepdims=True)
        vectors[real:] = _unit(derived + noise)
    return Vectors(vectors, sentences, real, cos, noise_norm)


# ---- databases ------------------------------------------------------------------------


def _marker(path: Path) -> Path:
    return path.with_suffix(".json")


def cached_db(path: Path, description: dict[str, Any]) -> bool:
    marker = _marker(path)
    return path.exists() and marker.exists() and json.loads(marker.read_text()) == description


def migrate(path: Path) -> list[str]:
    """Bring a cached file to the current schema (new migrations only add tables
    and triggers, so the cached data stays valid)."""
    conn = open_read_write(path, synchronous="NORMAL")
    try:
        return apply_migrations(conn)
    finally:
        conn.close()


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    _marker(path).unlink(missing_ok=True)


async def build_memory_db(
    path: Path, corpus: Corpus, vectors: np.ndarray, size: int, description: dict[str, Any]
) -> float:
    """Memories through MemoryStore.import_drafts (rows, FTS triggers, history,
    jobs), then vectors through the repository's embedding and index functions,
    all on the store's single writer. Returns seconds taken."""
    _remove_db(path)
    started = asyncio.get_running_loop().time()
    conn = open_read_write(path, synchronous="NORMAL")
    apply_migrations(conn)
    writer = Writer(conn)
    store = MemoryStore(writer, ReadPool(path))
    hashes: list[str] = []
    try:
        for start in range(0, size, 5000):
            drafts = [
                draft_memory(
                    MemoryFields(
                        namespace=NAMESPACE,
                        content=corpus.contents[i],
                        who=corpus.speakers[i],
                        source_type="locomo" if i < corpus.real_turns else "synthetic",
                        source_id=corpus.source_ids[i],
                        event_time=corpus.event_times[i],
                    )
                )
                for i in range(start, min(start + 5000, size))
            ]
            outcomes = await store.import_drafts(drafts)
            bad = [o for o in outcomes if o.status != "created"]
            if bad:
                raise RuntimeError(f"import did not create every memory: {bad[:3]}")
            hashes.extend(d.content.content_hash for d in drafts)
            print(f"  {path.name}: {start + len(drafts)} memories", flush=True)
        at = clock.now_text()
        await writer.submit(lambda c: repo.set_index_model(c, LOCAL_MODEL, DIMENSIONS, at))
        for start in range(0, size, 5000):
            chunk = [
                (hashes[i], vectors[i].tobytes()) for i in range(start, min(start + 5000, size))
            ]

            def store_vectors(c: Any, chunk: list[tuple[str, bytes]] = chunk) -> None:
                for content_hash, blob in chunk:
                    repo.upsert_embedding(
                        c, NAMESPACE, content_hash, LOCAL_MODEL, blob, DIMENSIONS, at
                    )

            await writer.submit(store_vectors)
        indexed = await writer.submit(lambda c: repo.index_all_embedded(c))
        # The embed jobs import queued are done: their vectors are in (as the
        # embedding worker's CompleteEmbeds would leave them).
        await writer.submit(
            lambda c: c.execute(
                "UPDATE memory_jobs SET status = 'completed', completed_at = ?, updated_at = ? "
                "WHERE job_type = 'embed'",
                (at, at),
            )
        )
        await writer.submit(
            lambda c: c.execute("UPDATE memories SET embedding_model = ?", (LOCAL_MODEL,))
        )
        if indexed != size:
            raise RuntimeError(f"indexed {indexed} of {size} memories")
    finally:
        writer.close()
    _marker(path).write_text(json.dumps(description))
    return asyncio.get_running_loop().time() - started


def build_vector_db(
    path: Path,
    base: np.ndarray,
    size: int,
    noise_norm: float,
    description: dict[str, Any],
    seed: int = 13,
) -> float:
    """The vector channel's tables at `size` rows: minimal memories rows (content
    "v<N>", the FTS insert trigger dropped: this file serves vector queries only)
    through repository.insert_memory_rows, vectors through executemany into
    `embeddings`, then repository.index_all_embedded (vec_quantize_binary)."""
    _remove_db(path)
    started = datetime.now(UTC)
    conn = open_read_write(path, synchronous="NORMAL")
    apply_migrations(conn)
    conn.execute("DROP TRIGGER memories_ai")
    rng = np.random.default_rng(seed)
    at = clock.now_text()
    chunk = 50_000
    for start in range(0, size, chunk):
        n = min(chunk, size - start)
        rows = []
        for i in range(start, start + n):
            content = f"v{i}"
            rows.append(
                repo.MemoryRow(
                    id=repo.new_id(),
                    namespace=NAMESPACE,
                    content=content,
                    normalized_content=content,
                    content_hash=hashlib.sha256(content.encode()).hexdigest(),
                    type="fact",
                    importance=0.8,
                    tags="[]",
                    pinned=0,
                    who="",
                    why="",
                    source_type="synthetic",
                    source_id="",
                    created_at=at,
                    # sessions of 20 memories sharing an event time
                    event_time=clock.to_text(
                        datetime(2018, 1, 1, tzinfo=UTC) + timedelta(hours=(i // 20))
                    ),
                )
            )
        picks = base[np.arange(start, start + n) % len(base)]
        noise = rng.standard_normal(picks.shape).astype(np.float32)
        noise *= noise_norm / np.linalg.norm(noise, axis=1, keepdims=True)
        block = _unit(picks + noise)
        conn.execute("BEGIN IMMEDIATE")
        repo.insert_memory_rows(conn, rows)
        conn.executemany(
            "INSERT INTO embeddings(namespace, content_hash, model, dimensions, vector, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                (NAMESPACE, r.content_hash, LOCAL_MODEL, DIMENSIONS, block[j].tobytes(), at)
                for j, r in enumerate(rows)
            ),
        )
        conn.execute("COMMIT")
        print(f"  {path.name}: {start + n} vectors", flush=True)
    conn.execute("BEGIN IMMEDIATE")
    repo.set_index_model(conn, LOCAL_MODEL, DIMENSIONS, at)
    indexed = repo.index_all_embedded(conn)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    if indexed != size:
        raise RuntimeError(f"indexed {indexed} of {size} vectors")
    _marker(path).write_text(json.dumps(description))
    return (datetime.now(UTC) - started).total_seconds()
