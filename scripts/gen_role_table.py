"""Write the docs' role table (docs/security.md, "Authentication") from its one source,
the role map in services/common/auth.py (PUBLIC_RPCS), so the docs name every RPC each
role may call. tests/auth/test_role_table.py fails when the two disagree.

    .venv/bin/python scripts/gen_role_table.py          # rewrite the table in docs/security.md
    .venv/bin/python scripts/gen_role_table.py --check  # fail if the docs' table is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "security.md"  # the "Authentication" section holds the table
sys.path[:0] = [str(ROOT), str(ROOT / "gen"), str(ROOT / "clients" / "python")]

from services.common.auth import role_table  # noqa: E402

HEADER = "| role | may call |"


def readme_role_table(text: str) -> str:
    """The table in the page: its header line and the table lines after it."""
    lines = text.splitlines()
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[start:end])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the table is stale")
    args = parser.parse_args()
    text = PAGE.read_text(encoding="utf-8")
    present = readme_role_table(text)
    wanted = role_table()
    if args.check:
        if present != wanted:
            print(
                "docs/security.md's role table is stale: run scripts/gen_role_table.py",
                file=sys.stderr,
            )
            return 1
        print("docs/security.md's role table is up to date")
        return 0
    PAGE.write_text(text.replace(present, wanted, 1), encoding="utf-8")
    print(f"wrote the role table to {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
