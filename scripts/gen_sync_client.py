"""Generate the synchronous client (clients/python/engram/client/sync.py, `Engram`)
from the asyncio one (aio.py, `AsyncEngram`): the client is written once.

The rewrite goes by tokens: `async` and `await` go, `(await x).y` loses its
parentheses, `grpc.aio.` becomes `grpc.`, and names with a synchronous twin are
renamed (NAMES; `...AsyncStub` becomes `...Stub`). What differs beyond that is in
TEXTS: exact pieces of aio.py (docstrings that say "asyncio", one call whose
arguments differ), each required exactly once, so an edit of aio.py that moves one
fails here instead of generating something else. What both clients share and is not
a rewrite of the other lives in _common.py. Then ruff sorts the imports, makes
`for x in y: yield x` a `yield from y`, and formats the result.

    python scripts/gen_sync_client.py           # write sync.py (`make gen-client`)
    python scripts/gen_sync_client.py --check   # fail if sync.py is not what aio.py gives
"""

from __future__ import annotations

import argparse
import io
import itertools
import keyword
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "python" / "engram" / "client"
SOURCE = CLIENT / "aio.py"
TARGET = CLIENT / "sync.py"

HEADER = (
    "# Generated from aio.py by scripts/gen_sync_client.py (`make gen-client`): do not\n"
    "# edit; change aio.py (or the script) and regenerate. tests/client/ fails when\n"
    "# this file is not what the script makes of aio.py.\n"
)

# NAME tokens with a synchronous twin.
NAMES = {
    "AsyncEngram": "Engram",
    "AsyncIterator": "Iterator",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    # asyncio.Lock() -> threading.Lock()
    "asyncio": "threading",
    # grpc.aio.AioRpcError (a grpc.RpcError) -> grpc.RpcError
    "AioRpcError": "RpcError",
}

# (text of aio.py, its synchronous form): what the token rules cannot say.
TEXTS = [
    (
        "`AsyncEngram`: the asyncio client of every public RPC",
        "`Engram`: the synchronous client of every public RPC",
    ),
    (
        "A connection to one Engram suite, for asyncio (the same methods as `Engram`, awaited).",
        "A connection to one Engram suite.",
    ),
    ("As `Engram.import_memories` (the items are read from a plain iterable). ", ""),
    # grpc.aio's Channel.close takes a grace period; grpc.Channel.close takes nothing
    ("await channel.close(None)", "await channel.close()"),
]


def _offsets(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _is_call_paren(previous: tokenize.TokenInfo | None) -> bool:
    """Whether a `(` after `previous` opens a call (or a subscript's), not a group."""
    if previous is None:
        return False
    if previous.type == tokenize.NAME:
        return not keyword.iskeyword(previous.string)
    return previous.string in (")", "]") or previous.type == tokenize.STRING


def unasync(text: str) -> str:
    """aio.py's source, rewritten for the synchronous client (before ruff)."""
    for old, new in TEXTS:
        found = text.count(old)
        if found != 1:
            raise SystemExit(f"gen_sync_client: expected {old!r} once in aio.py, found {found}")
        text = text.replace(old, new)
    starts = _offsets(text)

    def at(point: tuple[int, int]) -> int:
        return starts[point[0] - 1] + point[1]

    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    skip = {tokenize.NL, tokenize.COMMENT}
    significant = [i for i, t in enumerate(tokens) if t.type not in skip]
    following = dict(itertools.pairwise(significant))
    preceding = {b: a for a, b in following.items()}
    edits: list[tuple[int, int, str]] = []
    for i, tok in enumerate(tokens):
        after = tokens[following[i]] if i in following else None
        if tok.type == tokenize.NAME and tok.string in ("async", "await"):
            # the keyword and the space after it
            stop = tok.end
            if after is not None and after.start[0] == tok.end[0]:
                stop = after.start
            edits.append((at(tok.start), at(stop), ""))
        elif tok.type == tokenize.NAME and tok.string in NAMES:
            edits.append((at(tok.start), at(tok.end), NAMES[tok.string]))
        elif tok.type == tokenize.NAME and tok.string.endswith("AsyncStub"):
            edits.append(
                (at(tok.start), at(tok.end), tok.string.removesuffix("AsyncStub") + "Stub")
            )
        elif (
            tok.string == "grpc"
            and after is not None
            and after.string == "."
            and tokens[following[following[i]]].string == "aio"
        ):
            aio = following[following[i]]
            dot = following[aio]
            edits.append((at(tokens[aio].start), at(tokens[dot].end), ""))
        elif (
            tok.string == "("
            and after is not None
            and after.string == "await"
            and not _is_call_paren(tokens[preceding[i]] if i in preceding else None)
        ):
            close = _plain_await_group(tokens, following, i)
            if close is not None:
                last = tokens[preceding[close]]
                edits.append((at(tok.start), at(after.start), ""))
                edits.append((at(last.end), at(tokens[close].end), ""))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _plain_await_group(
    tokens: list[tokenize.TokenInfo], following: dict[int, int], open_index: int
) -> int | None:
    """The index of the `)` closing `(await x.y(...)...)` at `open_index` when what
    the parentheses hold is one awaited primary (names, dots, calls, subscripts),
    so they can go once `await` has; None otherwise (they stay)."""
    depth = 0
    i = following[following[open_index]]  # the token after `await`
    while True:
        tok = tokens[i]
        if tok.string in ("(", "[", "{"):
            depth += 1
        elif tok.string in (")", "]", "}"):
            if depth == 0:
                return i if tok.string == ")" else None
            depth -= 1
        elif depth == 0 and not (tok.type == tokenize.NAME or tok.string == "."):
            return None
        i = following[i]


def _ruff() -> str:
    here = Path(sys.executable).parent / "ruff"
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        raise SystemExit("gen_sync_client: ruff is not installed; run make setup")
    return found


def _ruff_pass(args: list[str], text: str) -> str:
    result = subprocess.run(
        [_ruff(), *args, "--stdin-filename", str(TARGET.relative_to(ROOT)), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"gen_sync_client: ruff {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def generate() -> str:
    """What sync.py should hold, made from aio.py."""
    text = HEADER + unasync(SOURCE.read_text(encoding="utf-8"))
    text = _ruff_pass(
        ["check", "--fix-only", "--unsafe-fixes", "--exit-zero", "--select", "I,UP028"], text
    )
    return _ruff_pass(["format"], text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--check", action="store_true", help="fail if sync.py is not what aio.py gives"
    )
    args = parser.parse_args()
    wanted = generate()
    if args.check:
        if TARGET.read_text(encoding="utf-8") != wanted:
            print(
                f"{TARGET.relative_to(ROOT)} is stale: run `make gen-client` "
                "(python scripts/gen_sync_client.py) and commit it",
                file=sys.stderr,
            )
            return 1
        return 0
    TARGET.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
