"""What the pipeline reports about its workers and providers (GetStatus)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WorkerStatus:
    name: str
    state: str = "idle"  # idle | busy | backoff | stopped
    completed: int = 0
    failed: int = 0
    released: int = 0
    last_error: str = ""
    last_batch_at: str | None = None


@dataclass
class ProviderHealth:
    role: str
    kind: str
    model: str
    state: str = "available"  # available | degraded | disabled
    last_error: str = ""
    checked_at: str | None = None
