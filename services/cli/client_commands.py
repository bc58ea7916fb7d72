"""The `engram` commands that talk to a running suite through engram.client:
remember, recall, get, list, history, weak, supersede, modify, delete, recover,
explain, links, session get, entity get/list, forget, namespace delete/recover,
import, export, diagnostics, and mcp (the MCP server, services/cli/mcp_server.py).

Each takes `--address` (the store; search, pipeline and maintenance on the same host
at the ports the store reports for its suite, each checked to be of that suite
before it gets the API key, unless `--search-address`/`--maintenance-address` say
otherwise), `--api-key` (or ENGRAM_API_KEY) and, where it prints, `--json` (one JSON object per
line, field names as in the protos); without `--json` the output is a table.
"""

from __future__ import annotations

import json
import re
import sys
import time
from array import array
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, NoReturn

import click
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
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
    FailedPrecondition,
    ImportItem,
    ImportProgress,
    Memory,
    MemoryPatch,
    Tls,
    export_item,
    memory_filter,
)
from engram.store.v1 import store_pb2
from services.cli.options import common_options, connection_options, namespace_option
from services.common.validation import escape_control

PLAIN_PROGRESS_EVERY_S = 2.0
# Rows per ImportMemories stream: each stream's reply acknowledges its rows as
# committed, so the progress bar (and an interrupted import's report) follow
# commits at this step.
IMPORT_STREAM_ITEMS = 2500


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


@contextmanager
def _calling(target: Target, command: str) -> Iterator[Engram]:
    """The client for one command: an error it answers ends the command with
    the error's message and exit status 1."""
    with target.client() as engram:
        try:
            yield engram
        except EngramError as error:
            _fail(command, error)


def _dict(message: Message) -> dict[str, Any]:
    return MessageToDict(message, preserving_proto_field_name=True)


def _emit_json(message: Message | dict[str, Any]) -> None:
    data = message if isinstance(message, dict) else _dict(message)
    click.echo(json.dumps(data, ensure_ascii=False).translate(_JSON_CONTROL))


# Ids are UUIDs (36 characters): their columns never fold, so an id reads (and
# copies) whole on an 80-column terminal, and the other columns share what is left.
ID_WIDTH = 36


def _id_column(table: Table, name: str = "id") -> None:
    table.add_column(name, no_wrap=True, min_width=ID_WIDTH, overflow="fold")


def _columns(table: Table, *names: str) -> None:
    """Columns in order: `id` (or any name ending in " id") an id column, the rest folding."""
    for name in names:
        if name == "id" or name.endswith(" id"):
            _id_column(table, name)
        else:
            table.add_column(name, overflow="fold")


# Under this many columns a table keeps its id and short columns and moves the
# others to a dim line under its last column (the content), so that neither an
# id nor the content is folded down to a few characters on an 80-column terminal.
WIDE_TABLE = 120


def _print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    keep: Sequence[str],
    title: str | None = None,
) -> None:
    """`rows` under `headers`, the last header the content; `keep`: the columns kept
    on a narrow terminal."""
    console = Console()
    wide = console.width >= WIDE_TABLE
    shown = [h for h in headers if wide or h in keep or h == headers[-1]]
    table = Table(title=title)
    _columns(table, *shown)
    for row in rows:
        values = dict(zip(headers, row, strict=True))
        cells = [Text(values[h]) for h in shown]
        extra = "; ".join(f"{h} {values[h]}" for h in headers[:-1] if h not in shown and values[h])
        if extra:
            cells[-1].append("\n" + extra, style="dim")
        table.add_row(*cells)
    console.print(table)


def _memory_table(memories: list[Memory], *, score: list[float] | None = None) -> None:
    headers = [*(["score"] if score is not None else []), "id", "type", "importance", "tags"]
    rows = [
        [
            *([f"{score[n]:.3f}"] if score is not None else []),
            memory.id,
            memory.type,
            f"{memory.importance:.2f}",
            ",".join(memory.tags),
            ("(pinned) " if memory.pinned else "") + memory.content,
        ]
        for n, memory in enumerate(memories)
    ]
    _print_table([*headers, "content"], rows, keep=("score", "id"))


_AS_OF_HELP = "RFC 3339: what was valid then, as known then (default: now)"


@click.group()
def cli() -> None:
    """Engram's client commands: `engram` (services/cli/main.py) finds each here, by name."""


@cli.command()
@click.argument("content")
@namespace_option
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
    with _calling(target, "remember") as engram:
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
    if target.json:
        _emit_json(reply)
        return
    state = "already remembered" if reply.deduplicated else "remembered"
    _echo(f"{state}: {reply.memory.id}")


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
@namespace_option
@click.option("--limit", type=int, default=0, help="1..100; 0 means the server's default")
@click.option("--as-of", default=None, help=_AS_OF_HELP)
@common_options
def recall(**params: Any) -> None:
    """The memories most relevant to QUERY."""
    target = _target(params)
    as_of = _timestamp(params["as_of"], "--as-of")
    with _calling(target, "recall") as engram:
        reply = engram.recall(
            params["query"], namespace=params["namespace"], limit=params["limit"], as_of=as_of
        )
    if target.json:
        _emit_json(reply)
        return
    _memory_table([r.memory for r in reply.results], score=[r.score for r in reply.results])
    for warning in reply.warnings:
        _echo(f"warning: {warning}", err=True)


@cli.command()
@click.argument("memory_id")
@namespace_option
@common_options
def get(**params: Any) -> None:
    """One memory (a deleted one too)."""
    target = _target(params)
    with _calling(target, "get") as engram:
        memory = engram.get_memory(params["memory_id"], namespace=params["namespace"])
    if target.json:
        _emit_json(memory)
        return
    table = Table(show_header=False)
    for key, value in _dict(memory).items():
        shown = ", ".join(value) if isinstance(value, list) else str(value)
        table.add_row(Text(key), Text(shown))
    Console().print(table)


@cli.command(name="list")
@namespace_option
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
    with _calling(target, "list") as engram:
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
        for memory in found:
            if target.json:
                _emit_json(memory)
            else:
                memories.append(memory)
            if limit and len(memories) >= limit:
                break
    if not target.json:
        _memory_table(memories)


@cli.command()
@click.argument("memory_id")
@namespace_option
@common_options
def history(**params: Any) -> None:
    """A memory's history events, oldest first."""
    target = _target(params)
    table = Table()
    for name in ("time", "event", "actor", "reason", "content"):
        table.add_column(name, overflow="fold")
    with _calling(target, "history") as engram:
        for event in engram.list_memory_history(params["memory_id"], namespace=params["namespace"]):
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
    if not target.json:
        Console().print(table)


@cli.command()
@namespace_option
@common_options
def weak(**params: Any) -> None:
    """The namespace's weak memories: decayed below memory.decay_threshold
    (seed 003), with their current confidence, oldest written first."""
    target = _target(params)
    rows: list[tuple[str, ...]] = []
    count = 0
    with _calling(target, "weak") as engram:
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
            rows.append((f"{found.current_confidence:.4f}", memory.id, last, memory.content))
    if not target.json:
        headers = ("confidence now", "id", "last access", "content")
        _print_table(headers, rows, keep=("id",))
        _echo(f"{count} weak memories")


@cli.command()
@click.argument("memory_id")
@click.argument("content")
@namespace_option
@click.option("--reason", required=True, help="why the fact changed (recorded in history)")
@click.option("--valid-from", default=None, help="RFC 3339: since when it is true (default: now)")
@common_options
def supersede(**params: Any) -> None:
    """Record that MEMORY_ID's fact changed: CONTENT replaces it from now (or
    --valid-from); the old memory stays, valid until then."""
    target = _target(params)
    valid_from = _timestamp(params["valid_from"], "--valid-from")
    with _calling(target, "supersede") as engram:
        result = engram.supersede_memory(
            params["memory_id"],
            params["content"],
            namespace=params["namespace"],
            reason=params["reason"],
            valid_from=valid_from,
        )
    if target.json:
        _emit_json(result)
        return
    status = _dict(result).get("status", "").removeprefix("PATCH_STATUS_")
    if result.new_memory_id:
        _echo(f"superseded by: {result.new_memory_id}")
    else:
        _echo(f"not superseded: {status.lower()}")
        sys.exit(1)


@cli.command()
@click.argument("memory_id")
@namespace_option
@click.option("--content", default=None, help="the corrected content")
@click.option("--type", "type_", default=None, help="fact, preference, decision, rule, ...")
@click.option("--importance", type=float, default=None, help="0..1")
@click.option("--tag", "tags", multiple=True, help="repeatable; replaces the tags")
@click.option("--clear-tags", is_flag=True, help="remove every tag")
@click.option("--category", "categories", multiple=True, help="repeatable; replaces them")
@click.option("--clear-categories", is_flag=True, help="remove every category")
@click.option("--pin/--unpin", "pinned", default=None, help="pin or unpin it")
@click.option("--who", default=None)
@click.option("--decay-rate", type=float, default=None, help="seed 003; 0 protects from decay")
@click.option("--if-version", type=int, default=None, help="only if it is at this version")
@click.option("--reason", default="modified with the engram CLI", show_default=True)
@common_options
def modify(**params: Any) -> None:
    """Change MEMORY_ID in place (ModifyMemories): only the options given change,
    its version goes up and its history keeps the old content."""
    target = _target(params)
    if params["tags"] and params["clear_tags"]:
        raise click.UsageError("--tag and --clear-tags exclude each other")
    if params["categories"] and params["clear_categories"]:
        raise click.UsageError("--category and --clear-categories exclude each other")
    patch = MemoryPatch(
        id=params["memory_id"],
        content=params["content"],
        type=params["type_"],
        importance=params["importance"],
        pinned=params["pinned"],
        who=params["who"],
        decay_rate=params["decay_rate"],
        if_version=params["if_version"],
    )
    if params["tags"] or params["clear_tags"]:
        patch.tags.CopyFrom(store_pb2.TagList(values=params["tags"]))
    if params["categories"] or params["clear_categories"]:
        patch.categories.CopyFrom(store_pb2.CategoryList(values=params["categories"]))
    with _calling(target, "modify") as engram:
        reply = engram.modify_memories(
            [patch], namespace=params["namespace"], reason=params["reason"]
        )
    result = reply.results[0]
    status = _dict(result).get("status", "").removeprefix("PATCH_STATUS_").lower()
    if target.json:
        _emit_json(result)
    elif status == "updated":
        _echo(f"modified: {result.id} (version {result.current_version} -> {result.new_version})")
    elif status == "unchanged":
        _echo(f"unchanged: {result.id} (version {result.current_version})")
    else:
        other = f" (memory {result.duplicate_memory_id})" if result.duplicate_memory_id else ""
        version = f" (version {result.current_version})" if result.current_version else ""
        _echo(f"not modified: {status}{other}{version}")
    if status not in ("updated", "unchanged"):
        sys.exit(1)


@cli.command()
@click.argument("memory_id")
@namespace_option
@click.option("--reason", default="deleted with the engram CLI", show_default=True)
@click.option("--if-version", type=int, default=None, help="only if it is at this version")
@click.option("--force", is_flag=True, help="required to delete a pinned memory")
@common_options
def delete(**params: Any) -> None:
    """Soft-delete MEMORY_ID: it leaves recall and listings at once and `engram recover`
    brings it back within the tombstone window (retention.tombstone_days)."""
    target = _target(params)
    with _calling(target, "delete") as engram:
        memory = engram.delete_memory(
            params["memory_id"],
            namespace=params["namespace"],
            reason=params["reason"],
            if_version=params["if_version"],
            force=params["force"],
        )
    if target.json:
        _emit_json(memory)
    else:
        _echo(f"deleted: {memory.id} (version {memory.version}; engram recover brings it back)")


@cli.command()
@click.argument("memory_id")
@namespace_option
@click.option("--reason", default="recovered with the engram CLI", show_default=True)
@click.option(
    "--if-version", type=int, default=None, help="only if the tombstone is at this version"
)
@common_options
def recover(**params: Any) -> None:
    """Bring back MEMORY_ID, soft-deleted within the tombstone window (`engram list
    --deleted` shows them)."""
    target = _target(params)
    with _calling(target, "recover") as engram:
        memory = engram.recover_memory(
            params["memory_id"],
            namespace=params["namespace"],
            reason=params["reason"],
            if_version=params["if_version"],
        )
    if target.json:
        _emit_json(memory)
    else:
        _echo(f"recovered: {memory.id} (version {memory.version})")


@cli.command()
@click.argument("memory_id")
@namespace_option
@common_options
def explain(**params: Any) -> None:
    """MEMORY_ID's chain: the versions it replaced and that replaced it (with
    their valid time), what it was derived from and what from it."""
    target = _target(params)
    with _calling(target, "explain") as engram:
        found = engram.explain_memory(params["memory_id"], namespace=params["namespace"])
    if target.json:
        _emit_json(found)
        return
    related = [
        *(("supersedes", m) for m in reversed(found.supersedes)),
        ("this", found.memory),
        *(("superseded by", m) for m in found.superseded_by),
        *(("derived from", m) for m in found.derived_from),
        *(("derivation", m) for m in found.derivations),
    ]
    rows = []
    for relation, memory in related:
        until = memory.valid_until.ToJsonString() if memory.HasField("valid_until") else ""
        deleted = "(deleted) " if memory.deleted else ""
        cells = (relation, memory.id, memory.valid_from.ToJsonString(), until)
        rows.append((*cells, deleted + memory.content))
    headers = ("relation", "id", "valid from", "valid until", "content")
    _print_table(headers, rows, keep=("relation", "id"))
    more = " (more: engram history)" if found.events_truncated else ""
    _echo(f"{len(found.events)} history events{more}")


@cli.command()
@click.argument("memory_id")
@namespace_option
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
    # the other end of each link (MEMORY_ID is one end): one id per row fits 80 columns
    table = Table(title=f"links of {params['memory_id']}")
    _columns(table, "type", "dir", "memory id", "weight/conf", "valid from", "valid until")
    with _calling(target, "links") as engram:
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
            outgoing = link.from_memory_id == params["memory_id"]
            cells = (
                link.link_type,
                "to" if outgoing else "from",
                link.to_memory_id if outgoing else link.from_memory_id,
                f"{link.weight:g}/{link.confidence:g}",
                link.valid_from.ToJsonString(),
                until,
            )
            table.add_row(*(Text(cell) for cell in cells))
    if not target.json:
        Console().print(table)


@cli.group()
def session() -> None:
    """A conversation session: `session get|append|summarize SESSION_ID`."""


@session.command(name="get")
@click.argument("session_id")
@namespace_option
@common_options
def session_get(**params: Any) -> None:
    """Where SESSION_ID's consolidation is (open, queued, consolidated, failed),
    when it was first and last written to, why it ended and its job."""
    target = _target(params)
    with _calling(target, "session get") as engram:
        found = engram.get_session(params["session_id"], namespace=params["namespace"])
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


@session.command(name="append")
@click.argument("session_id")
@click.argument("role", type=click.Choice(["user", "assistant", "system", "tool"]))
@click.argument("content")
@namespace_option
@click.option("--who", default="", help="the speaker's name")
@common_options
def session_append(**params: Any) -> None:
    """Capture one conversation turn (AppendTurn) as SESSION_ID's short-term memory;
    a user turn that asks to be remembered is kept long-term."""
    target = _target(params)
    with _calling(target, "session append") as engram:
        reply = engram.append_turn(
            params["session_id"],
            params["role"],
            params["content"],
            namespace=params["namespace"],
            who=params["who"],
        )
    if target.json:
        _emit_json(reply)
        return
    if not reply.captured:
        _echo(f"not captured: {reply.notice}")
        return
    kept = "long-term" if reply.promoted else "short-term"
    _echo(f"captured ({kept}): {reply.memory.id}" + (f" ({reply.notice})" if reply.notice else ""))


@session.command(name="summarize")
@click.argument("session_id")
@namespace_option
@common_options
def session_summarize(**params: Any) -> None:
    """Queue SESSION_ID's summary (SummarizeSession: the pipeline's LLM writes it)."""
    target = _target(params)
    with _calling(target, "session summarize") as engram:
        reply = engram.summarize_session(params["session_id"], namespace=params["namespace"])
    if target.json:
        _emit_json(reply)
        return
    queued = "already queued" if reply.already_queued else "queued"
    _echo(f"summary {queued}: job {reply.job_id} ({reply.turn_count} turns)")


@cli.group()
def entity() -> None:
    """The knowledge graph's entities: `entity get NAME`, `entity list`."""


@entity.command(name="get")
@click.argument("name", default="")
@click.option("--id", "entity_id", default="", help="by id instead of NAME")
@namespace_option
@click.option("--facts", "max_facts", type=int, default=0, help="0..100; 0 means 20")
@click.option("--neighbors", "max_neighbors", type=int, default=0, help="0..100; 0 means 20")
@common_options
def entity_get(**params: Any) -> None:
    """The entity named NAME (its canonical name or an alias): type, aliases,
    mentions, its facts valid now and its neighbours."""
    target = _target(params)
    with _calling(target, "entity get") as engram:
        found = engram.get_entity(
            params["entity_id"],
            name=params["name"],
            namespace=params["namespace"],
            max_facts=params["max_facts"],
            max_neighbors=params["max_neighbors"],
        )
    if target.json:
        _emit_json(found)
        return
    e = found.entity
    aliases = f" (also: {', '.join(e.aliases)})" if e.aliases else ""
    _echo(f"{e.name}{aliases}: {e.entity_type}, {e.mention_count} mentions, id {e.id}")
    facts = [(m.id, m.valid_from.ToJsonString(), m.content) for m in found.facts]
    _print_table(("id", "valid from", "content"), facts, keep=("id",), title="facts valid now")
    table = Table(title="neighbours")
    for name in ("relation", "entity", "type", "strength", "mentions"):
        table.add_column(name, overflow="fold")
    for n in found.neighbors:
        relation = n.relation_type if n.outgoing else f"<- {n.relation_type}"
        cells = (relation, n.entity.name, n.entity.entity_type, f"{n.strength:g}", str(n.mentions))
        table.add_row(*(Text(c) for c in cells))
    Console().print(table)


@entity.command(name="list")
@namespace_option
@click.option("--prefix", "name_prefix", default="", help="names starting with this")
@click.option("--type", "entity_type", default="", help="person, place, organization, ...")
@click.option("--min-mentions", type=int, default=0)
@click.option("--limit", type=int, default=50, show_default=True, help="0: every entity")
@common_options
def entity_list(**params: Any) -> None:
    """Entities of a namespace, most mentioned first."""
    target = _target(params)
    table = Table()
    _columns(table, "name", "type", "mentions", "aliases", "id")
    limit = params["limit"]
    with _calling(target, "entity list") as engram:
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
    if not target.json:
        Console().print(table)


@cli.command()
@namespace_option
@click.option("--id", "ids", multiple=True, help="repeatable")
@click.option("--query", default="", help="keywords")
@click.option("--type", "types", multiple=True, help="repeatable")
@click.option("--tag", "tags", multiple=True, help="repeatable")
@click.option("--reason", default="forgotten with the engram CLI", show_default=True)
@click.option("--include-pinned", is_flag=True)
@click.option("--purge", is_flag=True, help="remove for good (no recovery)")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="more match than one batch (200): forget them all, batch after batch",
)
@click.option("--yes", is_flag=True, help="delete the previewed memories without asking")
@common_options
def forget(**params: Any) -> None:
    """Preview the memories a selection matches, then (after confirmation) delete them.
    One call forgets at most 200; the preview says when more match, and --all goes on,
    preview and confirmed delete, batch after batch, until none are left."""
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
    with _calling(target, "forget") as engram:
        preview = engram.forget_memories(**selection)
        _show_forget_preview(preview, target.json, params["every"])
        if not preview.candidate_count:
            return
        if not params["yes"]:
            if not sys.stdin.isatty():
                _echo("engram forget: nothing deleted; pass --yes to delete", err=True)
                return
            question = (
                f"Forget these {preview.candidate_count} and every other match, "
                f"{MAX_FORGET_BATCH} at a time?"
                if params["every"] and preview.more_matching
                else f"Forget these {preview.candidate_count}?"
            )
            if not click.confirm(question, err=True):
                return
        if params["every"]:
            total, more = _forget_every(engram, selection, preview, params["reason"], target)
        else:
            done = engram.forget_memories(
                **selection,
                mode=FORGET_MODE_EXECUTE,
                reason=params["reason"],
                confirm_token=preview.confirm_token,
            )
            if target.json:
                _emit_json(done)
            total, more = done.deleted_count, done.matching_count - done.deleted_count
    if not target.json:
        purged = " (purged)" if params["purge"] else ""
        rest = f"; {more} more match: run it again, or pass --all" if more > 0 else ""
        _echo(f"forgot {total}{purged}{rest}")


# ForgetMemories' largest batch (store.proto ForgetMemoriesRequest.limit).
MAX_FORGET_BATCH = 200
# Batches in a row whose memories changed between preview and delete before
# `forget --all` gives up (someone else keeps changing them).
FORGET_RETRIES = 5


def _show_forget_preview(
    preview: store_pb2.ForgetMemoriesResponse, as_json: bool, every: bool
) -> None:
    if as_json:
        _emit_json(preview)
        return
    more = ""
    if preview.more_matching:
        rest = preview.matching_count - preview.candidate_count
        more = f" ({rest} more match" + ("" if every else ": forget them with --all") + ")"
    table = Table(title=f"{preview.candidate_count} memories to forget{more}")
    _id_column(table)
    for name in ("pinned", "content"):
        table.add_column(name, overflow="fold")
    for candidate in preview.candidates:
        cells = (candidate.id, "yes" if candidate.pinned else "", candidate.content)
        table.add_row(*(Text(cell) for cell in cells))
    Console().print(table)


def _forget_every(
    engram: Engram,
    selection: dict[str, Any],
    preview: store_pb2.ForgetMemoriesResponse,
    reason: str,
    target: Target,
) -> tuple[int, int]:
    """Confirmed deletes, each of the batch its own preview showed, until no memory
    matches: (how many were forgotten, how many still match). A batch whose
    memories changed since its preview is previewed again; a batch that deletes
    nothing ends the loop (nothing would change by repeating it)."""
    bar = _Bar("forget", preview.matching_count, "memories", show=not target.json)
    total = mismatches = 0
    try:
        while preview.candidate_count:
            try:
                done = engram.forget_memories(
                    **selection,
                    mode=FORGET_MODE_EXECUTE,
                    reason=reason,
                    confirm_token=preview.confirm_token,
                )
            except FailedPrecondition as error:
                mismatches += 1
                if error.reason != "CONFIRM_TOKEN_MISMATCH" or mismatches > FORGET_RETRIES:
                    raise
                preview = engram.forget_memories(**selection)
                continue
            mismatches = 0
            if target.json:
                _emit_json(done)
            total += done.deleted_count
            left = done.matching_count - done.deleted_count
            bar.update(total, f"{total} memories forgotten, {left} to go")
            if not done.deleted_count or not done.more_matching:
                return total, left
            preview = engram.forget_memories(**selection)
        return total, 0
    finally:
        bar.stop()


# DeleteNamespace and RecoverNamespace take their time on a big namespace (each
# memory goes through the writer, 500 at a time): a deadline cut short would
# leave it half done, so they get this long at least.
NAMESPACE_TIMEOUT_S = 3600.0


@cli.group()
def namespace() -> None:
    """Remove a whole namespace (`namespace delete NS`), or bring it back within the
    tombstone window (`namespace recover NS`)."""


@namespace.command(name="delete")
@click.argument("name")
@click.option("--reason", default="deleted with the engram CLI", show_default=True)
@click.option("--yes", is_flag=True, help="delete without asking")
@common_options
def namespace_delete(**params: Any) -> None:
    """Show what namespace NAME holds, then (after confirmation) soft-delete every
    memory in it. `engram namespace recover NAME` brings them back within the
    tombstone window (retention.tombstone_days); then retention purges them."""
    target = _target(params)
    name = params["name"]
    with _calling(target, "namespace delete") as engram:
        preview = engram.delete_namespace(name)
        contents = preview.contents
        if target.json:
            _emit_json(preview)
        else:
            table = Table(title=f"namespace {name} holds", show_header=False)
            for label, count in (
                ("memories (to delete)", contents.memories),
                ("of them pinned", contents.pinned_memories),
                ("already deleted", contents.deleted_memories),
                ("entities", contents.entities),
                ("documents", contents.documents),
            ):
                table.add_row(Text(label), Text(str(count)))
            Console().print(table)
        if not contents.memories:
            if not target.json:
                _echo(f"namespace {name} holds no live memory: nothing to delete")
            return
        if not params["yes"]:
            if not sys.stdin.isatty():
                _echo("engram namespace delete: nothing deleted; pass --yes to delete", err=True)
                return
            if not click.confirm(
                f"Delete namespace {name} ({contents.memories} memories)?", err=True
            ):
                return
        done = engram.delete_namespace(
            name,
            mode=FORGET_MODE_EXECUTE,
            reason=params["reason"],
            confirm_token=preview.confirm_token,
            timeout=max(target.timeout, NAMESPACE_TIMEOUT_S),
        )
    if target.json:
        _emit_json(done)
        return
    _echo(
        f"deleted namespace {name}: {done.deleted_count} memories; `engram namespace recover "
        f"{name}` brings them back until {done.recover_until.ToJsonString()}"
    )


@namespace.command(name="recover")
@click.argument("name")
@click.option("--reason", default="recovered with the engram CLI", show_default=True)
@common_options
def namespace_recover(**params: Any) -> None:
    """Bring back what `engram namespace delete NAME` deleted, within the tombstone
    window (memories deleted one by one stay deleted)."""
    target = _target(params)
    with _calling(target, "namespace recover") as engram:
        done = engram.recover_namespace(
            params["name"],
            reason=params["reason"],
            timeout=max(target.timeout, NAMESPACE_TIMEOUT_S),
        )
    if target.json:
        _emit_json(done)
        return
    left = (
        f"; {done.skipped_duplicates} stay deleted (a live memory holds their content)"
        if done.skipped_duplicates
        else ""
    )
    _echo(f"recovered namespace {params['name']}: {done.recovered_count} memories{left}")


def _import_item(data: dict[str, Any]) -> ImportItem:
    """An ImportItem from one JSON line (export's format: ImportItem's proto JSON,
    field names as in the proto, times as RFC 3339 text, enums by name)."""
    for key in data:
        if key not in ImportItem.DESCRIPTOR.fields_by_name:
            raise ValueError(f"unknown field {key!r}")
    try:
        return ParseDict(data, ImportItem())
    except ParseError as error:
        raise ValueError(str(error)) from None


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


class _Bar:
    """Progress on stderr: a rich bar (done of the total when known, the rate, ETA)
    on a terminal; otherwise a plain line every few seconds (and `final`)."""

    def __init__(self, label: str, total: int | None, unit: str, *, show: bool = True) -> None:
        self.label = label
        self.show = show
        self.last = 0.0
        self.start = time.monotonic()
        self.progress: Any = None
        if show and sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn(label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(f"{{task.fields[rate]}} {unit}/s"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.progress.start()
            self.task = self.progress.add_task(label, total=total, rate="-")

    def rate(self, done: int) -> str:
        return f"{done / max(time.monotonic() - self.start, 1e-9):,.0f}"

    def update(self, done: int, line: str) -> None:
        """`done` so far; `line`, what a plain progress line says."""
        if self.progress is not None:
            self.progress.update(self.task, completed=done, rate=self.rate(done))
            return
        now = time.monotonic()
        if self.show and now - self.last >= PLAIN_PROGRESS_EVERY_S:
            self.last = now
            _echo(f"{self.label}: {line}", err=True)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class _Reporter:
    """Import progress: the bar follows the rows acknowledged (each stream's reply
    says its rows are committed), with the lines rejected before sending; what was
    sent but not yet acknowledged is shown beside it."""

    def __init__(self, total: int | None, rejected: list[tuple[int, str]], show: bool) -> None:
        self.bar = _Bar("import", total, "rows", show=show)
        self.rejected = rejected
        self.state = ImportProgress(0, 0, 0, 0)

    def __call__(self, state: ImportProgress) -> None:
        self.state = state
        committed = state.created + state.deduplicated
        self.bar.update(
            state.acknowledged + len(self.rejected),
            f"{committed} rows committed ({state.created} created, {state.deduplicated} "
            f"already there), {state.failed + len(self.rejected)} failed, {state.sent} sent "
            f"({self.bar.rate(committed)} rows/s)",
        )

    def stop(self) -> None:
        self.bar.stop()


def _import_stopped(state: ImportProgress, params: dict[str, Any], why: str) -> None:
    """What an import cut short has committed, and how to finish it."""
    committed = state.created + state.deduplicated
    pending = state.sent - state.acknowledged
    maybe = f"; of the {pending} rows sent after them, some may be too" if pending else ""
    again = ["engram", "import", params["source"]]
    if params["namespace"]:
        again += ["-n", params["namespace"]]
    _echo(
        f"engram import: {why}: {committed} rows committed ({state.created} created, "
        f"{state.deduplicated} already there){maybe}. To resume, run the same command "
        f"again ({' '.join(again)}): rows already imported are skipped, not duplicated",
        err=True,
    )


def _count_lines(path: str) -> int | None:
    if path == "-":
        return None
    with open(path, "rb") as file:
        return sum(1 for line in file if line.strip())


@cli.command(name="import")
@click.argument("source", type=click.Path(allow_dash=True, dir_okay=False))
@namespace_option
@click.option("--batch-size", type=click.IntRange(1, 1000), default=500, show_default=True)
@common_options
def import_(**params: Any) -> None:
    """Load SOURCE (a .jsonl file, or - for stdin): one memory per line, as `export`
    writes them. Re-running after an interruption creates nothing twice."""
    target = _target(params)
    source = params["source"]
    lines = _Lines(click.open_file(source, encoding="utf-8"), errors=[], line_of=array("q"))
    reporter = _Reporter(
        _count_lines(source) if not target.json else None, lines.errors, show=not target.json
    )
    try:
        with target.client() as engram:
            summary = engram.import_memories(
                lines,
                namespace=params["namespace"],
                batch_size=params["batch_size"],
                on_progress=reporter,
                stream_items=IMPORT_STREAM_ITEMS,
            )
    except EngramError as error:
        reporter.stop()
        _import_stopped(reporter.state, params, str(error))
        _fail("import", error)
    except KeyboardInterrupt:
        reporter.stop()
        _import_stopped(reporter.state, params, "interrupted")
        sys.exit(130)
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
        _echo(
            f"imported: {summary.created} created, {summary.deduplicated} already there, "
            f"{len(failed)} failed"
        )
    sys.exit(1 if failed else 0)


def export_record(memory: Memory) -> dict[str, Any]:
    """One memory as an import line: every field ImportItem takes
    (engram.client.export_item says which)."""
    return _dict(export_item(memory))


@cli.command()
@namespace_option
@click.option("--page-size", type=click.IntRange(1, 500), default=500, show_default=True)
@common_options
def export(**params: Any) -> None:
    """Every live memory of a namespace as JSON lines on stdout (what `import`
    reads), streamed page by page: every field import takes (session, expiry,
    valid time, categories, temporal class, confidence, decay rate, ...).
    Superseded versions are not live, so they and their supersedes links are
    not exported."""
    target = _target(params)
    with _calling(target, "export") as engram:
        for memory in engram.list_memories(
            namespace=params["namespace"], page_size=params["page_size"]
        ):
            sys.stdout.write(json.dumps(export_record(memory), ensure_ascii=False) + "\n")
    sys.stdout.flush()


@cli.command()
@common_options
def diagnostics(**params: Any) -> None:
    """The suite's health score and report (maintenance's GetDiagnostics)."""
    target = _target(params)
    with _calling(target, "diagnostics") as engram:
        report = engram.get_diagnostics()
    if target.json:
        _emit_json(report)
        return
    data = _dict(report)
    _echo(f"health: {data.get('health', '')}  score: {report.score:.2f}")
    for recommendation in data.get("recommendations", []):
        _echo(f"- {recommendation}")


@cli.command()
@click.option("--execute", is_flag=True, help="run the recommended repairs (default: observe)")
@common_options
def maintenance(**params: Any) -> None:
    """One maintenance cycle (RunMaintenance): the diagnostics' recommendations, and
    with --execute the repairs they call for."""
    from engram.maintenance.v1 import maintenance_pb2

    target = _target(params)
    mode = (
        maintenance_pb2.MAINTENANCE_MODE_EXECUTE
        if params["execute"]
        else maintenance_pb2.MAINTENANCE_MODE_OBSERVE
    )
    with _calling(target, "maintenance") as engram:
        reply = engram.run_maintenance(mode=mode)
    if target.json:
        _emit_json(reply)
        return
    _echo(f"score {reply.score_before:.2f} -> {reply.score_after:.2f}")
    for action in _dict(reply).get("actions", []):
        _echo(
            f"- {action.get('action', '')}: {action.get('status', '')} {action.get('detail', '')}"
        )


@cli.command()
@common_options
def retention(**params: Any) -> None:
    """One retention sweep (RunRetention): expired memories, tombstones past the
    window, old history and jobs; what each step removed."""
    target = _target(params)
    with _calling(target, "retention") as engram:
        reply = engram.run_retention()
    if target.json:
        _emit_json(reply)
        return
    for step in reply.steps:
        _echo(f"{step.step}: {step.removed} removed")


class _McpCommand(click.Command):
    """`engram mcp`, whose help lists every tool the server serves (read from the
    server itself, so the list never goes stale)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        import textwrap

        from services.cli.mcp_server import tool_summaries

        tools = tool_summaries()
        with formatter.section(f"Tools ({len(tools)})"):
            first = [(name, text.split(". ")[0].removesuffix(".")) for name, text in tools]
            formatter.write_dl(
                [
                    (name, textwrap.shorten(text, width=58, placeholder="..."))
                    for name, text in first
                ]
            )
        super().format_epilog(ctx, formatter)


@cli.command(cls=_McpCommand)
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
    """Serve Engram's memory tools (listed below) over the Model Context Protocol:
    on stdio for an MCP host that starts this command, or over streamable HTTP with
    --http PORT."""
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


def command_summaries() -> list[tuple[str, str]]:
    """Every client command, in order, with its one-line help (for `engram --help`)."""
    return [(name, command.get_short_help_str(limit=62)) for name, command in cli.commands.items()]
