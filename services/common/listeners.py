"""The one place a listener is built from the settings.

Every service's public listener binds `server.host` on its own port; the
store's internal listener (job queue, documents, admin, access tracking: what
the other services call, never a user) binds `server.internal_host` (loopback
unless configured) on `server.ports.store_internal`. Both take the TLS
credentials of `server.tls.*` and the message limit `server.max_message_bytes`.
"""

from __future__ import annotations

from services.common.config import Config
from services.common.server import Listener
from services.common.tls import server_credentials


def listener(
    config: Config, port: int, host: str | None = None, *, internal: bool = False
) -> Listener:
    """A listener on `port`; `host` overrides the configured bind address (tests)."""
    default_host = config.server.internal_host if internal else config.server.host
    return Listener(
        host=host or default_host,
        port=port,
        max_message_bytes=config.server.max_message_bytes,
        credentials=server_credentials(config.server.tls),
        internal=internal,
    )
