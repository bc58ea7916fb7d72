"""Provider failures, split by whose fault they are."""

from __future__ import annotations


class ProviderError(Exception):
    """The provider rejected this particular input; retrying the same job may not help."""


class ProviderUnavailable(ProviderError):
    """The provider cannot be reached or is failing (connection refused, timeout,
    5xx): nothing is wrong with the job, so work waits instead of using attempts."""


def describe_http_error(status: int, body: str) -> str:
    """Seed 000: the status code and the first 200 characters of the body."""
    return f"HTTP {status}: {body[:200]}"
