"""The Makefile, the Dockerfile and the Docker build context are true on a
normal machine (issue 13 "Platforms"): no note about a machine-local wheel, a
build context without the virtualenv, data or caches, `make setup` that says
what it is doing, and `make test` that fails rather than skips when a tool its
own install provides is missing."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _ignored_by_docker(path: str, patterns: list[str]) -> bool:
    """Docker's rule for the build context, for the patterns used here: a
    pattern matches a path or any of its parent folders (Go filepath.Match,
    with `**` for any number of folders); a trailing slash names a folder;
    later `!` patterns re-include."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.lstrip("!").rstrip("/")
        regex = fnmatch.translate(pattern).replace(".*", "[^/]*").replace("[^/]*[^/]*", ".*")
        if pattern.startswith("**/"):
            regex = "(?:.*/)?" + fnmatch.translate(pattern[3:]).replace(".*", "[^/]*")
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            ignored = not negate
    return ignored


def test_no_build_file_speaks_of_a_machine_local_wheel() -> None:
    for name in ("Makefile", "Dockerfile", "pyproject.toml", "compose.yaml"):
        text = (ROOT / name).read_text().lower()
        assert "local wheel" not in text and "these machines" not in text, name


def test_the_build_context_leaves_out_the_venv_data_and_caches() -> None:
    patterns = _dockerignore_patterns()
    left_out = [
        ".venv/bin/python",
        ".venv/lib/python3.11/site-packages/torch/__init__.py",
        "venv/bin/python",
        "data/engram.db",
        "data/engram.db-wal",
        "engram.db",
        ".git/HEAD",
        ".pytest_cache/v/cache/nodeids",
        ".mypy_cache/3.11/services/cli.data.json",
        ".ruff_cache/0.6.0/123",
        ".hypothesis/examples/ab/cd",
        "services/store/__pycache__/jobs.cpython-311.pyc",
        "engram.egg-info/PKG-INFO",
        "bench/results/run.json",
    ]
    assert [p for p in left_out if not _ignored_by_docker(p, patterns)] == []
    needed = [
        "pyproject.toml",
        "README.md",
        "gen/engram/store/v1/store_pb2.py",
        "services/store/jobs.py",
        "services/__init__.py",
        "clients/python/pyproject.toml",
        "clients/python/engram/client/sync.py",
    ]
    assert [p for p in needed if _ignored_by_docker(p, patterns)] == []


def test_the_dockerfile_copies_only_what_the_image_needs() -> None:
    copies = [
        line.split()[1:-1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
    ]
    sources = {source for sources in copies for source in sources}
    assert sources == {"pyproject.toml", "README.md", "gen", "services", "clients/python"}


def test_make_setup_reports_each_step() -> None:
    """`make run` on a fresh clone installs first; it says so step by step."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("$(STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    steps = re.findall(r'@echo "==> \[(\d)/(\d)\]', recipe)
    assert steps and [int(n) for n, _ in steps] == list(range(1, int(steps[0][1]) + 1))


def test_make_test_fails_rather_than_skips_for_a_missing_dev_tool() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest: setup\n", 1)[1].split("\n\n", 1)[0]
    assert "ENGRAM_STRICT_TESTS=1" in recipe and "pytest" in recipe
    # Every test that runs grpcurl goes through the one strict-aware mark.
    bare_skip = "skipif(" + "GRPCURL"
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        assert bare_skip not in path.read_text(), f"{path.name}: use e2e_helpers.needs_grpcurl()"
