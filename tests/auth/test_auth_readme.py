"""The README's "Authentication" example runs, as written, against an auth-on store:
the key printed by `engram keys create` writes through grpcurl with `-H`, the list
shows the key, and once revoked the same grpcurl call is UNAUTHENTICATED.

Rewrites, and no others: `.venv/bin/engram` -> this checkout's CLI (the data
directory given by ENGRAM_STORAGE__PATH, so the README line needs no flag),
`.venv/bin/grpcurl` -> the grpcurl beside this interpreter, `localhost:50051` -> the
store this test started."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from auth_suite import AuthSuite

REPO = Path(__file__).resolve().parents[2]
GRPCURL = Path(sys.executable).parent / "grpcurl"
pytestmark = pytest.mark.skipif(not GRPCURL.exists(), reason="grpcurl binary not installed")


def _auth_block() -> str:
    blocks = re.findall(
        r"^```sh\n(.*?)^```", (REPO / "README.md").read_text(), flags=re.DOTALL | re.MULTILINE
    )
    (block,) = [b for b in blocks if "engram keys create" in b]
    return block


def _bash(script: str, suite: AuthSuite) -> subprocess.CompletedProcess[str]:
    script = script.replace(
        ".venv/bin/engram", f"{shlex.quote(sys.executable)} -m services.cli.main"
    )
    script = script.replace(".venv/bin/grpcurl", str(GRPCURL))
    script = script.replace("localhost:50051", suite.addresses["store"])
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{REPO}:{REPO / 'gen'}",
        "ENGRAM_STORAGE__PATH": str(suite.db_path),
        "ENGRAM_CONFIG": "",
    }
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_readme_authentication_example_runs(auth_store: Callable[..., AuthSuite]) -> None:
    suite = auth_store()
    block = _auth_block()
    remember = block[block.index(".venv/bin/grpcurl") : block.index(".venv/bin/engram keys list")]
    # the whole block: create, write with the key, list, revoke
    done = _bash(block + 'echo "KEY=$KEY"\n', suite)
    assert done.returncode == 0, done.stderr + done.stdout
    key = done.stdout.strip().splitlines()[-1].removeprefix("KEY=")
    assert key.startswith("engram_")
    assert '"namespace": "team-a"' in done.stdout  # Remember answered
    assert "ci-writer" in done.stdout and "revoked key ci-writer" in done.stdout
    assert done.stdout.count(key) == 1  # only our own echo: list and revoke never print it
    # the revoked key: the same Remember is refused within 5 s
    deadline = time.monotonic() + 5.5
    while True:
        again = _bash(f"KEY={key}\n{remember}", suite)
        if again.returncode != 0:
            assert "Unauthenticated" in again.stderr, again.stderr
            break
        assert time.monotonic() < deadline, "the revoked key still works after 5 s"
        time.sleep(0.2)
