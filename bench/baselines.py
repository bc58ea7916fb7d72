"""Reference retrievers that a recall benchmark compares Engram with, run over one
haystack's documents in the benchmark's own process (no suite):

- BM25 (Okapi, k1 1.5, b 0.75; lower-cased alphanumeric tokens, no stemming or
  stop words; the haystack's own statistics);
- dense: cosine of the local MiniLM vectors (bench/embed_cache.py: the real
  model's vectors, the same ones the suite stores);
- RRF: reciprocal rank fusion of the two full rankings, k = 60.

Each returns the indexes of the documents, best first.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

RRF_K = 60
_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def bm25(query: str, documents: list[str], k1: float = 1.5, b: float = 0.75) -> list[int]:
    bags = [Counter(tokens(d)) for d in documents]
    lengths = [sum(bag.values()) for bag in bags]
    average = sum(lengths) / max(len(lengths), 1) or 1.0
    frequency: Counter[str] = Counter()
    for bag in bags:
        frequency.update(bag.keys())
    n = len(documents)
    scores = [0.0] * n
    for term in set(tokens(query)):
        if not frequency[term]:
            continue
        idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
        for i, bag in enumerate(bags):
            tf = bag.get(term, 0)
            if tf:
                scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / average))
    return sorted(range(n), key=lambda i: (-scores[i], i))


def dense(query_vector: np.ndarray, vectors: np.ndarray) -> list[int]:
    cosines = vectors @ query_vector
    return [int(i) for i in np.argsort(-cosines, kind="stable")]


def rrf(*rankings: list[int], k: int = RRF_K) -> list[int]:
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking):
            fused[doc] = fused.get(doc, 0.0) + 1 / (k + rank + 1)
    return sorted(fused, key=lambda d: (-fused[d], d))
