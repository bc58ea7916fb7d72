"""The contradiction detector (seed 000 "Controlled Writes").

Two texts contradict when they are about the same thing (at least two shared
content tokens) and disagree: one is negated and the other is not, or they use
the two sides of an antonym pair. It is deliberately lexical and
deterministic: the store uses it to decide whether a DELETE is about its
target, so an LLM cannot talk it into anything.
"""

from __future__ import annotations

from services.common.fact_values import NEGATIONS, negated
from services.common.text import STOP_WORDS, words

MIN_SHARED_TOKENS = 2

ANTONYM_PAIRS: tuple[tuple[str, str], ...] = (
    ("enabled", "disabled"),
    ("enable", "disable"),
    ("allow", "deny"),
    ("allowed", "denied"),
    ("allow", "block"),
    ("true", "false"),
    ("like", "dislike"),
    ("likes", "dislikes"),
    ("love", "hate"),
    ("loves", "hates"),
    ("on", "off"),
    ("open", "closed"),
    ("start", "stop"),
    ("started", "stopped"),
    ("accept", "reject"),
    ("accepted", "rejected"),
    ("include", "exclude"),
    ("always", "never"),
    ("increase", "decrease"),
    ("up", "down"),
    ("valid", "invalid"),
    ("active", "inactive"),
    ("online", "offline"),
    ("success", "failure"),
    ("before", "after"),
    ("add", "remove"),
    ("added", "removed"),
    ("prefer", "avoid"),
    ("prefers", "avoids"),
)


def _polar_words() -> frozenset[str]:
    return frozenset(word for pair in ANTONYM_PAIRS for word in pair)


_POLAR = _polar_words()


def content_tokens(text: str) -> set[str]:
    """The topic-bearing tokens: no stop words, negations or antonym words
    (sharing those does not make two texts about the same thing)."""
    return {
        t for t in words(text) if t not in STOP_WORDS and t not in NEGATIONS and t not in _POLAR
    }


def shared_tokens(a: str, b: str) -> set[str]:
    return content_tokens(a) & content_tokens(b)


def antonym_conflict(a: str, b: str) -> bool:
    """One text uses one side of a pair and the other the opposite side (and
    not both sides themselves)."""
    left, right = set(words(a)), set(words(b))
    for x, y in ANTONYM_PAIRS:
        if (x in left and y in right and y not in left and x not in right) or (
            y in left and x in right and x not in left and y not in right
        ):
            return True
    return False


def contradicts(a: str, b: str) -> bool:
    """≥ 2 shared content tokens, plus a negation-polarity difference or an
    antonym pair conflict."""
    if len(shared_tokens(a, b)) < MIN_SHARED_TOKENS:
        return False
    if negated(a) != negated(b):
        return True
    return antonym_conflict(a, b)
