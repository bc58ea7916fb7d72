"""The connection every write and one-off read is written against (issue 36):
sqlite3's connection API, which the store's SQLite connection is and
services/storage/pg.py's SqliteApi provides over psycopg. Typed so a call the
two do not share fails the type check instead of one backend's tests."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

Parameters = Sequence[Any] | Mapping[str, Any]


class Cursor(Protocol):
    """A statement's result: rows read by position or by column name."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A statement outside an explicit transaction commits on its own; the
    writer opens one with BEGIN IMMEDIATE (BEGIN on PostgreSQL, pg.py)."""

    def execute(self, statement: str, parameters: Parameters = ..., /) -> Cursor: ...

    def executemany(self, statement: str, parameters: Iterable[Parameters], /) -> Cursor: ...

    @property
    def in_transaction(self) -> bool: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...
