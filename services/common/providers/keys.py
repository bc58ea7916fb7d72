"""The one rule for a provider's API key: the value itself (`api_key`), the
name of an environment variable holding it (`api_key_env`), or a file holding
it (`api_key_file`; surrounding whitespace dropped). The key is read once,
when the provider is built, and goes only into request headers: no message,
log line or error names its value."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from services.common.config import ConfigError, KeySource


def api_key(settings: KeySource, where: str, environ: Mapping[str, str] | None = None) -> str:
    """The configured key ("" when none); `where` names the section in errors
    (`providers.llm`), which name the variable or the file, never the value."""
    if settings.api_key_env:
        value = (os.environ if environ is None else environ).get(settings.api_key_env, "")
        if not value.strip():
            raise ConfigError(
                f"{where}.api_key_env: environment variable {settings.api_key_env} is not set"
            )
        return value.strip()
    if settings.api_key_file:
        try:
            value = Path(settings.api_key_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"{where}.api_key_file: cannot read {settings.api_key_file}: {exc.strerror}"
            ) from None
        if not value:
            raise ConfigError(f"{where}.api_key_file: {settings.api_key_file} is empty")
        return value
    return settings.api_key
