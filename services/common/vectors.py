"""Vectors as stored and compared: L2-normalised float32, little-endian (sqlite-vec's format)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence


def normalized_f32(vector: Sequence[float]) -> bytes | None:
    """The unit vector's float32 bytes; None for an empty, zero or non-finite vector."""
    if not vector:
        return None
    norm = math.sqrt(math.fsum(v * v for v in vector))
    if not math.isfinite(norm) or norm == 0.0:
        return None
    return array("f", (v / norm for v in vector)).tobytes()
