"""Write tools/*.json, the agent tools' definitions, from their one source: the tools
`engram mcp` serves (services/cli/mcp_server.py). Each file is the tool as MCP's
tools/list gives it (name, description, inputSchema, outputSchema, annotations), so an
agent framework that does not speak MCP loads the same schemas the MCP server serves.

    .venv/bin/python scripts/gen_tools.py          # rewrite tools/
    .venv/bin/python scripts/gen_tools.py --check  # fail if tools/ is stale
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
sys.path[:0] = [str(ROOT), str(ROOT / "gen"), str(ROOT / "clients" / "python")]

from engram.client import AsyncEngram  # noqa: E402
from services.cli.mcp_server import build_server  # noqa: E402


async def definitions() -> dict[str, dict[str, Any]]:
    """Each tool's definition as the MCP server lists it, by name (no call is made)."""
    async with AsyncEngram("127.0.0.1:9") as engram:
        tools = await build_server(engram).list_tools()
    return {
        tool.name: tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools
    }


def render(definition: dict[str, Any]) -> str:
    return json.dumps(definition, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if tools/ is stale")
    args = parser.parse_args()
    wanted = {f"{name}.json": render(d) for name, d in asyncio.run(definitions()).items()}
    present = {p.name: p.read_text() for p in TOOLS.glob("*.json")} if TOOLS.exists() else {}
    if args.check:
        stale = sorted(n for n in wanted.keys() | present.keys() if wanted.get(n) != present.get(n))
        if stale:
            print(
                f"tools/ is stale ({', '.join(stale)}): run scripts/gen_tools.py", file=sys.stderr
            )
            return 1
        print("tools/ is up to date")
        return 0
    TOOLS.mkdir(exist_ok=True)
    for name in present.keys() - wanted.keys():
        (TOOLS / name).unlink()
    for name, text in wanted.items():
        (TOOLS / name).write_text(text)
    print(f"wrote {len(wanted)} tools to {TOOLS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
