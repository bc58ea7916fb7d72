"""Fixtures for the end-to-end tests; the implementations live in e2e_helpers."""

from e2e_helpers import data_dir, launcher, module_launcher

__all__ = ["data_dir", "launcher", "module_launcher"]
