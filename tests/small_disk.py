"""A real, small filesystem for disk-full tests (one home): a tmpfs of a given
size mounted for one test, and a file that takes every free byte of it.
tests/store/test_store_storage_full.py fills one under a SQLite file,
tests/e2e/test_postgres_storage_full.py one under a PostgreSQL tablespace."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

# what "full" leaves free: less than one 64 KiB write
FULL_BELOW_BYTES = 64 * 1024


def mount_tmpfs(path: Path, size: int) -> None:
    """Mount a tmpfs of `size` bytes at `path`, or skip the test saying why."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount command")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@contextlib.contextmanager
def small_disk_at(path: Path, size: int) -> Iterator[Path]:
    """`path` (created) as a nearly empty filesystem of `size` bytes, unmounted after."""
    path.mkdir()
    mount_tmpfs(path, size)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> None:
    """Take every free byte of the filesystem that holds `path` (a new file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for block in (b"\0" * (1 << 20), b"\0" * (1 << 12), b"\0"):
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    assert shutil.disk_usage(path.parent).free < FULL_BELOW_BYTES
