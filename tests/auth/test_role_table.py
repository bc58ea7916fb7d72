"""The docs' role table (docs/security.md) is the role map's (issue 34 item 10): it is generated from
services/common/auth.PUBLIC_RPCS by scripts/gen_role_table.py and must not drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from services.common import auth

ROOT = Path(__file__).resolve().parents[2]


def test_the_generated_table_names_every_public_rpc_once_with_its_role() -> None:
    table = auth.role_table()
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2] for line in table.splitlines()[2:]}
    assert set(rows) == {role.name.lower() for role in auth.Role}
    for method, role in auth.PUBLIC_RPCS.items():
        name = method.rsplit("/", 1)[1]
        listed = [r for r, text in rows.items() if f" {name}," in text or f" {name} " in text]
        assert listed[:1] == [role.name.lower()], (name, listed)


def test_the_docs_table_equals_the_generated_one() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_role_table.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
