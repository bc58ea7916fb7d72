"""Vectors as stored and compared: L2-normalised float32, little-endian (sqlite-vec's format)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

import numpy as np


def normalized_f32(vector: Sequence[float]) -> bytes | None:
    """The unit vector's float32 bytes; None for an empty, zero or non-finite vector."""
    if not vector:
        return None
    norm = math.sqrt(math.fsum(v * v for v in vector))
    if not math.isfinite(norm) or norm == 0.0:
        return None
    return array("f", (v / norm for v in vector)).tobytes()


# How a part vector's components are stored (little-endian float16).
PARTS_DTYPE = "<f2"


def normalized_parts_f16(flat: Sequence[float], dimensions: int) -> bytes | None:
    """A memory's sentence vectors (issue 19) as stored: `flat` holds them one
    after another, each of `dimensions`; each is L2-normalised and kept as
    little-endian float16 (half the bytes Recall reads per candidate; a cosine
    off by ~1e-3 does not reorder a ranking). None for no parts; ValueError when
    `flat` is not whole vectors or one of them is zero or non-finite."""
    if len(flat) == 0:
        return None
    if dimensions <= 0 or len(flat) % dimensions:
        raise ValueError(f"{len(flat)} values are not whole vectors of {dimensions}")
    matrix = np.asarray(flat, dtype=np.float64).reshape(-1, dimensions)
    norms = np.linalg.norm(matrix, axis=1)
    if not np.all(np.isfinite(norms)) or not np.all(norms > 0):
        raise ValueError("every part must be a finite, non-zero vector")
    return bytes((matrix / norms[:, None]).astype(PARTS_DTYPE).tobytes())
