"""The `engram` commands that talk to a running suite through engram.client:
remember, recall, get, list, history, explain, links, entity get/list, forget,
import, export, diagnostics, and
mcp (the MCP server, services/cli/mcp_server.py).

Each takes `--address` (the store; search, pipeline and maintenance on the same host
at their default ports unless `--search-address`/`--maintenance-address` say
otherwise), `--api-key` (or ENGRAM_API_KEY) and, where it prints, `--json` (one JSON object per
line, field names as in the protos); without `--json` the output is a table.
"""

from __future__ import annotations

import json
import re
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Literal, NoReturn, TypeVar

import click
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console as RichConsole
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from engram.client import (
    FORGET_MODE_EXECUTE,
    AsyncEngram,
    Engram,
    EngramError,
    ImportItem,
    ImportProgress,
    Memory,
    Tls,
    memory_filter,
)
from engram.store.v1 import store_pb2
from services.common.validation import escape_control

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_ADDRESS = "127.0.0.1:50051"
# What `export` writes for each memory: everything `import` needs to rebuild it.
EXPORT_FIELDS = (
    "content",
    "type",
    "importance",
    "tags",
    "pinned",
    "who",
    "why",
    "source_type",
    "source_id",
    "categories",
)
# Timestamps export writes (RFC 3339) and import reads back: valid time keeps a
# memory's validity across a round trip.
EXPORT_TIMES: tuple[Literal["event_time", "valid_from", "valid_until"], ...] = (
    "event_time",
    "valid_from",
    "valid_until",
)
PLAIN_PROGRESS_EVERY_S = 2.0


@dataclass(frozen=True)
class Target:
    """Where and how to call: what every command's common options build."""

    address: str
    search_address: str | None
    maintenance_address: str | None
    api_key: str | None
    timeout: float
    json: bool
    tls: Tls | None = None

    def async_client(self) -> AsyncEngram:
        return AsyncEngram(
            self.address,
            api_key=self.api_key,
            tls=self.tls,
            timeout=self.timeout,
            search_address=self.search_address,
            maintenance_address=self.maintenance_address,
        )

    def client(self) -> Engram:
        return Engram(
            self.address,
            api_key=self.api_key,
            tls=self.tls,
            timeout=self.timeout,
            search_address=self.search_address,
            maintenance_address=self.maintenance_address,
        )


def connection_options(command: F) -> F:
    """Where the suite is and how to call it: every client command's options."""
    options = [
        click.option(
            "--address",
            envvar="ENGRAM_ADDRESS",
            default=DEFAULT_ADDRESS,
            show_default=True,
            help="the store's host:port (or a bare host: default ports); $ENGRAM_ADDRESS",
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
        click.option("--api-key", envvar="ENGRAM_API_KEY", default=None, help="$ENGRAM_API_KEY"),
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
    ]
    for option in reversed(options):
        command = option(command)
    return command


def common_options(command: F) -> F:
    """The connection options and `--json`: what every command that prints takes."""
    command = click.option("--json", "as_json", is_flag=True, help="JSON lines instead of tables")(
        command
    )
    return connection_options(command)


def _target(params: dict[str, Any]) -> Target:
    return Target(
        address=params.pop("address"),
        search_address=params.pop("search_address"),
        maintenance_address=params.pop("maintenance_address"),
        api_key=params.pop("api_key") or None,
        timeout=params.pop("timeout"),
        json=params.pop("as_json", False),
        tls=_tls(params.pop("cacert"), params.pop("cert"), params.pop("key")),
    )


def _tls(cacert: str | None, cert: str | None, key: str | None) -> Tls | None:
    """TLS when any of the three is given (no CA file: the system's roots)."""
    if not (cacert or cert or key):
        return None
    if bool(cert) != bool(key):
        raise click.UsageError("--cert and --key go together (mutual TLS)")
    return Tls(ca_file=cacert, cert_file=cert, key_file=key)


# ---- printing: never a raw control character to the operator's terminal ----------------
# Stored text may hold ESC or CSI (rows from before the store refused them, fetched
# pages, LLM answers); printed raw they would run as terminal commands. Every line
# this module prints goes through `_echo`, every table through `Console`, every
# JSON line through `_emit_json`: each shows control characters as escapes.


class Console(RichConsole):
    """rich's Console, with the control characters of every text segment escaped
    (services.common.validation.escape_control) before rich adds its own styling
    codes: a table cell holding `\x1b[2J` shows those characters, never runs them."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else segment._replace(text=escape_control(segment.text))
            for segment in buffer
        )


def _echo(text: str, *, err: bool = False) -> None:
    click.echo(escape_control(text), err=err)


# JSON escapes C0 by itself; DEL and C1 it writes raw with ensure_ascii=False
_JSON_CONTROL = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}


def _fail(command: str, error: EngramError) -> NoReturn:
    _echo(f"engram {command}: {error}", err=True)
    sys.exit(1)


def _dict(message: Message) -> dict[str, Any]:
    return MessageToDict(message, preserving_proto_field_name=True)


def _emit_json(message: Message | dict[str, Any]) -> None:
    data = message if isinstance(message, dict) else _dict(message)
    click.echo(json.dumps(data, ensure_ascii=False).translate(_JSON_CONTROL))


def _memory_table(memories: list[Memory], *, score: list[float] | None = None) -> None:
    table = Table(show_lines=False)
    if score is not None:
        table.add_column("score", justify="right")
    for name in ("id", "type", "importance", "tags", "content"):
        table.add_column(name, overflow="fold")
    for n, memory in enumerate(memories):
        row = [
            memory.id,
            memory.type,
            f"{memory.importance:.2f}",
            ",".join(memory.tags),
            ("(pinned) " if memory.pinned else "") + memory.content,
        ]
        cells = [f"{score[n]:.3f}"] if score is not None else []
        table.add_row(*(Text(cell) for cell in [*cells, *row]))
    Console().print(table)


_AS_OF_HELP = "RFC 3339: what was valid then, as known then (default: now)"


@click.group()
def cli() -> None:
    """Engram's client commands."""


@cli.command()
@click.argument("content")
@click.option("--namespace", "-n", default="")
@click.option("--type", "type_", default="", help="fact, preference, decision, rule, ...")
@click.option("--importance", type=float, default=None)
@click.option("--tag", "tags", multiple=True, help="repeatable")
@click.option("--category", "categories", multiple=True, help="repeatable (at most 8)")
@click.option("--pinned", is_flag=True)
@click.option("--who", default="")
@click.option("--why", default="")
@click.option("--source-type", default="")
@click.option("--source-id", default="")
@click.option("--event-time", default=None, help="RFC 3339, e.g. 2026-11-01T09:30:00Z")
@click.option("--session", "session_id", default="", help="the conversation session it belongs to")
@click.option("--ttl", default=None, help="short-term: expires after e.g. 90s, 15m, 12h, 1d")
@common_options
def remember(**params: Any) -> None:
    """Remember CONTENT."""
    target = _target(params)
    ttl = _ttl_seconds(params["ttl"])
    event_time = _timestamp(params["event_time"], "--event-time")
    with target.client() as engram:
        try:
            reply = engram.remember(
                params["content"],
                namespace=params["namespace"],
                type=params["type_"],
                importance=params["importance"],
                tags=params["tags"],
                pinned=params["pinned"],
                who=params["who"],
                why=params["why"],
                source_type=params["source_type"],
                source_id=params["source_id"],
                event_time=event_time,
                session_id=params["session_id"],
                ttl=ttl,
                categories=params["categories"],
            )
        except EngramError as error:
            _fail("remember", error)
    if target.json:
        _emit_json(reply)
        return
    state = "already remembered" if reply.deduplicated else "remembered"
    click.echo(f"{state}: {reply.memory.id}")


def _timestamp(text: str | None, hint: str) -> Timestamp | None:
    """An RFC 3339 option as a Timestamp (None when not given)."""
    if not text:
        return None
    moment = Timestamp()
    try:
        moment.FromJsonString(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None
    return moment


_TTL = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_TTL_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _ttl_seconds(text: str | None) -> float | None:
    """`--ttl` as seconds: a number with an optional unit (s, m, h, d)."""
    if text is None:
        return None
    match = _TTL.fullmatch(text.strip())
    if match is None:
        raise click.BadParameter("a number with an optional s, m, h or d", param_hint="--ttl")
    return float(match.group(1)) * _TTL_UNITS[match.group(2)]


@cli.command()
@click.argument("query")
@click.option("--namespace", "-n", default="")
@click.option("--limit", type=int, default=0, help="1..100; 0 means the server's default")
@click.option("--as-of", default=None, help=_AS_OF_HELP)
@common_options
def recall(**params: Any) -> None:
    """The memories most relevant to QUERY."""
    target = _target(params)
    as_of = _timestamp(params["as_of"], "--as-of")
    with target.client() as engram:
        try:
            reply = engram.recall(
                params["query"], namespace=params["namespace"], limit=params["limit"], as_of=as_of
            )
        except EngramError as error:
            _fail("recall", error)
    if target.json:
        _emit_json(reply)
        return
    _memory_table([r.memory for r in reply.results], score=[r.score for r in reply.results])
    for warning in reply.warnings:
        _echo(f"warning: {warning}", err=True)


@cli.command()
@click.argument("memory_id")
@click.option("--namespace", "-n", default="")
@common_options
def get(**params: Any) -> None:
    """One memory (a deleted one too)."""
    target = _target(params)
    with target.client() as engram:
        try:
            memory = engram.get_memory(params["memory_id"], namespace=params["namespace"])
        except EngramError as error:
            _fail("get", error)
    if target.json:
        _emit_json(memory)
        return
    table = Table(show_header=False)
    for key, value in _dict(memory).items():
        shown = ", ".join(value) if isinstance(value, list) else str(value)
        table.add_row(Text(key), Text(shown))
    Console().print(table)


@cli.command(name="list")
@click.option("--namespace", "-n", default="")
@click.option("--type", "types", multiple=True, help="repeatable")
@click.option("--tag", "tags", multiple=True, help="repeatable; all must be present")
@click.option("--category", "categories", multiple=True, help="repeatable; all must be present")
@click.option("--session", "session_id", default="", help="only this session's memories")
@click.option("--deleted", is_flag=True, help="the recoverable soft-deleted memories instead")
@click.option("--limit", type=int, default=50, show_default=True, help="0: every memory")
@click.option("--as-of", default=None, help=_AS_OF_HELP)
@common_options
def list_(**params: Any) -> None:
    """Memories of a namespace, newest first."""
    target = _target(params)
    as_of = _timestamp(params["as_of"], "--as-of")
    limit = params["limit"]
    with target.client() as engram:
        found = engram.list_memories(
            namespace=params["namespace"],
            page_size=min(limit, 500) if limit > 0 else 500,
            filter=memory_filter(
                types=params["types"],
                tags=params["tags"],
                session_id=params["session_id"],
                categories=params["categories"],
            ),
            deleted=params["deleted"],
            as_of=as_of,
        )
        memories: list[Memory] = []
        try:
            for memory in found:
                if target.json:
                    _emit_json(memory)
                else:
                    memories.append(memory)
                if limit and len(memories) >= limit:
                    break
        except EngramError as error:
            _fail("list", error)
    if not target.json:
        _memory_table(memories)


@cli.command()
@click.argument("memory_id")
@click.option("--namespace", "-n", default="")
@common_options
def history(**params: Any) -> None:
    """A memory's history events, oldest first."""
    target = _target(params)
    table = Table()
    for name in ("time", "event", "actor", "reason", "content"):
        table.add_column(name, overflow="fold")
    with target.client() as engram:
        try:
            for event in engram.list_memory_history(
                params["memory_id"], namespace=params["namespace"]
            ):
                if target.json:
                    _emit_json(event)
                    continue
                cells = (
                    event.create_time.ToJsonString(),
                    _dict(event).get("event_type", "").removeprefix("HISTORY_EVENT_TYPE_"),
                    event.actor,
                    event.reason,
                    event.new_content or event.old_content,
                )
                table.add_row(*(Text(cell) for cell in cells))
        except EngramError as error:
            _fail("history", error)
    if not target.json:
        Console().print(table)


@cli.command()
@click.option("--namespace", "-n", default="")
@common_options
def weak(**params: Any) -> None:
    """The namespace's weak memories: decayed below memory.decay_threshold
    (seed 003), with their current confidence, oldest written first."""
    target = _target(params)
    table = Table()
    for name in ("confidence now", "id", "last access", "content"):
        table.add_column(name, overflow="fold")
    count = 0
    with target.client() as engram:
        try:
            for found in engram.list_weak_memories(namespace=params["namespace"]):
                count += 1
                if target.json:
                    _emit_json(found)
                    continue
                memory = found.memory
                last = (
                    memory.last_access_time.ToJsonString()
                    if memory.HasField("last_access_time")
                    else "never"
                )
                cells = (f"{found.current_confidence:.4f}", memory.id, last, memory.content)
                table.add_row(*(Text(cell) for cell in cells))
        except EngramError as error:
            _fail("weak", error)
    if not target.json:
        Console().print(table)
        click.echo(f"{count} weak memories")


@cli.command()
@click.argument("memory_id")
@click.argument("content")
@click.option("--namespace", "-n", default="")
@click.option("--reason", required=True, help="why the fact changed (recorded in history)")
@click.option("--valid-from", default=None, help="RFC 3339: since when it is true (default: now)")
@common_options
def supersede(**params: Any) -> None:
    """Record that MEMORY_ID's fact changed: CONTENT replaces it from now (or
    --valid-from); the old memory stays, valid until then."""
    target = _target(params)
    valid_from = _timestamp(params["valid_from"], "--valid-from")
    with target.client() as engram:
        try:
            result = engram.supersede_memory(
                params["memory_id"],
                params["content"],
                namespace=params["namespace"],
                reason=params["reason"],
                valid_from=valid_from,
            )
        except EngramError as error:
            _fail("supersede", error)
    if target.json:
        _emit_json(result)
        return
    status = _dict(result).get("status", "").removeprefix("PATCH_STATUS_")
    if result.new_memory_id:
        click.echo(f"superseded by: {result.new_memory_id}")
    else:
        click.echo(f"not superseded: {status.lower()}")
        sys.exit(1)


@cli.command()
@click.argument("memory_id")
@click.option("--namespace", "-n", default="")
@common_options
def explain(**params: Any) -> None:
    """MEMORY_ID's chain: the versions it replaced and that replaced it (with
    their valid time), what it was derived from and what from it."""
    target = _target(params)
    with target.client() as engram:
        try:
            found = engram.explain_memory(params["memory_id"], namespace=params["namespace"])
        except EngramError as error:
            _fail("explain", error)
    if target.json:
        _emit_json(found)
        return
    table = Table()
    for name in ("relation", "id", "valid from", "valid until", "content"):
        table.add_column(name, overflow="fold")
    rows = [
        *(("supersedes", m) for m in reversed(found.supersedes)),
        ("this", found.memory),
        *(("superseded by", m) for m in found.superseded_by),
        *(("derived from", m) for m in found.derived_from),
        *(("derivation", m) for m in found.derivations),
    ]
    for relation, memory in rows:
        until = memory.valid_until.ToJsonString() if memory.HasField("valid_until") else ""
        deleted = "(deleted) " if memory.deleted else ""
        cells = (relation, memory.id, memory.valid_from.ToJsonString(), until)
        table.add_row(*(Text(cell) for cell in (*cells, deleted + memory.content)))
    Console().print(table)
    more = " (more: engram history)" if found.events_truncated else ""
    click.echo(f"{len(found.events)} history events{more}")


@cli.command()
@click.argument("memory_id")
@click.option("--namespace", "-n", default="")
@click.option(
    "--type",
    "link_types",
    multiple=True,
    help="supersedes, derived_from, temporal, causal, entity; repeatable",
)
@click.option(
    "--direction",
    type=click.Choice(["both", "outgoing", "incoming"]),
    default="both",
    show_default=True,
)
@common_options
def links(**params: Any) -> None:
    """MEMORY_ID's typed links to other memories, oldest first."""
    target = _target(params)
    direction = {
        "outgoing": store_pb2.LINK_DIRECTION_OUTGOING,
        "incoming": store_pb2.LINK_DIRECTION_INCOMING,
    }.get(params["direction"], store_pb2.LINK_DIRECTION_UNSPECIFIED)
    table = Table()
    for name in ("type", "from", "to", "weight", "confidence", "valid from", "valid until"):
        table.add_column(name, overflow="fold")
    with target.client() as engram:
        try:
            for link in engram.list_memory_links(
                params["memory_id"],
                namespace=params["namespace"],
                link_types=params["link_types"],
                direction=direction,
            ):
                if target.json:
                    _emit_json(link)
                    continue
                until = link.valid_until.ToJsonString() if link.HasField("valid_until") else ""
                cells = (
                    link.link_type,
                    link.from_memory_id,
                    link.to_memory_id,
                    f"{link.weight:g}",
                    f"{link.confidence:g}",
                    link.valid_from.ToJsonString(),
                    until,
                )
                table.add_row(*(Text(cell) for cell in cells))
        except EngramError as error:
            _fail("links", error)
    if not target.json:
        Console().print(table)


@cli.group()
def session() -> None:
    """A conversation session's consolidation: `session get SESSION_ID`."""


@session.command(name="get")
@click.argument("session_id")
@click.option("--namespace", "-n", default="")
@common_options
def session_get(**params: Any) -> None:
    """Where SESSION_ID's consolidation is (open, queued, consolidated, failed),
    when it was first and last written to, why it ended and its job."""
    target = _target(params)
    with target.client() as engram:
        try:
            found = engram.get_session(params["session_id"], namespace=params["namespace"])
        except EngramError as error:
            _fail("session get", error)
    if target.json:
        _emit_json(found)
        return
    fields = _dict(found)
    state = fields.get("state", "").removeprefix("SESSION_CONSOLIDATION_STATE_").lower()
    _echo(f"session {found.session_id}: {state}")
    for name in (
        "first_seen_time",
        "last_seen_time",
        "end_time",
        "end_reason",
        "job_id",
        "consolidate_time",
        "error",
    ):
        if fields.get(name):
            _echo(f"  {name.replace('_', ' ')}: {fields[name]}")


@cli.group()
def entity() -> None:
    """The knowledge graph's entities: `entity get NAME`, `entity list`."""


@entity.command(name="get")
@click.argument("name", default="")
@click.option("--id", "entity_id", default="", help="by id instead of NAME")
@click.option("--namespace", "-n", default="")
@click.option("--facts", "max_facts", type=int, default=0, help="0..100; 0 means 20")
@click.option("--neighbors", "max_neighbors", type=int, default=0, help="0..100; 0 means 20")
@common_options
def entity_get(**params: Any) -> None:
    """The entity named NAME (its canonical name or an alias): type, aliases,
    mentions, its facts valid now and its neighbours."""
    target = _target(params)
    with target.client() as engram:
        try:
            found = engram.get_entity(
                params["entity_id"],
                name=params["name"],
                namespace=params["namespace"],
                max_facts=params["max_facts"],
                max_neighbors=params["max_neighbors"],
            )
        except EngramError as error:
            _fail("entity get", error)
    if target.json:
        _emit_json(found)
        return
    e = found.entity
    aliases = f" (also: {', '.join(e.aliases)})" if e.aliases else ""
    _echo(f"{e.name}{aliases}: {e.entity_type}, {e.mention_count} mentions, id {e.id}")
    table = Table(title="facts valid now")
    for name in ("id", "valid from", "content"):
        table.add_column(name, overflow="fold")
    for memory in found.facts:
        table.add_row(
            *(Text(c) for c in (memory.id, memory.valid_from.ToJsonString(), memory.content))
        )
    Console().print(table)
    table = Table(title="neighbours")
    for name in ("relation", "entity", "type", "strength", "mentions"):
        table.add_column(name, overflow="fold")
    for n in found.neighbors:
        relation = n.relation_type if n.outgoing else f"<- {n.relation_type}"
        cells = (relation, n.entity.name, n.entity.entity_type, f"{n.strength:g}", str(n.mentions))
        table.add_row(*(Text(c) for c in cells))
    Console().print(table)


@entity.command(name="list")
@click.option("--namespace", "-n", default="")
@click.option("--prefix", "name_prefix", default="", help="names starting with this")
@click.option("--type", "entity_type", default="", help="person, place, organization, ...")
@click.option("--min-mentions", type=int, default=0)
@click.option("--limit", type=int, default=50, show_default=True, help="0: every entity")
@common_options
def entity_list(**params: Any) -> None:
    """Entities of a namespace, most mentioned first."""
    target = _target(params)
    table = Table()
    for name in ("name", "type", "mentions", "aliases", "id"):
        table.add_column(name, overflow="fold")
    limit = params["limit"]
    with target.client() as engram:
        try:
            found = engram.list_entities(
                namespace=params["namespace"],
                name_prefix=params["name_prefix"],
                entity_type=params["entity_type"],
                min_mentions=params["min_mentions"],
                page_size=min(limit, 500) if limit else 0,
            )
            for count, e in enumerate(found, 1):
                if target.json:
                    _emit_json(e)
                else:
                    cells = (
                        e.name,
                        e.entity_type,
                        str(e.mention_count),
                        ", ".join(e.aliases),
                        e.id,
                    )
                    table.add_row(*(Text(c) for c in cells))
                if limit and count >= limit:
                    break
        except EngramError as error:
            _fail("entity list", error)
    if not target.json:
        Console().print(table)


@cli.command()
@click.option("--namespace", "-n", default="")
@click.option("--id", "ids", multiple=True, help="repeatable")
@click.option("--query", default="", help="keywords")
@click.option("--type", "types", multiple=True, help="repeatable")
@click.option("--tag", "tags", multiple=True, help="repeatable")
@click.option("--reason", default="forgotten with the engram CLI", show_default=True)
@click.option("--include-pinned", is_flag=True)
@click.option("--purge", is_flag=True, help="remove for good (no recovery)")
@click.option("--yes", is_flag=True, help="delete the previewed memories without asking")
@common_options
def forget(**params: Any) -> None:
    """Preview the memories a selection matches, then (after confirmation) delete them."""
    target = _target(params)
    selection: dict[str, Any] = {
        "namespace": params["namespace"],
        "ids": params["ids"],
        "query": params["query"],
        "include_pinned": params["include_pinned"],
        "purge": params["purge"],
    }
    if params["types"] or params["tags"]:
        selection["filter"] = memory_filter(types=params["types"], tags=params["tags"])
    with target.client() as engram:
        try:
            preview = engram.forget_memories(**selection)
            if target.json:
                _emit_json(preview)
            else:
                table = Table(title=f"{preview.candidate_count} memories to forget")
                for name in ("id", "pinned", "content"):
                    table.add_column(name, overflow="fold")
                for candidate in preview.candidates:
                    cells = (candidate.id, "yes" if candidate.pinned else "", candidate.content)
                    table.add_row(*(Text(cell) for cell in cells))
                Console().print(table)
            if not preview.candidate_count:
                return
            if not params["yes"]:
                if not sys.stdin.isatty():
                    click.echo("engram forget: nothing deleted; pass --yes to delete", err=True)
                    return
                if not click.confirm(f"Forget these {preview.candidate_count}?", err=True):
                    return
            done = engram.forget_memories(
                **selection,
                mode=FORGET_MODE_EXECUTE,
                reason=params["reason"],
                confirm_token=preview.confirm_token,
            )
        except EngramError as error:
            _fail("forget", error)
    if target.json:
        _emit_json(done)
    else:
        click.echo(f"forgot {done.deleted_count}" + (" (purged)" if done.hard_deleted else ""))


def _import_item(data: dict[str, Any]) -> ImportItem:
    """An ImportItem from one JSON line (export's format: ImportItem's field names)."""
    item = ImportItem()
    times = {key: data.pop(key, None) for key in EXPORT_TIMES}
    for key, value in data.items():
        if key not in ImportItem.DESCRIPTOR.fields_by_name:
            raise ValueError(f"unknown field {key!r}")
        if isinstance(value, list):
            getattr(item, key).extend(value)
        else:
            setattr(item, key, value)
    for key, text in times.items():
        if text is not None:
            getattr(item, key).FromJsonString(text)
    return item


@dataclass
class _Lines:
    """The JSON lines of the input, parsed lazily; bad lines are reported, not sent.
    `line_of[i]` is the line number of the i-th item sent (a compact array)."""

    stream: IO[str]
    errors: list[tuple[int, str]]
    line_of: array[int]

    def __iter__(self) -> Iterator[ImportItem]:
        for number, line in enumerate(self.stream, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                item = _import_item(data)
            except (ValueError, TypeError, AttributeError) as exc:
                self.errors.append((number, str(exc)))
                continue
            self.line_of.append(number)
            yield item


class _Reporter:
    """A rich progress bar (rows, rate, ETA when the total is known) on a terminal;
    a plain line every few seconds otherwise."""

    def __init__(self, total: int | None) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.start = time.monotonic()
        self.progress: Any = None
        if self.tty:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("import"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} rows/s"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.progress.start()
            self.task = self.progress.add_task("import", total=total, rate="-")

    def __call__(self, state: ImportProgress) -> None:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = f"{state.sent / elapsed:,.0f}"
        if self.progress is not None:
            self.progress.update(self.task, completed=state.sent, rate=rate)
            return
        now = time.monotonic()
        if now - self.last >= PLAIN_PROGRESS_EVERY_S:
            self.last = now
            click.echo(
                f"import: {state.sent} rows sent, {state.created} created, "
                f"{state.deduplicated} already there, {state.failed} failed ({rate} rows/s)",
                err=True,
            )

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _count_lines(path: str) -> int | None:
    if path == "-":
        return None
    with open(path, "rb") as file:
        return sum(1 for line in file if line.strip())


@cli.command(name="import")
@click.argument("source", type=click.Path(allow_dash=True, dir_okay=False))
@click.option("--namespace", "-n", default="")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=500, show_default=True)
@common_options
def import_(**params: Any) -> None:
    """Load SOURCE (a .jsonl file, or - for stdin): one memory per line, as `export`
    writes them. Re-running after an interruption creates nothing twice."""
    target = _target(params)
    source = params["source"]
    lines = _Lines(click.open_file(source, encoding="utf-8"), errors=[], line_of=array("q"))
    reporter = _Reporter(_count_lines(source) if not target.json else None)
    try:
        with target.client() as engram:
            summary = engram.import_memories(
                lines,
                namespace=params["namespace"],
                batch_size=params["batch_size"],
                on_progress=None if target.json else reporter,
            )
    except EngramError as error:
        _fail("import", error)
    finally:
        reporter.stop()
        lines.stream.close()
    failed = sorted(
        [(number, reason) for number, reason in lines.errors]
        + [(lines.line_of[f.index], f.error) for f in summary.failures]
    )
    totals = {
        "created": summary.created,
        "deduplicated": summary.deduplicated,
        "failed": len(failed),
    }
    if target.json:
        _emit_json({**totals, "failures": [{"line": n, "error": e} for n, e in failed]})
    else:
        for number, reason in failed:
            _echo(f"line {number}: {reason}", err=True)
        click.echo(
            f"imported: {summary.created} created, {summary.deduplicated} already there, "
            f"{len(failed)} failed"
        )
    sys.exit(1 if failed else 0)


def export_record(memory: Memory) -> dict[str, Any]:
    """One memory as an import line: the fields ImportItem takes."""
    data = _dict(memory)
    record = {key: data[key] for key in EXPORT_FIELDS if key in data}
    record["importance"] = memory.importance  # explicit even when 0
    for key in EXPORT_TIMES:
        if memory.HasField(key):
            record[key] = getattr(memory, key).ToJsonString()
    return record


@cli.command()
@click.option("--namespace", "-n", default="")
@click.option("--page-size", type=click.IntRange(1, 500), default=500, show_default=True)
@common_options
def export(**params: Any) -> None:
    """Every active memory of a namespace as JSON lines on stdout (what `import`
    reads), streamed page by page, with its valid time. Superseded versions
    are not active, so they and their supersedes links are not exported."""
    target = _target(params)
    with target.client() as engram:
        try:
            for memory in engram.list_memories(
                namespace=params["namespace"], page_size=params["page_size"]
            ):
                sys.stdout.write(json.dumps(export_record(memory), ensure_ascii=False) + "\n")
        except EngramError as error:
            _fail("export", error)
    sys.stdout.flush()


@cli.command()
@common_options
def diagnostics(**params: Any) -> None:
    """The suite's health score and report (maintenance's GetDiagnostics)."""
    target = _target(params)
    with target.client() as engram:
        try:
            report = engram.get_diagnostics()
        except EngramError as error:
            _fail("diagnostics", error)
    if target.json:
        _emit_json(report)
        return
    data = _dict(report)
    click.echo(f"health: {data.get('health', '')}  score: {report.score:.2f}")
    for recommendation in data.get("recommendations", []):
        _echo(f"- {recommendation}")


@cli.command()
@click.option(
    "--http",
    "http_port",
    type=click.IntRange(1, 65535),
    default=None,
    help="serve streamable HTTP on this port (at /mcp) instead of stdio",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="with --http")
@click.option(
    "--allow-remote",
    is_flag=True,
    help="with --http on a host other than loopback: accept that anyone who can reach "
    "the port acts with this command's API key (the MCP endpoint has no auth of its own)",
)
@connection_options
def mcp(**params: Any) -> None:
    """Serve Engram's memory tools (remember, recall, forget, update_memory,
    memory_history) over the Model Context Protocol: on stdio for an MCP host that
    starts this command, or over streamable HTTP with --http PORT."""
    import anyio

    from services.cli.mcp_server import serve
    from services.common.auth import is_loopback

    target = _target(params)
    if params["http_port"] and not is_loopback(params["host"]) and not params["allow_remote"]:
        raise click.UsageError(
            f"refusing to serve MCP on {params['host']}: the endpoint has no authentication, "
            "so anyone who can reach it acts with this command's API key; keep it on "
            "loopback (behind a proxy that authenticates) or pass --allow-remote"
        )
    anyio.run(
        lambda: serve(target.async_client(), http_port=params["http_port"], host=params["host"])
    )


COMMANDS = frozenset(cli.commands)


def run(argv: list[str]) -> int:
    """Runs one client command; its exit code."""
    try:
        cli.main(args=argv, prog_name="engram", standalone_mode=False)
    except click.exceptions.Abort:
        return 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
