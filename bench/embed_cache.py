"""The real local model's vectors, computed once and kept on disk, served to a
benchmark suite over HTTP.

Embedding dominates the quality benchmarks' cost (LongMemEval's 49k turns take
about half an hour of MiniLM on this machine), and the vectors of a fixed text
never change. So a benchmark can fill a cache (SQLite: sha256 of runtime, model
and text -> float32 vector) with the very model the suite would run
(services/common/providers/local_embedding.py, same runtime, same code), and
point the suite at an HTTP server speaking Ollama's `/api/embed` that answers
from it. A text the cache lacks (a question, a turn the store normalised) is
embedded on the spot by the same model and kept. Nothing is approximated: every
vector served is the one the local provider computes for that exact text.

The key names the model and runtime but not their versions: the cache file keeps
the runtime record (bench/provenance.py) of every install that wrote vectors to it
(table `runtimes`), and filling or serving under another embedding runtime
(onnxruntime, tokenizers, the model file, ...) prints a warning naming both, as
the vectors of two runtimes may then be mixed.

    .venv/bin/python bench/embed_cache.py fill [--budget-s 840] [--threads 2]
        (LongMemEval's dev turns; run it again to go on where it stopped)
    .venv/bin/python bench/embed_cache.py parts --db DIR/engram.db
        (sentence vectors for a kept database embedded without them, see `add_parts`)
    .venv/bin/python bench/embed_cache.py context --db DIR/engram.db [--next] [--keep-parts]
        [--questions N]
        (an experiment: each turn's context vector as its part, see `add_context`)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]

import provenance  # noqa: E402

from services.common.config import LOCAL_EMBEDDING_MODEL  # noqa: E402
from services.common.providers.local_embedding import local_embedding  # noqa: E402

RUNTIME = "onnx"  # the local provider's default runtime
DEFAULT_PATH = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    / "engram-bench"
    / f"vectors-{LOCAL_EMBEDDING_MODEL}-{RUNTIME}.sqlite"
)
BATCH = 256  # the model groups each call's texts by length: bigger calls, less padding


def key(text: str) -> bytes:
    return hashlib.sha256(f"{LOCAL_EMBEDDING_MODEL}\0{RUNTIME}\0{text}".encode()).digest()


class VectorCache:
    """Text -> the local model's unit vector; misses are embedded and kept."""

    def __init__(self, path: Path = DEFAULT_PATH, threads: int = 1) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB)")
        # one row per embedding runtime (bench/provenance.py EMBEDDING_KEYS) that wrote vectors
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS runtimes (first_write TEXT NOT NULL, record TEXT NOT NULL)"
        )
        self._db.commit()
        self._lock = threading.Lock()
        self._model = local_embedding(RUNTIME, threads)
        self.runtime = provenance.embedding_runtime(provenance.record())
        self._runtime_recorded = False
        self.computed = 0
        self.missed: list[str] = []  # the first texts embedded on the spot (diagnostics)

    def recorded_runtimes(self) -> list[dict[str, Any]]:
        """The embedding runtimes that wrote this file's vectors, first write first."""
        rows = self._db.execute("SELECT record FROM runtimes ORDER BY rowid").fetchall()
        return [json.loads(r[0]) for r in rows]

    def runtime_warning(self) -> str | None:
        """Why this file's vectors may not all be the current runtime's, or None:
        another runtime wrote some, or vectors were written before runtimes were
        recorded."""
        others = [r for r in self.recorded_runtimes() if r != self.runtime]
        if others:
            return (
                f"WARNING: {self.path} holds vectors of another embedding runtime; filling or "
                f"serving it now mixes vectors of two runtimes. "
                + " | ".join(f"recorded: {json.dumps(r)}" for r in others)
                + f" | current: {json.dumps(self.runtime)} | differs: "
                + " / ".join(provenance.differences(r, self.runtime) for r in others)
            )
        if (
            not self.recorded_runtimes()
            and self._db.execute("SELECT 1 FROM vectors LIMIT 1").fetchone()
        ):
            return (
                f"note: {self.path} holds vectors written before the cache recorded its runtime; "
                f"the current one will be recorded on the first write: {json.dumps(self.runtime)}"
            )
        return None

    def warn_runtime(self) -> None:
        """Print `runtime_warning` (on stderr), if any."""
        message = self.runtime_warning()
        if message:
            print(message, file=sys.stderr, flush=True)

    def _record_runtime(self) -> None:
        """Before this process's first write: add the current runtime to `runtimes`
        unless it is there, saying so when the file already held vectors (the
        caller holds the lock)."""
        if self._runtime_recorded:
            return
        recorded = self.recorded_runtimes()
        if self.runtime not in recorded:
            unrecorded = (
                not recorded and self._db.execute("SELECT 1 FROM vectors LIMIT 1").fetchone()
            )
            self._db.execute(
                "INSERT INTO runtimes VALUES (?, ?)",
                (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), json.dumps(self.runtime)),
            )
            self._db.commit()
            if recorded:
                print(
                    f"WARNING: {self.path}: writing vectors of another embedding runtime than "
                    f"the recorded one(s); this file now mixes vectors of two runtimes. "
                    + " | ".join(
                        f"recorded: {provenance.differences(r, self.runtime)}" for r in recorded
                    ),
                    file=sys.stderr,
                    flush=True,
                )
            elif unrecorded:
                print(
                    f"{self.path}: recorded the current runtime as this file's, on its first "
                    f"write since runtimes are recorded; its earlier vectors' runtime is not "
                    f"known ({provenance.summary()})",
                    file=sys.stderr,
                    flush=True,
                )
        self._runtime_recorded = True

    def cached(self, texts: Iterable[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(texts))
        with self._lock:
            for start in range(0, len(unique), 500):
                chunk = unique[start : start + 500]
                keys = {key(t): t for t in chunk}
                rows = self._db.execute(
                    f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(keys))})",
                    list(keys),
                ).fetchall()
                for k, blob in rows:
                    found[keys[k]] = np.frombuffer(blob, dtype=np.float32)
        return found

    def _compute(self, texts: list[str]) -> dict[str, np.ndarray]:
        vectors = asyncio.run(self._model.embed(texts))
        out = {t: np.asarray(v, dtype=np.float32) for t, v in zip(texts, vectors, strict=True)}
        with self._lock:
            self._record_runtime()
            self._db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                [(key(t), v.tobytes()) for t, v in out.items()],
            )
            self._db.commit()
        self.computed += len(texts)
        self.missed.extend(texts[: max(0, 20 - len(self.missed))])
        return out

    def vectors(self, texts: list[str]) -> list[np.ndarray]:
        """One vector per text, in order (misses computed now)."""
        found = self.cached(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        for start in range(0, len(missing), BATCH):
            found.update(self._compute(missing[start : start + BATCH]))
        return [found[t] for t in texts]

    def fill(self, texts: Iterable[str], budget_s: float) -> tuple[int, int]:
        """Embed the texts not cached yet, until `budget_s` is spent: (done, still missing)."""
        unique = list(dict.fromkeys(texts))
        have = self.cached(unique)
        missing = [t for t in unique if t not in have]
        started = time.monotonic()
        done = 0
        for start in range(0, len(missing), BATCH):
            if time.monotonic() - started > budget_s:
                break
            done += len(self._compute(missing[start : start + BATCH]))
        return done, len(missing) - done


class _Handler(BaseHTTPRequestHandler):
    cache: VectorCache

    def log_message(self, *args: Any) -> None:  # quiet
        return None

    def _send(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError):  # the caller gave up (its own timeout)
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"models": [{"name": LOCAL_EMBEDDING_MODEL}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = self.cache.vectors(texts)
        self._send({"model": body.get("model"), "embeddings": [v.tolist() for v in vectors]})


@contextmanager
def serving(cache: VectorCache) -> Iterator[dict[str, Any]]:
    """An Ollama-compatible embeddings server answering from `cache`; yields the
    engram.yaml settings that point a suite at it."""
    cache.warn_runtime()
    handler = type("Handler", (_Handler,), {"cache": cache})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {
            "providers": {
                "embedding": {
                    "kind": "ollama",
                    "base_url": f"http://127.0.0.1:{server.server_address[1]}",
                    "model": LOCAL_EMBEDDING_MODEL,
                }
            }
        }
    finally:
        server.shutdown()
        server.server_close()


def add_parts(cache: VectorCache, db: Path, compute: bool = False) -> tuple[int, int, int]:
    """Write the sentence vectors (issue 19) of every stored embedding of a kept
    SQLite database (migrated to the current schema first) exactly as the embed
    worker would send them: the memory's stored content split by
    services/common/text.py `sentences`, each sentence's cached vector, stored by
    services/common/vectors.py `normalized_parts_f16`. So a database imported
    before sentence vectors existed serves them without a second import. Texts
    the cache lacks are embedded now with `compute`, else their contents keep
    no parts (counted).
    Returns (rows given parts, sentences, rows skipped for a cache miss)."""
    from services.common.text import sentences
    from services.common.vectors import normalized_parts_f16
    from services.storage.db import open_read_write
    from services.storage.sqlite_migrations import apply_migrations

    conn = open_read_write(db)
    apply_migrations(conn)
    rows = conn.execute(
        "SELECT e.id, e.dimensions, (SELECT m.content FROM memories m WHERE "
        "m.namespace = e.namespace AND m.content_hash = e.content_hash LIMIT 1) "
        "FROM embeddings e WHERE e.parts IS NULL"
    ).fetchall()
    given = total = skipped = 0
    for start in range(0, len(rows), 2000):
        chunk = [(r[0], r[1], sentences(r[2])) for r in rows[start : start + 2000] if r[2]]
        chunk = [c for c in chunk if len(c[2]) > 1]
        texts = [s for c in chunk for s in c[2]]
        found = (
            dict(zip(texts, cache.vectors(texts), strict=True)) if compute else cache.cached(texts)
        )
        updates = []
        for row_id, dimensions, split in chunk:
            if any(s not in found for s in split):
                skipped += 1
                continue
            flat = np.concatenate([found[s] for s in split])
            updates.append((normalized_parts_f16(flat, dimensions), row_id))
            total += len(split)
        conn.execute("BEGIN")
        conn.executemany("UPDATE embeddings SET parts = ? WHERE id = ?", updates)
        conn.execute("COMMIT")
        given += len(updates)
    conn.close()
    return given, total, skipped


def _turn_key(source_id: str) -> tuple[str, int] | None:
    """(session, turn index) of a benchmark turn's source id: LoCoMo's dia_id
    "D3:12", LongMemEval's "<session id>:<turn index>"; None for another id."""
    session, _, index = source_id.rpartition(":")
    return (session, int(index)) if session and index.isdigit() else None


def context_texts(turns: list[tuple[str, str]], following: bool) -> dict[str, str]:
    """content -> its context text, for the (source id, content) turns of one
    namespace: the turn FIRST (MiniLM's 256-token truncation cuts the context,
    never the turn), then the nearest earlier turn of its session, and with
    `following` the nearest later one. A turn with no neighbour gets none."""
    sessions: dict[str, list[tuple[int, str]]] = {}
    for source_id, content in turns:
        turn = _turn_key(source_id)
        if turn is not None:
            sessions.setdefault(turn[0], []).append((turn[1], content))
    out: dict[str, str] = {}
    for items in sessions.values():
        items.sort()
        for i, (_, content) in enumerate(items):
            around = [items[i - 1][1]] if i > 0 else []
            if following and i + 1 < len(items):
                around.append(items[i + 1][1])
            if around:
                out.setdefault(content, "\n".join([content, *around]))
    return out


def add_context(
    cache: VectorCache,
    db: Path,
    following: bool = False,
    keep_parts: bool = False,
    namespaces: set[str] | None = None,
) -> tuple[int, int]:
    """Contextual retrieval without an LLM (issue 19, an experiment): give each
    benchmark turn of a kept database (LoCoMo, LongMemEval: source ids
    `_turn_key` reads) the vector of its `context_texts` as a part, so Recall's
    pool cosine (services/search/recall.py `_best_parts`) can meet a turn that
    means little alone ("Yes! the kids loved it") through the turn it answers.
    The part replaces the row's sentence vectors, or with `keep_parts` follows
    them. Context texts the cache lacks are embedded now. Only `namespaces`
    when given. Returns (rows given a context part, rows left as they were)."""
    from services.common.vectors import normalized_parts_f16
    from services.storage.db import open_read_write
    from services.storage.sqlite_migrations import apply_migrations

    conn = open_read_write(db)
    apply_migrations(conn)
    by_namespace: dict[str, list[tuple[str, str]]] = {}
    for namespace, source_id, content in conn.execute(
        "SELECT namespace, source_id, content FROM memories WHERE is_deleted = 0"
    ):
        if namespaces is None or namespace in namespaces:
            by_namespace.setdefault(namespace, []).append((source_id, content))
    given = left = 0
    for namespace, turns in sorted(by_namespace.items()):
        contexts = context_texts(turns, following)
        texts = list(contexts.values())
        found = dict(zip(texts, cache.vectors(texts), strict=True))
        rows = conn.execute(
            "SELECT e.id, e.dimensions, e.parts, m.content FROM embeddings e JOIN memories m "
            "ON m.namespace = e.namespace AND m.content_hash = e.content_hash "
            "AND m.is_deleted = 0 WHERE e.namespace = ?",
            (namespace,),
        ).fetchall()
        updates = []
        for row_id, dimensions, parts, content in rows:
            if content not in contexts:
                left += 1
                continue
            blob = normalized_parts_f16(found[contexts[content]], dimensions) or b""
            updates.append(((bytes(parts) if keep_parts and parts else b"") + blob, row_id))
        conn.execute("BEGIN")
        conn.executemany("UPDATE embeddings SET parts = ? WHERE id = ?", updates)
        if not keep_parts:  # a turn without context keeps no sentence parts either
            ids = {u[1] for u in updates}
            conn.executemany(
                "UPDATE embeddings SET parts = NULL WHERE id = ?",
                [(r[0],) for r in rows if r[0] not in ids],
            )
        conn.execute("COMMIT")
        given += len(updates)
    conn.close()
    return given, left


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["fill", "parts", "context"])
    parser.add_argument("--db", type=Path, help="parts, context: the kept database")
    parser.add_argument("--next", action="store_true", help="context: the next turn's too")
    parser.add_argument(
        "--keep-parts", action="store_true", help="context: after the sentence vectors"
    )
    parser.add_argument(
        "--questions", type=int, help="context: LongMemEval's first N questions' namespaces only"
    )
    parser.add_argument(
        "--compute-missing", action="store_true", help="parts: embed sentences the cache lacks"
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--budget-s", type=float, default=840.0, help="stop after this long")
    parser.add_argument("--threads", type=int, default=2, help="the model's intra-op threads")
    args = parser.parse_args()
    from longmemeval import DEFAULT_INPUT, haystack_texts, scored_questions

    cache = VectorCache(args.cache, args.threads)
    print(provenance.summary(), flush=True)
    cache.warn_runtime()
    if args.command == "parts":
        started = time.monotonic()
        given, total, skipped = add_parts(cache, args.db, args.compute_missing)
        print(
            f"{args.db}: {given} embeddings given {total} sentence vectors in "
            f"{time.monotonic() - started:.0f} s; {skipped} left without (a sentence not cached)"
        )
        return 0
    if args.command == "context":
        started = time.monotonic()
        wanted = None
        if args.questions:
            picked = scored_questions(DEFAULT_INPUT)[: args.questions]
            wanted = {f"lme-{q['question_id']}" for q in picked}
        given, left = add_context(cache, args.db, args.next, args.keep_parts, wanted)
        print(
            f"{args.db}: {given} embeddings given a context vector in "
            f"{time.monotonic() - started:.0f} s ({cache.computed} embedded now); {left} without"
        )
        return 0
    questions = scored_questions(DEFAULT_INPUT)
    started = time.monotonic()
    done, missing = cache.fill(haystack_texts(questions), args.budget_s)
    elapsed = time.monotonic() - started
    ready = 0  # questions, in run order, whose whole haystack is cached
    for question in questions:
        texts = set(haystack_texts([question]))
        if len(cache.cached(texts)) < len(texts):
            break
        ready += 1
    print(
        f"{args.cache}: embedded {done} texts in {elapsed:.0f} s "
        f"({done / max(elapsed, 1e-9):.1f}/s); {missing} still missing; "
        f"the first {ready} questions in run order are complete"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
