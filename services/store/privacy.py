"""Privacy levels (seed 001): which writes the person's level allows, and the
sentence that says so. The level of a write is the stricter of the request's
and its namespace's configured one (`sessions.privacy`)."""

from __future__ import annotations

from collections.abc import Mapping

from services.common.errors import FailedPrecondition
from services.common.validation import pattern_covers

NONE, PARTIAL, FULL = "none", "partial", "full"
_RANK = {"": 0, NONE: 0, PARTIAL: 1, FULL: 2}

# Sentences an assistant can relay to the person as they stand.
FULL_NOTICE = (
    "Your privacy setting is full, so I don't keep anything from our conversations; "
    "this was not saved."
)
PARTIAL_NOTICE = (
    "Your privacy setting is partial, so I can't save things to long-term memory for you; "
    "I'll only keep this for the current conversation."
)
PARTIAL_REFUSAL = (
    "Your privacy setting is partial, so I can't save things to long-term memory for you; "
    "this was not saved."
)


class PrivacyBlocked(FailedPrecondition):
    reason = "PRIVACY_BLOCKED"

    def __init__(self, level: str, message: str) -> None:
        super().__init__(message, metadata={"privacy_level": level.upper()})
        self.level = level


class PrivacyPolicy:
    def __init__(self, configured: Mapping[str, str]) -> None:
        self._configured = dict(configured)

    def level(self, namespace: str, requested: str = "") -> str:
        """The stricter of the request's level and every matching configured one."""
        levels = [requested] + [
            level
            for pattern, level in self._configured.items()
            if pattern_covers(pattern, namespace)
        ]
        return max(levels, key=lambda level: _RANK[level]) or NONE

    def check_write(self, namespace: str, requested: str, *, long_term: bool) -> None:
        """PRIVACY_BLOCKED when the level forbids this write (FULL: any write;
        PARTIAL: a long-term one)."""
        level = self.level(namespace, requested)
        if level == FULL:
            raise PrivacyBlocked(FULL, FULL_NOTICE)
        if level == PARTIAL and long_term:
            raise PrivacyBlocked(PARTIAL, PARTIAL_REFUSAL)
