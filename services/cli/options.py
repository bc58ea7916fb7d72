"""The options several `engram` commands share, each declared once here: the
namespace of the client commands, the configuration and data directory of the
commands that run or manage the services, and the connection options (and `--json`)
of every command that talks to a running suite."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_CONFIG = "engram.yaml"
CONFIG_HELP = f"configuration file (default: $ENGRAM_CONFIG, else ./{DEFAULT_CONFIG} if present)"
AS_FOR_UP = "configuration file (as for `up`)"
DATA_DIR_HELP = "directory for engram.db"
DATA_DIR_AS_FOR_UP = "directory of engram.db (as for `up`)"


def _apply(command: F, options: list[Callable[[F], F]]) -> F:
    """`options` on `command`, listed in help in the order given."""
    for option in reversed(options):
        command = option(command)
    return command


# ---- the commands that run or manage the services --------------------------------------


def default_config() -> str | None:
    """--config when not given: $ENGRAM_CONFIG (empty: none), else ./engram.yaml if present."""
    if "ENGRAM_CONFIG" in os.environ:
        return os.environ["ENGRAM_CONFIG"] or None
    return DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None


def config_option(help: str = AS_FOR_UP) -> Callable[[F], F]:
    """--config FILE: the configuration file, `default_config()` when not given."""
    return click.option(
        "--config", "config_path", default=default_config, metavar="CONFIG", help=help
    )


def config_options(
    config_help: str = AS_FOR_UP, data_dir_help: str = DATA_DIR_AS_FOR_UP
) -> Callable[[F], F]:
    """--config and --data-dir (the directory of engram.db, overriding storage.path)."""

    def apply(command: F) -> F:
        return _apply(
            command,
            [
                config_option(config_help),
                click.option("--data-dir", default=None, metavar="DATA_DIR", help=data_dir_help),
            ],
        )

    return apply


# ---- the commands that talk to a running suite -------------------------------------------

namespace_option = click.option("--namespace", "-n", default="")


def connection_options(command: F) -> F:
    """Where the suite is and how to call it: every client command's options."""
    return _apply(
        command,
        [
            click.option(
                "--address",
                envvar="ENGRAM_ADDRESS",
                default=DEFAULT_ADDRESS,
                show_default=True,
                help="the store's host:port (or a bare host: port 50051); the other services "
                "are where the store says; $ENGRAM_ADDRESS",
            ),
            click.option(
                "--search-address",
                envvar="ENGRAM_SEARCH_ADDRESS",
                default=None,
                help="search's host:port; $ENGRAM_SEARCH_ADDRESS",
            ),
            click.option(
                "--maintenance-address",
                envvar="ENGRAM_MAINTENANCE_ADDRESS",
                default=None,
                help="maintenance's host:port; $ENGRAM_MAINTENANCE_ADDRESS",
            ),
            click.option(
                "--api-key", envvar="ENGRAM_API_KEY", default=None, help="$ENGRAM_API_KEY"
            ),
            click.option("--timeout", type=float, default=10.0, show_default=True, help="seconds"),
            click.option(
                "--cacert",
                envvar="ENGRAM_CACERT",
                default=None,
                help="speak TLS, verifying the services with this CA file; $ENGRAM_CACERT",
            ),
            click.option(
                "--cert",
                envvar="ENGRAM_CERT",
                default=None,
                help="client certificate (mTLS); $ENGRAM_CERT",
            ),
            click.option(
                "--key", envvar="ENGRAM_KEY", default=None, help="its private key; $ENGRAM_KEY"
            ),
        ],
    )


def common_options(command: F) -> F:
    """The connection options and `--json`: what every command that prints takes."""
    command = click.option("--json", "as_json", is_flag=True, help="JSON lines instead of tables")(
        command
    )
    return connection_options(command)
