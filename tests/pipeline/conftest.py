"""Every test here that reaches the database runs on SQLite and on PostgreSQL
(ids `[sqlite]` / `[postgres]`; tests/conftest.py)."""

from __future__ import annotations

from backend_db import storage_backend  # noqa: F401  (a fixture: both backends)
