"""Why a service cannot start: below everything that may refuse a start (the
listeners, TLS, the keys file, the database), so each raises it without
importing the server that reports it."""

from __future__ import annotations


class StartupError(Exception):
    """The service cannot start (port taken, database unusable): the command
    prints this one line and exits 1, with no traceback."""
