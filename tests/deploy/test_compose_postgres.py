"""compose's `postgres` profile: PostgreSQL 18 + pgvector, one store writing as the
database's owner, two search replicas reading as the read-only role, two pipeline
replicas with lease names of their own; the default profile stays SQLite.

The settings each container loads are checked with the real config loader, and the
addresses each service's code reads (test_compose_addresses' AST scan) must name the
pg-* service that runs that listener. The docs' `up` command (docs/storage.md) is checked against
`docker-compose --profile postgres config`. The init script that creates the reader
role runs against a real server in tests/postgres/test_pg_compose_initdb.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from test_compose_addresses import (
    LISTENER_SERVICE,
    SERVICES,
    addresses_by_service,
    compose_services,
    container_config,
)
from test_monitoring import compose_config

ROOT = Path(__file__).resolve().parents[2]
PROFILE = "postgres"
# the pg-* services by the Engram service they run
PG_SERVICES = {
    "store": ["pg-store"],
    "search": ["pg-search-1", "pg-search-2"],
    "pipeline": ["pg-pipeline-1", "pg-pipeline-2"],
    "maintenance": ["pg-maintenance"],
}


def profile_services() -> dict[str, Any]:
    return {
        name: spec for name, spec in compose_services().items() if spec.get("profiles") == [PROFILE]
    }


def test_the_profile_runs_postgres_and_every_engram_service_and_the_default_stays_sqlite() -> None:
    services = compose_services()
    profile = profile_services()
    assert set(profile) == {"postgres", *(n for names in PG_SERVICES.values() for n in names)}
    for service, names in PG_SERVICES.items():
        for name in names:
            assert profile[name]["command"] == ["serve", service]
    for service in SERVICES:  # the default profile: no profile, the SQLite file
        spec = services[service]
        assert "profiles" not in spec
        assert container_config(spec).storage.kind == "sqlite"
        assert not any(name.startswith("ENGRAM_STORAGE__POSTGRES") for name in spec["environment"])


def test_postgres_is_pgvector_on_18_with_a_volume_a_health_check_and_no_published_port() -> None:
    postgres = profile_services()["postgres"]
    assert re.fullmatch(r"pgvector/pgvector:0\.8\.\d+-pg18", postgres["image"])
    # PostgreSQL 18's images keep PGDATA under /var/lib/postgresql/18/: mount the parent
    assert "engram-postgres:/var/lib/postgresql" in postgres["volumes"]
    assert "./deploy/postgres/initdb:/docker-entrypoint-initdb.d:ro" in postgres["volumes"]
    assert (ROOT / "deploy/postgres/initdb/10-engram-reader.sh").stat().st_mode & 0o111
    assert postgres["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert "ports" not in postgres
    assert postgres["environment"]["POSTGRES_USER"] == "engram"
    assert postgres["environment"]["POSTGRES_DB"] == "engram"


def _dsn_user(dsn: str) -> str | None:
    """The role as the store reads it (pg.dsn_user: libpq's parser)."""
    from services.storage.pg import dsn_user

    return dsn_user(dsn)


def test_the_store_writes_as_the_owner_and_search_reads_as_the_reader_role() -> None:
    profile = profile_services()
    owner = profile["postgres"]["environment"]["POSTGRES_USER"]
    store = profile["pg-store"]
    config = container_config(store)
    assert config.storage.kind == "postgres"
    assert _dsn_user(config.storage.postgres.dsn) == owner
    from psycopg.conninfo import conninfo_to_dict

    assert conninfo_to_dict(config.storage.postgres.dsn)["host"] == "postgres"
    assert store["environment"]["PGPASSWORD"] == "${ENGRAM_POSTGRES_PASSWORD:-}"
    assert store["depends_on"]["postgres"]["condition"] == "service_healthy"
    # the memories live in PostgreSQL: nothing mounts the SQLite volume
    for name, spec in profile.items():
        assert not any(v.startswith("engram-data:") for v in spec.get("volumes", [])), name
    readers = set()
    for name in PG_SERVICES["search"]:
        spec = profile[name]
        search = container_config(spec).storage
        assert search.kind == "postgres"
        readers.add(_dsn_user(search.postgres.reader_dsn))
        assert spec["environment"]["PGPASSWORD"] == "${ENGRAM_POSTGRES_READER_PASSWORD:-}"
        assert spec["depends_on"]["pg-store"]["condition"] == "service_healthy"
    assert readers == {"engram_reader"}  # the init script's default role
    assert readers != {owner}
    script = (ROOT / "deploy/postgres/initdb/10-engram-reader.sh").read_text()
    assert "${ENGRAM_READER_ROLE:-engram_reader}" in script
    # the pipelines and maintenance never open the database
    for service in ("pipeline", "maintenance"):
        for name in PG_SERVICES[service]:
            environment = profile[name]["environment"]
            assert not any(
                k.startswith("ENGRAM_STORAGE__") and k != "ENGRAM_STORAGE__PATH"
                for k in environment
            ), name
            assert "PGPASSWORD" not in environment, name


def test_auth_is_on_and_only_the_store_writes_the_keys() -> None:
    """As in the default profile: the services bind 0.0.0.0, so auth is on, with the
    same keys volume (read-write for the store, which `keys create` runs in)."""
    profile = profile_services()
    for names in PG_SERVICES.values():
        for name in names:
            assert container_config(profile[name]).auth.enabled, name
            keys = [v for v in profile[name]["volumes"] if v.startswith("engram-keys:")]
            assert keys == (
                ["engram-keys:/keys"] if name == "pg-store" else ["engram-keys:/keys:ro"]
            )


@pytest.mark.parametrize("service", SERVICES)
def test_each_address_a_pg_service_reads_names_the_pg_service_on_its_port(service: str) -> None:
    """As test_compose_addresses, inside the profile: every client address names a
    pg-* service that runs the listener, never a default-profile service."""
    profile = profile_services()
    for name in PG_SERVICES[service]:
        config = container_config(profile[name])
        for key in sorted(addresses_by_service()[service]):
            address = getattr(config.clients, key)
            host, _, port = address.rpartition(":")
            listener = key.removesuffix("_address")
            target = LISTENER_SERVICE.get(listener, listener)
            assert host in PG_SERVICES[target], f"{name}: clients.{key} is {address!r}"
            listens_on = getattr(container_config(profile[host]).server.ports, listener)
            assert port == str(listens_on), f"{name}: clients.{key} is {address!r}"


def test_the_replicas_share_the_work_and_keep_their_own_names_and_ports() -> None:
    profile = profile_services()
    names = [
        container_config(profile[name]).workers.instance_name for name in PG_SERVICES["pipeline"]
    ]
    assert names == PG_SERVICES["pipeline"]  # stable, distinct lease holders
    searches = {
        container_config(profile[name]).clients.search_address for name in PG_SERVICES["pipeline"]
    }
    assert searches == {f"{name}:50052" for name in PG_SERVICES["search"]}  # one each
    published = [
        mapping.rsplit(":", 1)[0] for spec in profile.values() for mapping in spec.get("ports", [])
    ]
    assert len(published) == len(set(published)), published
    store = container_config(profile["pg-store"])
    assert store.server.internal_host == "0.0.0.0"
    assert not any(str(store.server.ports.store_internal) in p.split(":") for p in published)


def _readme_postgres_section() -> str:
    text = (ROOT / "docs" / "storage.md").read_text(encoding="utf-8")
    return text.split("\n## PostgreSQL\n", 1)[1].split("\n## ", 1)[0]


def test_the_readmes_postgres_commands_name_what_compose_defines() -> None:
    """The docs' compose block (docs/storage.md; tests/e2e/test_readme_examples.py leaves it to this
    test: no Docker here): each `export` sets a variable compose.yaml reads, `up`
    starts the whole profile and nothing else, `run`/`exec` name profile services."""
    section = _readme_postgres_section()
    blocks = re.findall(r"^```sh\n(.*?)^```", section, flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, "the PostgreSQL section has one ```sh block"
    compose_text = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    services = compose_config("--profile", PROFILE)["services"]
    profile = set(profile_services())
    ups = []
    for line in blocks[0].splitlines():
        command = line.split("  #", 1)[0].strip()
        if command.startswith("export "):
            variable = command.removeprefix("export ").split("=", 1)[0]
            assert "${" + variable + ":" in compose_text, f"compose.yaml never reads {variable}"
            continue
        words = command.split()
        assert words[:3] == ["docker-compose", "--profile", PROFILE], line
        verb, rest = words[3], words[4:]
        named = [w for w in rest if not w.startswith("-")]
        if verb == "up":
            ups.append(named)
        else:
            assert verb in ("run", "exec"), line
            assert named[0] in profile, line  # the service the command runs in
    assert len(ups) == 1
    started: set[str] = set()
    pending = list(ups[0])
    while pending:  # `up` starts the named services and their dependencies
        name = pending.pop()
        if name not in started:
            started.add(name)
            pending.extend(services[name].get("depends_on", {}))
    assert started == profile
