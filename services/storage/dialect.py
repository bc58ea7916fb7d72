"""The SQL the two backends speak differently, in one place (issue 36).

Every query builder writes sqlite3-style SQL (`?` and `:name` parameters; pg.py
sends it to PostgreSQL) and asks its `Dialect` for whatever the backends spell
differently: a fragment both backends need (the methods), or a module's own
statement where the two differ (`choose`, which takes both spellings, so a
builder cannot forget one). A read pool, a snapshot and the store's write
connection each carry theirs (`dialect_of`); nothing outside this package
compares backend names.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

T = TypeVar("T")


class Dialect:
    """One backend's spellings. Two instances exist: SQLITE and POSTGRES."""

    def __init__(self, name: Literal["sqlite", "postgres"]) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Dialect({self.name!r})"

    @property
    def is_postgres(self) -> bool:
        return self is POSTGRES

    def choose(self, *, sqlite: T, postgres: T) -> T:
        """This backend's one of two spellings of the same thing."""
        return postgres if self is POSTGRES else sqlite

    @property
    def plan_guard(self) -> str:
        """What `keep_plan` prefixes a column with: SQLite's unary `+`, which keeps
        that column's index out of the plan. Postgres has no unary `+` on text and
        costs the rowid lookups first without a hint, so there it is nothing."""
        return self.choose(sqlite="+", postgres="")

    @property
    def position(self) -> str:
        """The function giving a substring's 1-based position (0: absent)."""
        return self.choose(sqlite="instr", postgres="strpos")

    @property
    def row_lock(self) -> str:
        """A SELECT's suffix locking the rows it reads until the transaction
        ends: Postgres's FOR UPDATE; nothing on SQLite, whose writer holds the
        whole database from BEGIN IMMEDIATE."""
        return self.choose(sqlite="", postgres=" FOR UPDATE")

    def json_array_holds(self, column: str) -> str:
        """A clause: the JSON array of strings in `column` holds the parameter."""
        return self.choose(
            sqlite=f"EXISTS (SELECT 1 FROM json_each({column}) WHERE json_each.value = ?)",
            # no json_each; TEXT columns cast to json
            postgres=(
                f"EXISTS (SELECT 1 FROM json_array_elements_text({column}::json)"
                " AS element(value) WHERE element.value = ?)"
            ),
        )

    def days_since(self, later: str, earlier: str) -> str:
        """Days from `earlier` to `later` (stored time texts), never negative.
        SQLite's julianday reads the stored form, Postgres's timestamptz does (to
        the microsecond; the ninth-digit nanoseconds are far below a day)."""
        return self.choose(
            sqlite=f"max(0.0, julianday({later}) - julianday({earlier}))",
            postgres=(
                f"greatest(0.0, date_part('epoch', {later}::timestamptz"
                f" - {earlier}::timestamptz) / 86400.0)"
            ),
        )

    def exp_argument(self, exponent: str) -> str:
        """`exponent` made safe for exp(): Postgres's raises on underflow, where
        SQLite's gives 0."""
        return self.choose(sqlite=exponent, postgres=f"greatest({exponent}, -700.0)")


SQLITE = Dialect("sqlite")
POSTGRES = Dialect("postgres")


def dialect_of(conn: Any) -> Dialect:
    """The dialect of a connection, pool or snapshot: its own `dialect`
    (pg.py's classes and the SQLite pools carry one); a bare sqlite3
    connection (the store's writer on SQLite) has none and is SQLite."""
    dialect = getattr(conn, "dialect", SQLITE)
    if not isinstance(dialect, Dialect):
        raise TypeError(f"{type(conn).__name__}.dialect is {dialect!r}, not a Dialect")
    return dialect
