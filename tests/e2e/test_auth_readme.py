"""The "Authentication" example (docs/security.md) runs, as written, against an auth-on store
(a real `engram serve store` process):
the key printed by `engram keys create` writes through grpcurl with `-H`, the list
shows the key, and once revoked the same grpcurl call is UNAUTHENTICATED.

Rewrites, and no others: `.venv/bin/engram` -> this checkout's CLI (the data
directory given by ENGRAM_STORAGE__PATH, so the docs' line needs no flag),
`.venv/bin/grpcurl` -> the grpcurl beside this interpreter, `localhost:50051` -> the
store this test started."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from e2e_helpers import GRPCURL, REPO_ROOT, Launcher, free_port, needs_grpcurl

pytestmark = needs_grpcurl()


@dataclass
class Store:
    address: str
    data_dir: Path


def _auth_block() -> str:
    blocks = re.findall(
        r"^```sh\n(.*?)^```",
        (REPO_ROOT / "docs" / "security.md").read_text(),
        flags=re.DOTALL | re.MULTILINE,
    )
    (block,) = [b for b in blocks if "engram keys create" in b]
    return block


def _bash(script: str, store: Store) -> subprocess.CompletedProcess[str]:
    script = script.replace(
        ".venv/bin/engram", f"{shlex.quote(sys.executable)} -m services.cli.main"
    )
    script = script.replace(".venv/bin/grpcurl", str(GRPCURL))
    script = script.replace("localhost:50051", store.address)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'gen'}",
        "ENGRAM_STORAGE__PATH": str(store.data_dir / "engram.db"),
        "ENGRAM_CONFIG": "",
    }
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_readme_authentication_example_runs(launcher: Launcher, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    handle = launcher.start_store(
        data_dir,
        env={
            "ENGRAM_AUTH__ENABLED": "true",
            "ENGRAM_AUTH__SERVICE_KEY": "s" * 40,
            "ENGRAM_SERVER__PORTS__STORE_INTERNAL": str(free_port()),
        },
    )
    store = Store(f"127.0.0.1:{handle.port}", data_dir)
    block = _auth_block()
    remember = block[block.index(".venv/bin/grpcurl") : block.index(".venv/bin/engram keys list")]
    # the whole block: create, write with the key, list, revoke
    done = _bash(block + 'echo "KEY=$KEY"\n', store)
    assert done.returncode == 0, done.stderr + done.stdout
    key = done.stdout.strip().splitlines()[-1].removeprefix("KEY=")
    assert key.startswith("engram_")
    assert '"namespace": "team-a"' in done.stdout  # Remember answered
    assert "ci-writer" in done.stdout and "revoked key ci-writer" in done.stdout
    assert done.stdout.count(key) == 1  # only our own echo: list and revoke never print it
    # the revoked key: the same Remember is refused within 5 s
    deadline = time.monotonic() + 5.5
    while True:
        again = _bash(f"KEY={key}\n{remember}", store)
        if again.returncode != 0:
            assert "Unauthenticated" in again.stderr, again.stderr
            break
        assert time.monotonic() < deadline, "the revoked key still works after 5 s"
        time.sleep(0.2)
