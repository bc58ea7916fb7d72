"""Lint, type check, proto lint, breaking-change check and generated-code
freshness run with the tests."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(*command: str) -> None:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; run make setup")
    return found


def test_generated_code_is_fresh() -> None:
    _run(sys.executable, "scripts/gen_protos.py", "--check")


def test_protos_pass_buf_lint() -> None:
    _run(_tool("buf"), "lint", "protos")


def test_protos_have_no_breaking_change_against_the_committed_baseline() -> None:
    """A breaking change to a proto is deliberate: regenerate the baseline
    (`make proto-baseline`) in the same commit and say why."""
    _run(_tool("buf"), "breaking", "protos", "--against", "protos/baseline.binpb")


def test_ruff_lint_and_format() -> None:
    _run(_tool("ruff"), "check", ".")
    _run(_tool("ruff"), "format", "--check", ".")


def test_mypy() -> None:
    _run(_tool("mypy"))
