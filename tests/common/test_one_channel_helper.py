"""Every call one service makes to another goes through services/common/channels.py
(deadline, request id, credential, TLS, retry policy, message limit): no service
module opens a gRPC channel of its own. Only the CLI (`engram health`, `engram up`'s
readiness probe), which is no service, may."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[2] / "services"
HELPER = SERVICES / "common" / "channels.py"
CHANNEL_FACTORIES = {"insecure_channel", "secure_channel"}


def channel_openings(path: Path) -> list[int]:
    """Lines of `path` that call grpc's channel constructors (grpc.* or grpc.aio.*)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in CHANNEL_FACTORIES
        ):
            lines.append(node.lineno)
    return lines


def test_no_service_opens_a_channel_outside_the_helper() -> None:
    found = {
        str(path.relative_to(SERVICES)): lines
        for path in SERVICES.rglob("*.py")
        if path != HELPER
        and path.relative_to(SERVICES).parts[0] != "cli"
        and (lines := channel_openings(path))
    }
    assert found == {}, "open service-to-service channels with services.common.channels.channel"


def test_the_scan_sees_the_helpers_own_channels() -> None:
    assert len(channel_openings(HELPER)) == 2
