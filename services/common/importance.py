"""What a memory's importance is (seed 002): its default, when it is pinned, and
how it weighs in a ranking. Rules the store (writing) and search (ranking) both
apply."""

from __future__ import annotations

PINNED_IMPORTANCE = 1.0
DEFAULT_IMPORTANCE = 0.8  # a memory whose writer gave none


def effective_importance(pinned: bool, importance: float) -> float:
    """Pinned memories always carry importance 1.0 (seed 002)."""
    return PINNED_IMPORTANCE if pinned else importance


def importance_factor(importance: float, weight: float) -> float:
    """A recall score's multiplier for a memory's importance (seed 004 §4; issue 18):
    1 at the default importance, so memories nobody rated keep their order and
    scores; `weight` is the change per unit of importance (0.2: a pinned memory
    x1.04, one rated 0.3 x0.90)."""
    return 1.0 + weight * (importance - DEFAULT_IMPORTANCE)
