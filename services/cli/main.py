"""The `engram` command.

engram up [--config FILE] [--data-dir DIR]      run every service, one process each
engram serve SERVICE [--config FILE] [--data-dir DIR] [--port N]
engram health [ADDRESS] [--cacert FILE [--cert FILE --key FILE]]
                                                  exit 0 when the server reports SERVING
engram backup --to FILE [--config FILE] [--data-dir DIR] [--force]
                                                  copy the database while the store runs
engram restore --from FILE [--config FILE] [--data-dir DIR] [--force]
                                                  put a backup in place of a stopped store's database
engram keys create --role ROLE --namespace PATTERN [--name NAME] [--config FILE] [--data-dir DIR]
                                                  a new API key, printed once on the last line
engram keys list [--config FILE] [--data-dir DIR]
engram keys revoke NAME [--config FILE] [--data-dir DIR]
engram certs dev --out DIR [--host NAME]... [--force]
                                                  a local CA and certificates for TLS and mTLS

A command that calls a service verifies it with clients.tls from the configuration
(ca_file, and cert_file/key_file for mTLS); `health` also takes them as flags.
engram remember|recall|get|list|history|weak|supersede|modify|delete|recover|explain|links|session|
       entity|forget|namespace|import|export|diagnostics|maintenance|retention ...
                                                  talk to a running suite (services/cli/client_commands.py;
                                                  `engram --help` lists them, `engram COMMAND --help`)
engram mcp [--http PORT] [--address HOST:PORT]    an MCP server (stdio, or streamable HTTP) with memory
                                                  tools for agents (services/cli/mcp_server.py)

The configuration file is --config, else $ENGRAM_CONFIG, else ./engram.yaml if it exists.
Every command is a click command of one group (`engram`, below); the options several
share are declared once, in services/cli/options.py.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click

from services.cli.options import (
    CONFIG_HELP,
    DATA_DIR_HELP,
    config_option,
    config_options,
)
from services.cli.ports import port_holder, port_in_use
from services.common.config import (
    ClientsTlsSettings,
    Config,
    ConfigError,
    env_name,
    explicit_keys,
    load_config,
)
from services.common.logs import configure_logging
from services.common.server import wait_for_shutdown_signal
from services.common.startup import StartupError
from services.common.suite import WrongSuite

# Every service, in start order.
SERVICES = ("store", "search", "pipeline", "maintenance")
# The client settings that name each listener's address (clients.<listener>_address),
# by its server.ports key; store_internal is the store's internal listener.
CLIENT_KEYS = {
    name: f"clients.{name}_address" for name in ("store", "store_internal", "search", "pipeline")
}
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The server commands take `-h` as well as `--help` (the client commands: `--help`).
SERVER_CONTEXT = {"help_option_names": ["-h", "--help"]}
CLIENT_HEADING = "client commands (a running suite; `engram COMMAND --help`)"


class Engram(click.Group):
    """`engram`: the commands that run or manage the services are defined here; every
    other command is a client command (services/cli/client_commands.py), imported
    only when one is used or the help lists them."""

    @staticmethod
    def _client() -> click.Group:
        from services.cli.client_commands import cli

        return cli

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.commands, *self._client().commands]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        return self._client().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The server commands; the client commands follow, last (`format_epilog`)."""
        rows = [
            (name, command.get_short_help_str(limit=80)) for name, command in self.commands.items()
        ]
        with formatter.section("server commands (`engram COMMAND --help`)"):
            formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Every client command, read from the click group itself, so the list never
        leaves one out."""
        from services.cli.client_commands import command_summaries

        summaries = command_summaries()
        width = max(len(name) for name, _ in summaries)
        formatter.write_paragraph()
        formatter.write(f"{CLIENT_HEADING}:\n")
        for name, text in summaries:
            formatter.write(f"  {name:<{width}}  {text}\n")


def _exit_codes(command: Callable[..., int]) -> Callable[..., int]:
    """A server command's exit code, also when the configuration is bad (2) or a
    service cannot start (1), each said in one line."""

    @functools.wraps(command)
    def run(**params: Any) -> int:
        try:
            return command(**params)
        except ConfigError as exc:
            print(f"engram: configuration error: {exc}", file=sys.stderr)
            return 2
        except StartupError as exc:
            print(f"engram: cannot start {params.get('service', 'engram')}: {exc}", file=sys.stderr)
            return 1

    return run


@click.group(cls=Engram)
@click.help_option("-h", "--help")
def engram() -> None:
    """Long-term memory for AI agents."""


def _server_command(help: str) -> Callable[[Callable[..., Any]], click.Command]:
    """`engram NAME`, a command that runs or manages the services; `help` is what the
    command list and its own help say."""
    return engram.command(help=help, context_settings=SERVER_CONTEXT)


def _server_group(help: str) -> Callable[[Callable[..., Any]], click.Group]:
    return engram.group(help=help, context_settings=SERVER_CONTEXT)


def _starter(service: str) -> Callable[..., Awaitable[Any]]:
    if service == "store":
        from services.store.app import start_store

        return start_store
    if service == "search":
        from services.search.app import start_search

        return start_search
    if service == "pipeline":
        from services.pipeline.app import start_pipeline

        return start_pipeline
    if service == "maintenance":
        from services.maintenance.app import start_maintenance

        return start_maintenance
    raise ValueError(service)


def _load(config: str | None, data_dir: str | None) -> Config:
    """The configuration (`--config`), with storage.path in `--data-dir` when given."""
    overrides: dict[str, Any] = {}
    if data_dir:
        overrides["storage.path"] = str(Path(data_dir) / "engram.db")
    return load_config(config, overrides=overrides)


async def _serve(service: str, config: Config, port: int | None) -> None:
    from services.common.metrics import serve_metrics
    from services.common.tracing import configure_tracing
    from services.common.tracing import shutdown as shutdown_tracing

    configure_tracing(config, service)
    metrics = serve_metrics(config.server.host, getattr(config.server.metrics_ports, service))
    app = await _starter(service)(config, port=port)
    await wait_for_shutdown_signal()
    await app.server.drain(config.server.shutdown_drain_ms / 1000)
    await app.stop(config.server.shutdown_grace_ms / 1000)
    if metrics is not None:
        metrics.shutdown()
    shutdown_tracing()


def _die_with_parent(parent_pid: int) -> None:
    """A service started by `engram up` stops when `up` goes, even by SIGKILL, so it
    never lingers holding its port. Linux: the kernel sends SIGTERM (PR_SET_PDEATHSIG);
    everywhere: a thread that notices the parent is gone and sends SIGTERM itself."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before prctl took effect
        sys.exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _busy_port_message(prefix: str, service: str, host: str, port: int) -> str | None:
    if not port_in_use(host, port):
        return None
    return f"{prefix}: {service} port {port} is in use by {port_holder(port)}"


def _shared_port_message(prefix: str, listeners: list[tuple[str, str, int]]) -> str | None:
    """Two of a command's listeners configured on one port: the second bind would fail
    once the first had started; say so, naming both, before starting either."""
    first_on: dict[int, str] = {}
    for name, _host, port in listeners:
        if port == 0:  # the kernel picks a distinct port for each
            continue
        if port in first_on:
            return f"{prefix}: {first_on[port]} and {name} are both configured on port {port}"
        first_on[port] = name
    return None


def _listener_conflict(prefix: str, listeners: list[tuple[str, str, int]]) -> str | None:
    """Why a command cannot bind its listeners (two on one port, or one already in use),
    said before any of them starts; None when all are free."""
    shared = _shared_port_message(prefix, listeners)
    if shared:
        return shared
    for name, host, port in listeners:
        busy = _busy_port_message(prefix, name, host, port)
        if busy:
            return busy
    return None


@_server_command("start every service in the foreground")
@config_options(CONFIG_HELP, DATA_DIR_HELP)
@_exit_codes
def up(config_path: str | None, data_dir: str | None) -> int:
    config = _load(config_path, data_dir)  # fail here, once, on a bad configuration
    listeners = [
        (name, config.server.host, getattr(config.server.ports, name)) for name in SERVICES
    ]
    every_listener = [
        *listeners,
        _internal_listener(config),
        *_metrics_listeners(config, list(SERVICES)),
    ]
    conflict = _listener_conflict("engram up", every_listener)
    if conflict:
        print(conflict, file=sys.stderr)
        return 1
    base = [sys.executable, "-m", "services.cli.main", "serve"]
    extra: list[str] = ["--parent-pid", str(os.getpid())]
    environment = {**os.environ, **client_environment(config_path, config), **_service_key(config)}
    if config_path:
        extra += ["--config", config_path]
    if data_dir:
        extra += ["--data-dir", data_dir]
    children: dict[str, subprocess.Popen[bytes]] = {}
    ports = config.server.ports.model_dump()  # by service name
    print(
        "engram up: "
        + ", ".join(f"{name} on {config.server.host}:{ports[name]}" for name in SERVICES)
        + f" (store internal on {config.server.internal_host}:{ports['store_internal']})"
        + " (Ctrl-C to stop)",
        file=sys.stderr,
        flush=True,
    )
    stopping = False

    def stop(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The store first: the others depend on it, and a pipeline that finds it
    # down backs off (up to 30 s) before its workers try again.
    children["store"] = subprocess.Popen([*base, "store", *extra], env=environment)
    store_address = f"{_local_host(config.server.host)}:{config.server.ports.store}"
    # If the store exits instead, the loop below reports it and stops.
    if (
        _wait_until_serving(store_address, children["store"], lambda: stopping, config)
        and not stopping
    ):
        environment.update(_suite_environment(config))
        for name in SERVICES[1:]:
            if stopping:
                break
            children[name] = subprocess.Popen([*base, name, *extra], env=environment)
        if stopping:  # a signal while starting them missed the ones started after it
            stop(signal.SIGTERM, None)
    exit_code = 0
    while True:
        for name, child in children.items():
            if child.poll() is not None and not stopping:
                print(
                    f"engram up: {name} exited with {child.returncode}; stopping", file=sys.stderr
                )
                exit_code = 1
                stop(signal.SIGTERM, None)
        if all(child.poll() is not None for child in children.values()):
            return exit_code
        time.sleep(0.2)


@_server_command("run one service")
@click.argument("service", type=click.Choice(SERVICES))
@click.option("--port", type=int, default=None, metavar="PORT", help="override the configured port")
# set by `engram up`: stop when that process is gone
@click.option("--parent-pid", type=int, default=None, hidden=True)
@config_options(CONFIG_HELP, DATA_DIR_HELP)
@_exit_codes
def serve(
    service: str,
    port: int | None,
    parent_pid: int | None,
    config_path: str | None,
    data_dir: str | None,
) -> int:
    if parent_pid is not None:
        _die_with_parent(parent_pid)
    config = _load(config_path, data_dir)
    bound = port if port is not None else getattr(config.server.ports, service)
    listeners = [(service, config.server.host, bound)]
    if service == "store":
        listeners += [_internal_listener(config)]
    listeners += _metrics_listeners(config, [service])
    conflict = _listener_conflict("engram serve", listeners)
    if conflict:
        print(conflict, file=sys.stderr)
        return 1
    configure_logging(service, config.logging.level)
    try:
        asyncio.run(_serve(service, config, port))
    except WrongSuite as exc:
        print(f"engram serve {service}: {exc}", file=sys.stderr)
        return 1
    return 0


def _metrics_listeners(config: Config, services: list[str]) -> list[tuple[str, str, int]]:
    """Each service's metrics endpoint that is on: (name, bind host, port)."""
    return [
        (f"{name} metrics", config.server.host, port)
        for name in services
        if (port := getattr(config.server.metrics_ports, name))
    ]


def _internal_listener(config: Config) -> tuple[str, str, int]:
    """The store's internal listener: (name, bind host, port)."""
    return ("store internal", config.server.internal_host, config.server.ports.store_internal)


def client_environment(config_path: str | None, config: Config) -> dict[str, str]:
    """Each client address follows the port `up` gives that listener, unless the file or
    the environment sets it: a suite moved to other ports never reaches into another
    suite listening on the defaults."""
    explicit = explicit_keys(config_path)
    hosts = {name: config.server.host for name in CLIENT_KEYS}
    hosts["store_internal"] = config.server.internal_host
    return {
        env_name(key): f"{_local_host(hosts[name])}:{getattr(config.server.ports, name)}"
        for name, key in CLIENT_KEYS.items()
        if key not in explicit
    }


STORE_STARTUP_S = 60.0


def _service_key(config: Config) -> dict[str, str]:
    """With auth on, the services need a credential for each other: a fresh one
    for this run of the suite when none is configured (services/common/auth.py)."""
    if not config.auth.enabled:
        return {}
    from services.common import auth

    path = auth.keys_path(config)
    try:
        keys = auth.list_keys(path)
    except (OSError, ValueError, KeyError, TypeError):
        keys = None  # damaged: the store says so, in one line, when it starts
    if keys is not None and not any(k.revoked_at is None for k in keys):
        print(
            f"engram up: auth is on and {path} holds no key yet: every call but health is "
            "refused until you make one with `engram keys create --role ROLE --namespace NS`",
            file=sys.stderr,
        )
    if config.auth.service_key:
        return {}
    import secrets

    return {env_name("auth.service_key"): "svc_" + secrets.token_hex(32)}


def _suite_environment(config: Config) -> dict[str, str]:
    """clients.suite_id for the services `up` starts: the id in the store's database,
    so each of them refuses a store that is not this suite's (services/common/suite.py)."""
    from services.storage.db import connect_read_only
    from services.storage.store.suite_sql import read_suite_id

    try:
        conn = connect_read_only(config.storage)
        try:
            suite_id = read_suite_id(conn)
        finally:
            conn.close()
    except Exception as exc:  # the store never came up; the others then check nothing
        print(f"engram up: cannot read the suite id ({exc}); not checking it", file=sys.stderr)
        return {}
    return {env_name("clients.suite_id"): suite_id}


def _local_host(host: str) -> str:
    """Where to reach a server bound to `host` from this machine."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def _wait_until_serving(
    address: str,
    process: subprocess.Popen[bytes],
    stopping: Callable[[], bool],
    config: Config,
) -> bool:
    """True once `address` reports SERVING; False if the process exits or we are
    stopped first. After STORE_STARTUP_S it gives up waiting (True): the other
    services retry on their own."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + STORE_STARTUP_S
    with client_channel(address, config.clients.tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if process.poll() is not None or stopping():
                return False
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return True
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    print(
        f"engram up: store not serving after {STORE_STARTUP_S:.0f} s; starting the rest",
        file=sys.stderr,
    )
    return True


def client_channel(address: str, tls: ClientsTlsSettings) -> Any:
    """A blocking channel to `address`: TLS (and mTLS) as `tls` says (services/common/tls.py)."""
    import grpc

    from services.common.tls import channel_credentials

    credentials = channel_credentials(tls)
    if credentials is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, credentials)


def _client_tls(
    config: str | None, cacert: str | None, cert: str | None, key: str | None
) -> ClientsTlsSettings:
    """clients.tls from the configuration, each file replaced by its flag when given."""
    configured = load_config(config).clients.tls
    return ClientsTlsSettings(
        ca_file=cacert or configured.ca_file,
        cert_file=cert or configured.cert_file,
        key_file=key or configured.key_file,
    )


@_server_command("check a server's gRPC health")
@click.argument("address", default="127.0.0.1:50051", required=False)
@click.option(
    "--service", default="", metavar="SERVICE", help="service name; empty means the server"
)
@click.option("--timeout", type=float, default=3.0, metavar="TIMEOUT")
@config_option("configuration file: clients.tls (as for `up`)")
@click.option(
    "--cacert", metavar="CACERT", help="verify the server with this CA (clients.tls.ca_file)"
)
@click.option("--cert", metavar="CERT", help="client certificate for mTLS (clients.tls.cert_file)")
@click.option("--key", metavar="KEY", help="its private key (clients.tls.key_file)")
@_exit_codes
def health(
    address: str,
    service: str,
    timeout: float,
    config_path: str | None,
    cacert: str | None,
    cert: str | None,
    key: str | None,
) -> int:
    """A probe for container health checks: no suite state, only the server's answer."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        channel = client_channel(address, _client_tls(config_path, cacert, cert, key))
    except StartupError as exc:
        print(f"engram health: {exc}", file=sys.stderr)
        return 2
    with channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.RpcError as error:
            print(f"{address}: {error.code().name}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    print(f"{address}: {status}")
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


@_server_command("copy the database while the store keeps serving")
@click.option("--to", required=True, metavar="FILE", help="the backup file to write")
@click.option("--force", is_flag=True, help="replace FILE")
@config_options()
@_exit_codes
def backup(to: str, force: bool, config_path: str | None, data_dir: str | None) -> int:
    """A consistent copy of the live database; the store keeps serving (services/store/backup.py)."""
    from services.store.backup import BackupError, refuse_postgres
    from services.store.backup import backup as copy_database

    storage = _load(config_path, data_dir).storage
    database = storage.path
    try:
        refuse_postgres(storage, "backup")
        size = copy_database(database, to, force=force)
    except (BackupError, OSError) as exc:
        print(f"engram backup: {exc}", file=sys.stderr)
        return 1
    print(f"engram backup: {database} -> {to} ({size} bytes)")
    return 0


@_server_command("restore a backup into a stopped data directory")
@click.option("--from", "source", required=True, metavar="FILE", help="the backup file")
@click.option("--force", is_flag=True, help="replace an existing database")
@config_options()
@_exit_codes
def restore(source: str, force: bool, config_path: str | None, data_dir: str | None) -> int:
    """Replace a stopped store's database with a checked backup (services/store/backup.py)."""
    from services.store.backup import BackupError, refuse_postgres
    from services.store.backup import restore as restore_database

    storage = _load(config_path, data_dir).storage
    database = storage.path
    try:
        refuse_postgres(storage, "restore")
        migrations = restore_database(source, database, force=force)
    except (BackupError, OSError) as exc:
        print(f"engram restore: {exc}", file=sys.stderr)
        return 1
    print(
        f"engram restore: {source} -> {database} ({migrations} migrations recorded;"
        " the store applies any newer ones when it starts)"
    )
    return 0


@_server_group("create, list and revoke API keys (auth.enabled)")
def keys() -> None:
    """API keys in the keys file (services/common/auth.py); running services see
    a change within auth.reload_ms, so nothing needs a restart."""


def _keys_command(action: Callable[..., None]) -> Callable[..., int]:
    """A `keys` subcommand: `action(config, path, **its options)` on the configuration's
    keys file, its errors printed as one line (exit code 1)."""

    @functools.wraps(action)
    def run(config_path: str | None, data_dir: str | None, **options: Any) -> int:
        from services.common import auth

        config = _load(config_path, data_dir)
        path = auth.keys_path(config)
        try:
            action(config, path, **options)
        except (auth.KeyRequestError, OSError, ValueError) as exc:
            print(f"engram keys: {exc}", file=sys.stderr)
            return 1
        return 0

    return run


@keys.command(name="create", help="make a key; it is printed once, on the last line")
@click.option("--role", required=True, type=click.Choice(["reader", "writer", "admin"]))
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    required=True,
    metavar="PATTERN",
    help="a namespace the key may use: an exact name, `prefix*`, or `*` (repeatable)",
)
@click.option("--name", default=None, metavar="NAME", help="the key's name (the history actor)")
@config_options()
@_exit_codes
@_keys_command
def keys_create(
    config: Config, path: Path, role: str, namespaces: tuple[str, ...], name: str | None
) -> None:
    from services.common import auth

    record, key = auth.create_key(path, role, list(namespaces), name)
    if not config.auth.enabled:
        print(
            "engram keys: note: auth.enabled is false in this configuration; "
            "keys are checked once it is true",
            file=sys.stderr,
        )
    print(
        f"created key {record.name} (role {record.role.name.lower()}, namespaces "
        f"{' '.join(record.namespaces)}) in {path}; it is shown only this once:"
    )
    print(key)


@keys.command(name="list", help="every key: name, role, namespaces, created, revoked")
@config_options()
@_exit_codes
@_keys_command
def keys_list(config: Config, path: Path) -> None:
    from services.common import auth

    print(f"{'NAME':<24} {'ROLE':<7} {'CREATED':<28} {'REVOKED':<28} NAMESPACES")
    for r in auth.list_keys(path):
        print(
            f"{r.name:<24} {r.role.name.lower():<7} {r.created_at:<28} "
            f"{r.revoked_at or '-':<28} {' '.join(r.namespaces)}"
        )


@keys.command(name="revoke", help="revoke a key (services see it within 5 s)")
@click.argument("name")
@config_options()
@_exit_codes
@_keys_command
def keys_revoke(config: Config, path: Path, name: str) -> None:
    from services.common import auth

    record = auth.revoke_key(path, name)
    print(f"revoked key {record.name} at {record.revoked_at}")


@_server_group("certificates for TLS")
def certs() -> None:
    """Certificates for TLS (services/cli/certs.py)."""


@certs.command(name="dev", help="a local CA and certificates for development/compose")
@click.option("--out", required=True, metavar="DIR", help="directory to write them to")
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="NAME",
    help="another name or IP address for the service certificate (repeatable)",
)
@click.option("--force", is_flag=True, help="replace certificates already in DIR")
@_exit_codes
def certs_dev(out: str, hosts: tuple[str, ...], force: bool) -> int:
    """A development CA and certificates (services/cli/certs.py)."""
    from services.cli.certs import CertsError, dev_certificates

    try:
        written = dev_certificates(Path(out), extra_hosts=list(hosts), force=force)
    except CertsError as exc:
        print(f"engram certs dev: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


# The commands that run or manage the services (above); every other command is a
# client command (services/cli/client_commands.py), imported only when used.
SERVER_COMMANDS = frozenset(engram.commands)


def main(argv: list[str] | None = None) -> int:
    """Runs one `engram` command; its exit code."""
    try:
        result = engram.main(
            args=sys.argv[1:] if argv is None else argv, prog_name="engram", standalone_mode=False
        )
    except click.exceptions.Abort:
        return 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
