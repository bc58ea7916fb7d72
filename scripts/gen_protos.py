"""Generate gen/ from protos/: messages, gRPC stubs and mypy stubs.

One script so that `make gen` and `make gen-check` can never disagree. The proto
package equals the Python import path (engram.store.v1), so no import rewriting.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
GEN = ROOT / "gen"
# `engram` is shared by the generated stubs (gen/engram) and the hand-written client
# (clients/python/engram/client): each `engram/` directory on sys.path joins the package,
# so `engram.client` imports from a checkout as from an installed wheel.
NAMESPACE_INIT = (
    '"""Engram\'s protobuf stubs and its Python client (engram.client)."""\n\n'
    "from pkgutil import extend_path\n\n"
    "__path__ = extend_path(__path__, __name__)\n"
)


def generate(out: Path) -> None:
    """Run protoc over every Engram .proto file into `out`, then add package
    markers. Vendored imports (protos/google/api) are only read: their Python
    modules come from googleapis-common-protos."""
    files = sorted(str(p.relative_to(PROTOS)) for p in (PROTOS / "engram").rglob("*.proto"))
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTOS}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--mypy_out={out}",
            f"--mypy_grpc_out={out}",
            *files,
        ],
        check=True,
        env=env,
    )
    package = out / "engram"
    for directory in (p for p in package.rglob("*") if p.is_dir()):
        (directory / "__init__.py").touch()
    (package / "__init__.py").write_text(NAMESPACE_INIT, encoding="utf-8")
    (package / "py.typed").touch()


def differences(a: Path, b: Path) -> list[str]:
    """Relative paths that differ between two generated trees."""
    found: list[str] = []
    comparison = filecmp.dircmp(a, b, ignore=["__pycache__"])

    def walk(cmp: filecmp.dircmp[str], prefix: str) -> None:
        found.extend(prefix + name for name in cmp.left_only + cmp.right_only + cmp.diff_files)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(comparison, "")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if gen/ is stale")
    args = parser.parse_args()
    if not args.check:
        shutil.rmtree(GEN, ignore_errors=True)
        GEN.mkdir()
        generate(GEN)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        stale = differences(fresh, GEN)
    if stale:
        print("gen/ is stale; run `make gen`. Differing files:", *stale, sep="\n  ")
        return 1
    print("gen/ is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
