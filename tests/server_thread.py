"""A server app on its own event loop in a thread (importable from any test module,
unlike conftest)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any


class ServerThread:
    """Runs an async app factory on a private event loop in a thread."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = asyncio.run_coroutine_threadsafe(factory(), self.loop).result(timeout=30)
        self.stopped = False

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        asyncio.run_coroutine_threadsafe(self.app.stop(1.0), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()
