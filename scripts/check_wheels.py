"""Does every runtime dependency have a binary wheel for every platform we support?

    python scripts/check_wheels.py [--python 3.11]

For Linux x86-64, Linux arm64 and macOS arm64, asks pip to download (no dependencies,
binary wheels only, into a temporary directory) every dependency in pyproject.toml's
[project].dependencies plus the packages underneath them that need a native wheel
(onnxruntime and tokenizers for the default local model; torch, safetensors, scipy,
scikit-learn, hf-xet for its torch runtime). Prints one line per platform; exit 1 if any fails.
Needs the network. torch is checked on PyPI, where macOS wheels are CPU builds; the
Linux CPU build comes from the index the Makefile's TORCH_INDEX names, not checked here.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLATFORMS = {
    "linux x86-64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
    "linux arm64": ("manylinux2014_aarch64", "manylinux_2_28_aarch64"),
    "macos arm64": ("macosx_11_0_arm64", "macosx_14_0_arm64"),
}
NATIVE_BELOW = (
    "onnxruntime",
    "torch==2.13.0",
    "tokenizers",
    "safetensors",
    "scipy",
    "scikit-learn",
    "hf-xet",
)


def requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *NATIVE_BELOW]


def check(platform_tags: tuple[str, ...], python: str, wanted: list[str]) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as dest:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        argv += ["--python-version", python, "--implementation", "cp", "-d", dest, "-q"]
        for tag in platform_tags:
            argv += ["--platform", tag]
        result = subprocess.run([*argv, *wanted], capture_output=True, text=True)
        if result.returncode != 0:
            return False, result.stderr.strip().splitlines()[-1] if result.stderr else "failed"
        return True, ", ".join(sorted(p.name for p in Path(dest).iterdir()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="3.11")
    args = parser.parse_args()
    wanted = requirements()
    ok = True
    for name, tags in PLATFORMS.items():
        good, detail = check(tags, args.python, wanted)
        ok &= good
        print(f"{name}: {'ok' if good else 'MISSING'}: {detail}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
