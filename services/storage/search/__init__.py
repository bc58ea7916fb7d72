"""Search's SQL statements, run on its read-only pools (only services.search imports
them)."""
