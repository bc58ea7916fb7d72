"""A pipeline replica's lease name: stable across restarts, never shared by two
live replicas (services/pipeline/leases.py)."""

from __future__ import annotations

import socket

import pytest

from services.common.config import ConfigError, load_config
from services.pipeline.leases import instance_name


def test_the_configured_name_wins() -> None:
    config = load_config(environ={}, overrides={"workers.instance_name": "pipeline-0"})
    assert instance_name(config, 50053) == "pipeline-0"


def test_by_default_the_host_and_port_name_the_replica() -> None:
    config = load_config(environ={})
    assert instance_name(config, 50053) == f"{socket.gethostname()}:50053"
    assert instance_name(config, 50053) == instance_name(config, 50053), "same after a restart"
    assert instance_name(config, 50063) != instance_name(config, 50053)


def test_an_ephemeral_port_gives_every_process_its_own_name() -> None:
    config = load_config(environ={})
    assert instance_name(config, 0) != instance_name(config, 0)


def test_an_over_long_name_stops_the_start_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"workers\.instance_name"):
        load_config(environ={}, overrides={"workers.instance_name": "x" * 181})
    load_config(environ={}, overrides={"workers.instance_name": "x" * 180})
