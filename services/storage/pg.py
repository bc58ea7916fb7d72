"""PostgreSQL connections (issue 21's backend, `storage.kind: postgres`), opened
the same way everywhere, like services/storage/sqlite.py's SQLite ones.

SqliteApi puts a psycopg connection behind the part of sqlite3's connection API
the store uses, so services/storage/store/repository.py's SQL is written once for both;
PgReadPool is db.ReadPool's Postgres twin, taking the same sqlite3-style SQL.

psycopg 3 is only imported here and by the Postgres modules, so an install
without the `postgres` extra never needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg import sql
from psycopg.adapt import AdaptersMap, Loader
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

from services.common.errors import StorageTimedOut, StorageUnavailable
from services.storage import sqlite
from services.storage.dialect import POSTGRES
from services.storage.memory_filter_sql import NOW_SQL

Connection = psycopg.Connection
IntegrityError = psycopg.errors.IntegrityError


class Row(tuple[Any, ...]):
    """A result row read by position or by column name, as sqlite3.Row is, so the
    Postgres modules read rows the way the SQLite repository does."""

    _index: dict[str, int]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def row_factory(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    return _row_type(tuple(column.name for column in cursor.description or ()))


@functools.lru_cache(maxsize=1024)
def _row_type(names: tuple[str, ...]) -> type[Row]:
    """One Row class per result shape (a class per query would cost more than
    a small query does)."""
    return type("Row", (Row,), {"_index": {name: i for i, name in enumerate(names)}})


class _NumericLoader(Loader):
    """`numeric` as SQLite returns the same values: an int when whole, else a
    float. The schema has no numeric column; numeric comes from sum() over
    integers (and the like), which SQLite answers with an int, not a Decimal."""

    def load(self, data: Any) -> int | float:
        text = bytes(data)
        try:
            return int(text)
        except ValueError:
            return float(text)


# Every Engram connection's adapters: psycopg's, numeric as above.
ADAPTERS = AdaptersMap(psycopg.adapters)
ADAPTERS.register_loader("numeric", _NumericLoader)


def _options(settings: dict[str, str]) -> str:
    return " ".join(f"-c {name}={value}" for name, value in settings.items())


# storage.postgres.connect_timeout_s's default: libpq waits for an unreachable
# host as long as the kernel's TCP retries (minutes) without one.
DEFAULT_CONNECT_TIMEOUT_S = 5


def _connect(
    dsn: str, application_name: str, options: dict[str, str], connect_timeout_s: int
) -> Any:
    """A connection, or psycopg.OperationalError within connect_timeout_s (per host
    the DSN lists; it overrides a connect_timeout written in the DSN)."""
    return psycopg.connect(
        dsn,
        autocommit=False,
        row_factory=row_factory,
        context=ADAPTERS,
        application_name=application_name,
        options=_options(options),
        connect_timeout=connect_timeout_s,
    )


def open_read_write(
    dsn: str,
    *,
    statement_timeout_ms: int = 0,
    application_name: str = "engram-store",
    connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S,
) -> Any:
    """The store's read-write connection. Autocommit is off: every write runs in
    an explicit transaction (`with conn.transaction():`), committed before the
    write is acknowledged, as with SQLite's BEGIN IMMEDIATE. `statement_timeout_ms`
    0 means none. Times are TEXT written by services/common/clock.py, so the
    session time zone never enters a stored value; UTC is set all the same."""
    return _connect(
        dsn,
        application_name,
        {"statement_timeout": str(int(statement_timeout_ms)), "TimeZone": "UTC"},
        connect_timeout_s,
    )


def _read_only_options(statement_timeout_ms: int) -> dict[str, str]:
    return {
        "default_transaction_read_only": "on",
        "statement_timeout": str(int(statement_timeout_ms)),
        "TimeZone": "UTC",
    }


def open_read_only(
    dsn: str,
    *,
    statement_timeout_ms: int = 0,
    application_name: str = "engram-search",
    connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S,
) -> Any:
    """A reader: every transaction it opens is read-only
    (`default_transaction_read_only`), so a write by mistake fails as SQLite's
    `mode=ro` makes it fail. That setting is a guard, not a boundary: a session
    may turn it off. The boundary is the role in the reader's DSN: give the
    search service a role created by `grant_reader`, which holds SELECT only, and
    no SQL it runs can write (issue 21: "search reads through its own read-only
    role"). Both, because the guard also protects a deployment that reuses the
    store's role."""
    return _connect(
        dsn, application_name, _read_only_options(statement_timeout_ms), connect_timeout_s
    )


def describe(dsn: str) -> str:
    """user@host:port/dbname of a DSN, for messages: never its password."""
    params = conninfo_to_dict(dsn)
    user = f"{params['user']}@" if params.get("user") else ""
    port = f":{params['port']}" if params.get("port") else ""
    return f"{user}{params.get('host') or 'localhost'}{port}/{params.get('dbname') or ''}"


def dsn_user(dsn: str) -> str | None:
    """The role a DSN names, None when it names none (libpq's default applies)."""
    user = conninfo_to_dict(dsn).get("user")
    return str(user) if user else None


def grant_reader(conn: Any, role: str) -> None:
    """Let `role` (an existing login role) read every table of the schema, now and
    those later migrations create, and nothing else. Run by the owner of the
    tables (the store's role), in the caller's transaction."""
    ident = sql.Identifier(role)
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(ident))
    conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(ident))
    conn.execute(
        sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {}").format(
            ident
        )
    )


# ---- the store's SQL on Postgres: sqlite3's connection API over psycopg ----------

# NOW_SQL (services/storage/memory_filter_sql.py), the one SQLite function the shared
# filter SQL holds, in the same stored form: milliseconds padded to nine digits,
# one instant per statement as SQLite's 'now' is.
PG_NOW_SQL = (
    "to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"000000Z\"')"
)
# The writer's statements that differ: SQLite's BEGIN IMMEDIATE takes the write
# lock up front; a Postgres transaction locks rows as it writes them.
_STATEMENTS = {"BEGIN IMMEDIATE": "BEGIN"}


@functools.lru_cache(maxsize=2048)
def translate(statement: str) -> str:
    """sqlite3's SQL text as psycopg's: `?` becomes `%s`, `:name` becomes
    `%(name)s`, a literal `%` becomes `%%`, NOW_SQL becomes PG_NOW_SQL; nothing
    inside a string literal, a quoted identifier or a comment is a placeholder
    (a `%` there is still doubled: psycopg scans the whole text). Cached: the
    repository builds a few hundred distinct texts, each translated once."""
    text = _translated(statement, raw=False)
    assert text is not None  # only a raw translation can be None
    return text


@functools.lru_cache(maxsize=2048)
def translate_raw(statement: str) -> str | None:
    """sqlite3's SQL text with `?` as Postgres's own `$1, $2...` (NOW_SQL as in
    translate, `%` left alone), for psycopg's RawCursor; None when the text has
    no `?` (or `:name` ones). Why: psycopg re-parses every query longer than
    4096 characters or with more than 50 parameters on every execute (its
    cache skips them), and the writer's multi-row INSERTs (repository.insert_rows)
    are exactly those: the parse cost more than the server's work (bench/README.md,
    "Remember and ImportMemories"). A raw query is sent as it is."""
    return _translated(statement, raw=True)


def _translated(statement: str, *, raw: bool) -> str | None:
    special = _STATEMENTS.get(" ".join(statement.split()).upper())
    if special is not None:
        return None if raw else special
    percent = "%" if raw else "%%"
    text = statement.replace(NOW_SQL, PG_NOW_SQL)
    out: list[str] = []
    i, n = 0, len(text)
    positional = 0
    named = False
    while i < n:
        c = text[i]
        if c in "'\"":  # a literal or quoted identifier; a doubled quote stays inside
            end = i + 1
            while end < n:
                if text[end] == c:
                    if end + 1 < n and text[end + 1] == c:
                        end += 2
                        continue
                    break
                end += 1
            out.append(text[i : end + 1].replace("%", percent))
            i = end + 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(text[i:end].replace("%", percent))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(text[i:end].replace("%", percent))
            i = end
        elif c == "?":
            if i + 1 < n and text[i + 1].isdigit():
                raise ValueError(f"numbered parameters are not supported: {statement[:80]!r}")
            positional += 1
            out.append(f"${positional}" if raw else "%s")
            i += 1
        elif (
            c == ":"
            and i + 1 < n
            and (text[i + 1].isalpha() or text[i + 1] == "_")
            and (i == 0 or text[i - 1] != ":")
        ):
            end = i + 1
            while end < n and (text[end].isalnum() or text[end] == "_"):
                end += 1
            named = True
            out.append(f"%({text[i + 1 : end]})s")
            i = end
        elif c == "%":
            out.append(percent)
            i += 1
        else:
            out.append(c)
            i += 1
    if positional and named:
        raise ValueError(f"both ? and :name parameters in one statement: {statement[:80]!r}")
    if raw and not positional:
        return None
    return "".join(out)


def execute(conn: Any, statement: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
    """One sqlite3-style statement on a psycopg connection: its cursor. With `?`
    parameters it goes as Postgres's $n through a RawCursor (translate_raw says
    why); `:name` ones and none through psycopg's own conversion."""
    raw = translate_raw(statement)
    if raw is not None:
        return psycopg.RawCursor(conn).execute(raw, params)
    return conn.execute(translate(statement), params)


class SqliteApi:
    """A psycopg connection behind the part of sqlite3's connection API the
    store's repository and writer use, so their SQL has one home for both
    backends: `execute` and `executemany` take sqlite3's parameter styles and
    return a cursor (fetchone, fetchall, rowcount, iteration; rows read by
    position or name), and the writer's BEGIN IMMEDIATE / SAVEPOINT / RELEASE /
    ROLLBACK TO / COMMIT run as they are written.

    Like the store's SQLite connection (isolation_level=None), a statement
    outside an explicit transaction commits on its own: the connection is put in
    autocommit, and BEGIN (or `transaction()`) opens a transaction."""

    dialect = POSTGRES

    def __init__(self, conn: Any) -> None:
        conn.autocommit = True  # raises if a transaction is open: the caller ends it first
        self.raw = conn

    def execute(self, statement: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        return execute(self.raw, statement, params)

    def executemany(
        self, statement: str, params: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> Any:
        raw = translate_raw(statement)
        if raw is not None:
            cursor: Any = psycopg.RawCursor(self.raw)
            cursor.executemany(raw, params)
            return cursor
        cursor = self.raw.cursor()
        cursor.executemany(translate(statement), params)
        return cursor

    @property
    def broken(self) -> bool:
        """The server is gone (psycopg saw the connection die): reopen, do not reuse."""
        return bool(self.raw.broken or self.raw.closed)

    @property
    def in_transaction(self) -> bool:
        return bool(self.raw.info.transaction_status != TransactionStatus.IDLE)

    def transaction(self) -> Any:
        """psycopg's transaction block (BEGIN ... COMMIT, ROLLBACK on error)."""
        return self.raw.transaction()

    def commit(self) -> None:
        self.raw.commit()

    def rollback(self) -> None:
        self.raw.rollback()

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> SqliteApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- reads: db.ReadPool's interface over Postgres ------------------------------------


class PgReadPool(sqlite.ReadPool):
    """db.ReadPool on PostgreSQL: the same calls (fetch_all, fetch_one,
    snapshot), the same sqlite3-style SQL (translated here), rows read by
    position or name. A subclass so every reader typed `ReadPool` takes it;
    it shares none of the SQLite pool's workings.

    Sync psycopg connections, each used by one caller at a time, handed out
    from a queue as db.ReadPool hands out SQLite's, the query run on the
    pool's threads (libpq waits for the server with the GIL released).
    Measured against psycopg's async connections, from a queue like this one
    or from psycopg_pool: threads read as fast or faster in every run (point
    reads 1.1-5x; psycopg_pool's checkout is the slowest at 16 callers), on
    a loaded 2-core machine (bench/README.md, "The Postgres read pool"). Connections are read-only
    sessions (open_read_only's settings) in autocommit, so a plain fetch is
    one statement, one snapshot of its own; `snapshot()` is one REPEATABLE
    READ READ ONLY transaction. `size` open up front, more when all are
    checked out (up to `max_size`, default 4x). A cancelled caller's query is
    cancelled on the server too, and its connection comes back only when the
    thread is done with it; a connection the server dropped is closed instead
    of reused (its caller got StorageUnavailable) and a new one opens on
    demand, so the pool outlives a server restart."""

    dialect = POSTGRES

    def __init__(
        self,
        dsn: str,
        size: int = 4,
        *,
        max_size: int | None = None,
        statement_timeout_ms: int = 0,
        application_name: str = "engram-reads",
        connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        self._dsn = dsn
        self._size = size
        self._max_size = max(size, max_size or 4 * size)
        self._statement_timeout_ms = statement_timeout_ms
        self._application_name = application_name
        self._connect_timeout_s = connect_timeout_s
        self._connections: list[Any] = []
        self._opening = 0
        self._idle: asyncio.Queue[Any] = asyncio.Queue()
        # one thread per connection at most: a connection runs one query at a time
        self._threads = ThreadPoolExecutor(self._max_size, thread_name_prefix="engram-pg-reads")

    async def open(self) -> None:
        for _ in range(self._size):
            self._idle.put_nowait(await self._connect())

    async def close(self) -> None:
        for conn in self._connections:
            conn.close()
        self._connections.clear()
        self._threads.shutdown(wait=False)

    async def _connect(self) -> Any:
        self._opening += 1  # counted before the await: concurrent callers see it
        try:
            conn = await asyncio.get_running_loop().run_in_executor(
                self._threads,
                functools.partial(
                    _open_reader,
                    self._dsn,
                    self._application_name,
                    self._statement_timeout_ms,
                    self._connect_timeout_s,
                ),
            )
        except psycopg.OperationalError as exc:
            raise StorageUnavailable() from exc
        finally:
            self._opening -= 1
        self._connections.append(conn)
        return conn

    def _checkin(self, conn: Any) -> None:
        """Back to the queue when idle; else (lost, or left in a transaction) closed."""
        if not conn.broken and conn.info.transaction_status == TransactionStatus.IDLE:
            self._idle.put_nowait(conn)
            return
        self._connections.remove(conn)
        with contextlib.suppress(Exception):
            conn.close()

    def _checkin_when_done(self, conn: Any, work: asyncio.Future[Any]) -> None:
        if work.done():
            self._checkin(conn)
        else:  # a cancelled caller's query still runs: the connection is not free yet
            work.add_done_callback(lambda _: self._checkin(conn))

    async def fetch_all(self, query: tuple[str, list[Any]]) -> list[Any]:
        conn = await self._checkout()
        future = asyncio.get_running_loop().run_in_executor(self._threads, _fetch_sync, conn, query)
        try:
            return list(await _awaited(conn, future))
        finally:
            self._checkin_when_done(conn, future)

    async def fetch_one(self, query: tuple[str, list[Any]]) -> Any:
        rows = await self.fetch_all(query)
        return rows[0] if rows else None

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[sqlite.ReadSnapshot]:
        """Reads that all see the database as of the first of them."""
        conn = await self._checkout()
        snapshot = PgReadSnapshot(conn, self._threads)
        try:
            await snapshot.run(_fetch_sync, ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", []))
            yield snapshot
        finally:
            # after any straggling query of a cancelled caller (psycopg runs one
            # statement at a time per connection), even if this caller is
            # cancelled meanwhile: the connection is reused only once it ended
            ended = asyncio.get_running_loop().run_in_executor(self._threads, _rollback_sync, conn)
            try:
                await asyncio.shield(ended)
            finally:
                self._checkin_when_done(conn, ended)


def _open_reader(
    dsn: str, application_name: str, statement_timeout_ms: int, connect_timeout_s: int
) -> Any:
    """A read-only session (open_read_only's) in autocommit."""
    conn = open_read_only(
        dsn,
        statement_timeout_ms=statement_timeout_ms,
        application_name=application_name,
        connect_timeout_s=connect_timeout_s,
    )
    conn.autocommit = True
    return conn


async def _awaited(conn: Any, work: asyncio.Future[Any]) -> Any:
    """`work`'s result (a query on `conn` in a pool thread). A cancelled caller
    stops waiting at once, and the query is cancelled on the server too, so
    the thread, and the connection, are soon free."""
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        if not work.done():
            threading.Thread(target=_cancel_quietly, args=(conn,), daemon=True).start()
        raise


def _cancel_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):  # the query ended meanwhile, or the server is gone
        conn.cancel_safe(timeout=5)


_LOST = "the database connection was lost during this read; retry"


_CANCELLED = (
    "the database cancelled this read ({}): storage.postgres.statement_timeout_ms "
    "limits every read; retry, narrow the read, or raise the limit"
)


def _fetch_sync(conn: Any, query: tuple[str, list[Any]]) -> list[Any]:
    """The rows of one sqlite3-style query; a connection lost on the way is
    StorageUnavailable (UNAVAILABLE: retry), a read the server cancelled
    (statement_timeout) StorageTimedOut (DEADLINE_EXCEEDED), not a crash."""
    try:
        cursor = execute(conn, query[0], query[1])
        return list(cursor.fetchall()) if cursor.description is not None else []
    except psycopg.errors.QueryCanceled as exc:  # statement_timeout, or a cancel
        raise StorageTimedOut(_CANCELLED.format(exc.diag.message_primary or exc)) from exc
    except psycopg.OperationalError as exc:
        if conn.broken:
            raise StorageUnavailable(_LOST) from exc
        raise


def _fetch_isolated_sync(conn: Any, query: tuple[str, list[Any]]) -> list[Any]:
    """_fetch_sync inside a savepoint, rolled back to when the query fails."""
    conn.execute("SAVEPOINT isolated_read")
    try:
        rows = _fetch_sync(conn, query)
    except (psycopg.Error, StorageTimedOut):
        if not conn.broken:
            conn.execute("ROLLBACK TO SAVEPOINT isolated_read")
        raise
    conn.execute("RELEASE SAVEPOINT isolated_read")
    return rows


def _rollback_sync(conn: Any) -> None:
    """End a snapshot's transaction; a failure leaves it to _checkin (closed)."""
    with contextlib.suppress(psycopg.Error):
        if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
            conn.execute("ROLLBACK")


async def fetch_once(
    dsn: str,
    query: tuple[str, list[Any]],
    *,
    application_name: str = "engram-probe",
    connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S,
) -> list[Any]:
    """One sqlite3-style query on a read-only connection of its own, closed
    after: a probe before any pool exists (search waiting for the schema)."""

    def probe() -> list[Any]:
        with _open_reader(dsn, application_name, 0, connect_timeout_s) as conn:
            return _fetch_sync(conn, query)

    return await asyncio.to_thread(probe)


class PgReadSnapshot(sqlite.ReadSnapshot):
    """A PgReadPool connection inside one read transaction (PgReadPool.snapshot)."""

    dialect = POSTGRES

    def __init__(self, conn: Any, threads: ThreadPoolExecutor) -> None:
        super().__init__(conn)
        self._threads = threads
        self._turn = asyncio.Lock()  # one statement of the snapshot at a time

    async def run(self, work: Callable[..., Any], *args: Any) -> Any:
        """`work(conn, *args)` on a pool thread, after the snapshot's previous
        statement (see _awaited for a cancelled caller)."""
        async with self._turn:
            future = asyncio.get_running_loop().run_in_executor(
                self._threads, work, self._conn, *args
            )
            return await _awaited(self._conn, future)

    async def fetch_all(self, query: tuple[str, list[Any]]) -> list[Any]:
        return list(await self.run(_fetch_sync, query))

    async def fetch_all_isolated(self, query: tuple[str, list[Any]]) -> list[Any]:
        """A read whose failure (a statement timeout, a missing table) leaves the
        snapshot usable: Postgres aborts the whole transaction on a failed
        statement, so this one runs inside a savepoint, rolled back to when it
        fails, with no other read of the snapshot in between."""
        return list(await self.run(_fetch_isolated_sync, query))
