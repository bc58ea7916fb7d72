"""What a memory's importance is when it is pinned (seed 002): a rule the store
(writing) and search (decay ranking) both apply."""

from __future__ import annotations

PINNED_IMPORTANCE = 1.0


def effective_importance(pinned: bool, importance: float) -> float:
    """Pinned memories always carry importance 1.0 (seed 002)."""
    return PINNED_IMPORTANCE if pinned else importance
