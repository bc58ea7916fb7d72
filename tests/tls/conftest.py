"""TLS fixtures: certificates made by the real `engram certs dev` command, and the
process launcher of the end-to-end tests (real servers on real ports)."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.e2e_helpers import data_dir, launcher
from tls_helpers import make_certs

__all__ = ["data_dir", "launcher"]


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The development CA and its certificates (ca, server, client .pem and -key.pem)."""
    return make_certs(tmp_path_factory.mktemp("certs") / "certs")


@pytest.fixture(scope="session")
def other_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second, unrelated CA: its certificates must be refused by the first one's servers."""
    return make_certs(tmp_path_factory.mktemp("other-certs") / "certs")
