"""Provider failures, split by whose fault they are, and the one HTTP status
rule every outbound HTTP call follows (providers, reranker, document fetch)."""

from __future__ import annotations

# 4xx answers that say "not now" rather than "never": Request Timeout, Too
# Early, Too Many Requests.
_RETRYABLE_CLIENT_STATUSES = frozenset({408, 425, 429})


def retryable_status(status: int) -> bool:
    """An error status worth asking again later (5xx, 408, 425, 429): the
    server is down, overloaded or not ready, nothing is wrong with the request.
    Any other 4xx is the request's fault and fails the same way every time."""
    return status >= 500 or status in _RETRYABLE_CLIENT_STATUSES


class ProviderError(Exception):
    """The provider rejected this particular input; retrying the same job may not help."""


class ProviderUnavailable(ProviderError):
    """The provider cannot be reached or is failing (connection refused, timeout,
    a retryable status): nothing is wrong with the job, so work waits instead of
    using attempts."""


class RateLimited(ProviderUnavailable):
    """The provider said "too many requests" (429) or "overloaded" (Anthropic's
    529); `retry_after_s` is its Retry-After, when it sent one."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# Answers that mean "this provider is rate limiting or overloaded": 429 Too Many
# Requests, 529 (Anthropic: overloaded).
RATE_LIMIT_STATUSES = frozenset({429, 529})


def describe_http_error(status: int, body: str) -> str:
    """Seed 000: the status code and the first 200 characters of the body."""
    return f"HTTP {status}: {body[:200]}"
