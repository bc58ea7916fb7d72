"""What produced a benchmark figure: the runtime record every bench result carries.

The same code and data gave LongMemEval turn R@10 0.895 on one install and 0.900
on the next (bench/README.md, "Reproducibility"): the stored vectors changed with
the embedding runtime. So each result says what made it: `record()` is written
under the key "runtime" of every JSON result a bench script writes, beside a
rankings file as `<rankings>.runtime.json` (`write_beside`), and into
bench/embed_cache.py's vector cache, which warns when vectors of two runtimes
would be mixed (`EMBEDDING_KEYS`: the fields a vector depends on).
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from services.common.providers.local_embedding import model_file, tokenizer_file  # noqa: E402

# The fields the local model's vectors depend on: the same text embedded under two
# records that differ in one of these may give another vector (the int8 kernels
# onnxruntime picks depend on the CPU's instruction set too, hence `cpu`).
EMBEDDING_KEYS = (
    "onnxruntime",
    "tokenizers",
    "numpy",
    "model_sha256",
    "tokenizer_sha256",
    "machine",
    "cpu",
)


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _sha256(path: Path | None) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else None


def _tokenizer() -> Path | None:
    try:
        return tokenizer_file()
    except ImportError:  # a slim install
        return None


def _cpu() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; elsewhere what platform knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def _sqlite() -> str | None:
    try:
        import sqlean  # the store's SQLite (services/storage/db.py)
    except ImportError:
        return None
    return str(sqlean.sqlite_version)


@functools.cache
def _record() -> tuple[tuple[str, Any], ...]:
    status = _git("status", "--porcelain", "--untracked-files=no")
    return tuple(
        {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu": _cpu(),
            "onnxruntime": _version("onnxruntime"),
            "tokenizers": _version("tokenizers"),
            "numpy": _version("numpy"),
            "sqlite": _sqlite(),
            "sqlite_vec": _version("sqlite-vec"),
            "model_sha256": _sha256(model_file()),
            "tokenizer_sha256": _sha256(_tokenizer()),
            "git_commit": _git("rev-parse", "HEAD"),
            "git_dirty": None if status is None else bool(status),
        }.items()
    )


def record() -> dict[str, Any]:
    """This process's runtime: Python, platform, the embedding runtime's versions,
    SQLite, the model and tokenizer files' sha256 and the git commit (computed once)."""
    return dict(_record())


def embedding_runtime(full: dict[str, Any]) -> dict[str, Any]:
    """The part of a record the local model's vectors depend on."""
    return {k: full.get(k) for k in EMBEDDING_KEYS}


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> str:
    """'onnxruntime 1.31.1 -> 1.32.0; ...' over EMBEDDING_KEYS ('' when they agree)."""
    return "; ".join(
        f"{k} {recorded.get(k)} -> {current.get(k)}"
        for k in EMBEDDING_KEYS
        if recorded.get(k) != current.get(k)
    )


def summary(full: dict[str, Any] | None = None) -> str:
    """One line for a run's log."""
    r = full or record()
    commit = (r["git_commit"] or "?")[:12] + ("+dirty" if r["git_dirty"] else "")
    model = (r["model_sha256"] or "none")[:12]
    return (
        f"runtime: python {r['python']} {r['machine']} ({r['cpu']}), onnxruntime "
        f"{r['onnxruntime']}, tokenizers {r['tokenizers']}, numpy {r['numpy']}, sqlite "
        f"{r['sqlite']}, model {model}, commit {commit}"
    )


def beside(path: Path) -> Path:
    """Where the runtime record of a results file lives: `<path>.runtime.json`."""
    return path.with_name(path.name + ".runtime.json")


def write_beside(path: Path, **extra: Any) -> Path:
    """Write `<path>.runtime.json`: the command line, `extra` and the runtime record."""
    out = beside(path)
    out.write_text(
        json.dumps({"command": sys.argv, **extra, "runtime": record()}, indent=2, default=str)
        + "\n"
    )
    return out


def stamped(result: dict[str, Any]) -> dict[str, Any]:
    """A JSON result as written: `result` with this process's record under "runtime"."""
    return {**result, "runtime": record()}


def kept_database(data_dir: Path | None, reused: bool, **extra: Any) -> dict[str, Any] | None:
    """What built a benchmark's kept database (`--data-dir`, its vectors included):
    written beside DIR/engram.db when this run builds it, read back when a run
    reuses it; None without a data directory or for one built before it was
    recorded."""
    if data_dir is None:
        return None
    path = beside(data_dir / "engram.db")
    if not reused:
        write_beside(data_dir / "engram.db", **extra)
    return json.loads(path.read_text()) if path.exists() else None
