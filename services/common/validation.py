"""Request rules shared by every service."""

from __future__ import annotations

import re

from services.common.errors import InvalidArgument

DEFAULT_NAMESPACE = "default"
_NAMESPACE = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def validate_namespace(namespace: str, field: str = "namespace") -> str:
    """Empty means the default namespace; anything else must match the pattern."""
    if namespace == "":
        return DEFAULT_NAMESPACE
    if not _NAMESPACE.fullmatch(namespace):
        raise InvalidArgument(field, "must match [A-Za-z0-9._:-]{1,128}")
    return namespace
