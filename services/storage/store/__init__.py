"""The store's SQL statements, run on the store's single writer or its read connections
(only services.store imports them)."""
