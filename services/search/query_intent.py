"""What a Recall query asks for (seed 003 "Intent classification"), so Recall
can route it: entity (who / what is X), temporal (when), causal (why),
procedural (how to), or general.

Deterministic rules decide first (the question word, a cue phrase, a time the
query names). A query no rule places is compared with example questions of
each intent by cosine, using the query vector the vector channel computed
anyway (no second embedding): the nearest intent wins when its best example is
at least `intent_similarity_threshold` (0.45) away in cosine; else general.
The examples are embedded once, in the background, in a provider call of their
own (beside the query embedder's queue, so no query waits behind them and a
failure here opens no query circuit). A Recall that arrives while they are
being embedded waits for them, up to the query-embedding timeout, so that the
first questions after a start are classified as every later one; past that,
and for a minute after a failure, rules alone (and the basis says so).
Classifying costs a few regexes and one small matrix product (microseconds).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from services.common.providers.embedding import EmbeddingProvider
from services.search.embedder import describe

log = logging.getLogger("engram.search.intent")


class Intent(IntEnum):
    """Numbered as engram.search.v1.QueryIntent."""

    UNSPECIFIED = 0
    GENERAL = 1
    ENTITY = 2
    TEMPORAL = 3
    CAUSAL = 4
    PROCEDURAL = 5


@dataclass(frozen=True)
class Classified:
    intent: Intent
    basis: str  # why, for people: "rule: ...", "similarity 0.61 to ...", "request", "default"


# Rules in order; the first that matches decides. Question words lead (a
# query's opening says what it asks); the cue phrases follow.
_RULES: tuple[tuple[Intent, str, re.Pattern[str]], ...] = (
    (Intent.CAUSAL, "asks why", re.compile(r"\b(why|how come)\b", re.I)),
    (
        Intent.CAUSAL,
        "asks for a cause",
        re.compile(
            r"\b(what|which)\s+(made|caused|led|prompted|motivated|inspired|drove)\b"
            r"|\b(reason|reasons|cause|causes)\s+(for|of|why|behind)\b|\bbecause of what\b",
            re.I,
        ),
    ),
    (
        Intent.TEMPORAL,
        "asks when",
        re.compile(
            r"^\W*(when|since when)\b|\bwhat (time|date|day|year|month)\b"
            r"|\bhow long (ago|has|have|had|did|was|since)\b|\bwhich (year|month|day|date|week)\b",
            re.I,
        ),
    ),
    (
        Intent.PROCEDURAL,
        "asks how to",
        re.compile(
            r"^\W*how (do|does|can|could|should|would|to|is .* (done|made))\b|\bhow to\b"
            r"|\b(steps|instructions|procedure|recipe) (to|for)\b",
            re.I,
        ),
    ),
    (
        Intent.ENTITY,
        "asks who",
        re.compile(r"^\W*(who|whom|whose)\b|\bwho (is|was|are|were)\b", re.I),
    ),
    (
        Intent.ENTITY,
        "asks about a named one",
        re.compile(
            r"^\W*(tell me about|what do (i|you|we) know about|what is known about)\b",
            re.I,
        ),
    ),
)

# Example questions per intent, embedded once; the similarity fallback.
RETRY_S = 60.0

EXAMPLES: dict[Intent, tuple[str, ...]] = {
    Intent.ENTITY: (
        "Who is Alice?",
        "Tell me about my brother",
        "What do we know about the Acme project?",
        "Who works with Bob?",
        "Which person did I meet at the conference?",
        "Information about my landlord",
    ),
    Intent.TEMPORAL: (
        "When did I move to Berlin?",
        "What did I do last week?",
        "What happened yesterday?",
        "What date is the dentist appointment?",
        "How long ago did we start the project?",
        "What was I working on in May 2023?",
    ),
    Intent.CAUSAL: (
        "Why did she quit her job?",
        "What was the reason for the delay?",
        "What caused the outage?",
        "What made him change his mind?",
        "Why was the meeting cancelled?",
    ),
    Intent.PROCEDURAL: (
        "How do I deploy the service?",
        "How to reset my password",
        "What are the steps to renew a passport?",
        "How can I make sourdough bread?",
        "Instructions for setting up the printer",
    ),
}


# Seed 003's `what` intent: what / which / where asked about someone or
# something named (a capitalised word after the first), after the rules above
# and a named time.
_WHAT = re.compile(r"\b(what|which|where)\b", re.I)
_NAME = re.compile(r"\s[A-Z][a-z]+")


def rule_intent(query: str, names_time: bool = False) -> Classified | None:
    """The first rule the query matches, or None. `names_time`: the query names
    a date or a range (services.search.text.time_windows)."""
    for intent, reason, pattern in _RULES:
        if pattern.search(query):
            return Classified(intent, f"rule: {reason}")
    if names_time:
        return Classified(Intent.TEMPORAL, "rule: names a time")
    if _WHAT.search(query) and _NAME.search(query):
        return Classified(Intent.ENTITY, "rule: asks what about a named one")
    return None


class IntentClassifier:
    def __init__(
        self, provider: EmbeddingProvider | None, threshold: float = 0.45, wait_s: float = 2.0
    ) -> None:
        self._provider = provider if provider is not None and provider.kind != "none" else None
        self._threshold = threshold
        self._wait_s = wait_s  # the longest a query waits for the examples (`settle`)
        self._labels: list[Intent] = []
        self._matrix: np.ndarray | None = None  # unit rows, one per example
        self._loading: asyncio.Task[None] | None = None
        self._next_try = 0.0

    @property
    def examples_ready(self) -> bool:
        return self._matrix is not None

    def start(self) -> None:
        """Embed the examples in the background (once; after a failure, rules alone
        until a retry RETRY_S later)."""
        if self._provider is None or self._matrix is not None:
            return
        if self._loading is not None and not self._loading.done():
            return
        if time.monotonic() < self._next_try:
            return
        self._next_try = time.monotonic() + RETRY_S
        self._loading = asyncio.create_task(self._load())

    async def wait_ready(self) -> bool:
        """For callers that want the similarity fallback at once (tests, benches)."""
        self.start()
        if self._loading is not None:
            await asyncio.shield(self._loading)
        return self.examples_ready

    async def settle(self) -> None:
        """Wait, at most `wait_s`, for examples being embedded: a Recall that came
        first after a start is not classified by rules alone for coming first."""
        if self._provider is None or self._matrix is not None:
            return
        self.start()
        if self._loading is None or self._loading.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._loading), self._wait_s)
        except TimeoutError:
            return

    async def _load(self) -> None:
        assert self._provider is not None
        labels = [i for i, texts in EXAMPLES.items() for _ in texts]
        texts = [t for ts in EXAMPLES.values() for t in ts]
        try:
            vectors = await self._provider.embed(texts)
        except Exception as exc:  # a provider down: rules alone, retried later
            log.warning("intent examples not embedded; rules only", extra={"error": describe(exc)})
            return
        if len(vectors) != len(texts):
            return
        matrix = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        self._labels = labels
        self._matrix = matrix / np.where(norms > 0, norms, 1.0)

    def classify(
        self, query: str, vector: Sequence[float] | None, names_time: bool = False
    ) -> Classified:
        """Rules first (`names_time`: the query names a date or a range, a rule
        too, after the question words); then the nearest example's intent when
        close enough."""
        ruled = rule_intent(query, names_time)
        if ruled is not None:
            return ruled
        if vector is None or self._matrix is None:
            if self._matrix is None and self._provider is not None:
                self.start()
                return Classified(
                    Intent.GENERAL, "default: no rule matched; example questions not embedded"
                )
            return Classified(Intent.GENERAL, "default: no rule matched")
        q = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(q))
        if norm == 0.0 or q.shape[0] != self._matrix.shape[1]:
            return Classified(Intent.GENERAL, "default: no rule matched")
        sims = self._matrix @ (q / norm)
        best = int(np.argmax(sims))
        similarity = float(sims[best])
        intent = self._labels[best]
        if similarity >= self._threshold:
            return Classified(
                intent, f"similarity {similarity:.2f} to {intent.name.lower()} examples"
            )
        return Classified(
            Intent.GENERAL,
            f"default: nearest examples ({intent.name.lower()}) at {similarity:.2f}",
        )
