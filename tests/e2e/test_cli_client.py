"""The CLI's client commands (`engram remember|recall|get|list|history|explain|
weak|session|supersede|modify|delete|recover|forget|namespace|import|export|diagnostics|
maintenance|retention`, and
the help of every command) as a user runs them, against a real `engram up` suite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from e2e_helpers import REPO_ROOT, Launcher, RunningSuite, clean_env, engram_command, start_suite
from services.common.clock import days_ago_text
from services.storage.db import open_read_write


@pytest.fixture(scope="module")
def suite(module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> RunningSuite:
    return start_suite(module_launcher, tmp_path_factory.mktemp("cli-suite"))


def engram(
    suite: RunningSuite, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`engram ARGS --address ...` as a subprocess (stdin and stdout are pipes, not a TTY)."""
    search = ["--search-address", suite.address("search")]
    maintenance = ["--maintenance-address", suite.address("maintenance")]
    path = os.pathsep.join(
        [str(REPO_ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    )
    result = subprocess.run(
        engram_command(*args, "--address", suite.address("store"), *search, *maintenance),
        cwd=REPO_ROOT,
        env=clean_env({"PYTHONPATH": path}),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_remember_get_recall_list_history(suite: RunningSuite) -> None:
    ns = ["-n", "cli-basic"]
    out = engram(suite, "remember", "[ops]: Deploys happen on Tuesdays", *ns, "--json").stdout
    memory = json.loads(out)["memory"]
    assert memory["tags"] == ["ops"] and memory["content"] == "Deploys happen on Tuesdays"
    again = engram(suite, "remember", "[ops]: Deploys happen on Tuesdays", *ns).stdout
    assert again.strip() == f"already remembered: {memory['id']}"
    got = json.loads(engram(suite, "get", memory["id"], *ns, "--json").stdout)
    assert got["id"] == memory["id"]
    table = engram(suite, "get", memory["id"], *ns).stdout
    assert "Deploys happen on Tuesdays" in table
    hits = json.loads(engram(suite, "recall", "deploys", *ns, "--json").stdout)["results"]
    assert hits[0]["memory"]["id"] == memory["id"]
    assert "Tuesdays" in engram(suite, "recall", "deploys", *ns).stdout
    engram(suite, "remember", "Alice prefers tea", *ns, "--type", "preference", "--tag", "alice")
    listed = json_lines(engram(suite, "list", *ns, "--json").stdout)
    assert [m["content"] for m in listed] == ["Alice prefers tea", "Deploys happen on Tuesdays"]
    only = json_lines(engram(suite, "list", *ns, "--type", "preference", "--json").stdout)
    assert [m["content"] for m in only] == ["Alice prefers tea"]
    events = json_lines(engram(suite, "history", memory["id"], *ns, "--json").stdout)
    assert [e["event_type"] for e in events] == ["HISTORY_EVENT_TYPE_CREATED"]
    assert "CREATED" in engram(suite, "history", memory["id"], *ns).stdout


def test_supersede_explain_and_list_as_of(suite: RunningSuite) -> None:
    ns = ["-n", "cli-temporal"]
    old = json.loads(engram(suite, "remember", "Eve lives in Lisbon", *ns, "--json").stdout)
    old_id = old["memory"]["id"]
    out = engram(suite, "supersede", old_id, "Eve lives in Berlin", *ns, "--reason", "moved")
    new_id = out.stdout.strip().removeprefix("superseded by: ")
    listed = json_lines(engram(suite, "list", *ns, "--json").stdout)
    assert [m["id"] for m in listed] == [new_id]
    then = old["memory"]["create_time"]
    earlier = json_lines(engram(suite, "list", *ns, "--as-of", then, "--json").stdout)
    assert [m["content"] for m in earlier] == ["Eve lives in Lisbon"]
    hits = json.loads(engram(suite, "recall", "Eve", *ns, "--as-of", then, "--json").stdout)
    assert [h["memory"]["id"] for h in hits["results"]] == [old_id]
    explained = json.loads(engram(suite, "explain", new_id, *ns, "--json").stdout)
    assert [m["id"] for m in explained["supersedes"]] == [old_id]
    table = engram(suite, "explain", old_id, *ns).stdout
    assert "relation" in table and table.rstrip().endswith("2 history events")
    again = engram(
        suite, "supersede", old_id, "Eve lives in Rome", *ns, "--reason", "r", check=False
    )
    assert again.returncode == 1 and "already_superseded" in again.stdout


def test_remember_in_a_session_with_a_ttl_and_list_the_session(suite: RunningSuite) -> None:
    ns = ("-n", "cli-sessions")
    out = engram(suite, "remember", "short one", *ns, "--session", "s1", "--ttl", "15m", "--json")
    memory = json.loads(out.stdout)["memory"]
    assert memory["session_id"] == "s1" and memory["expire_time"]
    engram(suite, "remember", "elsewhere", *ns)
    listed = json_lines(engram(suite, "list", *ns, "--session", "s1", "--json").stdout)
    assert [m["content"] for m in listed] == ["short one"]
    bad = engram(suite, "remember", "x", *ns, "--ttl", "soon", check=False)
    assert bad.returncode != 0 and "--ttl" in bad.stderr


def test_errors_exit_1_with_reason_and_request_id(suite: RunningSuite) -> None:
    missing = engram(suite, "get", "no-such-id", "-n", "cli-errors", check=False)
    assert missing.returncode == 1
    assert "NOT_FOUND" in missing.stderr and "request_id=" in missing.stderr
    bad = engram(suite, "remember", "x", "--importance", "3", check=False)
    assert bad.returncode == 1 and "importance" in bad.stderr


def test_forget_previews_and_deletes_only_with_yes(suite: RunningSuite) -> None:
    ns = ["-n", "cli-forget"]
    for n in range(3):
        engram(suite, "remember", f"scratch note {n}", *ns)
    engram(suite, "remember", "keep this one", *ns)
    preview = engram(suite, "forget", "--query", "scratch", *ns)
    assert "3 memories to forget" in preview.stdout
    assert "nothing deleted; pass --yes" in preview.stderr
    assert len(json_lines(engram(suite, "list", *ns, "--json").stdout)) == 4
    done = engram(suite, "forget", "--query", "scratch", *ns, "--yes")
    assert "forgot 3" in done.stdout
    left = json_lines(engram(suite, "list", *ns, "--json").stdout)
    assert [m["content"] for m in left] == ["keep this one"]


def test_forget_says_more_match_and_all_forgets_every_batch(suite: RunningSuite) -> None:
    """One ForgetMemories call takes at most 200: the preview and the result say
    more match, and --all goes on, batch after batch, until none is left."""
    ns = ["-n", "cli-forget-all"]
    rows = "".join(json.dumps({"content": f"stale entry {n}"}) + "\n" for n in range(450))
    engram(suite, "import", "-", *ns, stdin=rows)
    engram(suite, "remember", "a keeper", *ns)
    preview = engram(suite, "forget", "--query", "stale", *ns)
    assert "200 memories to forget (250 more match: forget them with --all)" in preview.stdout
    once = engram(suite, "forget", "--query", "stale", *ns, "--yes")
    assert "forgot 200; 250 more match: run it again, or pass --all" in once.stdout
    every = engram(suite, "forget", "--query", "stale", *ns, "--all", "--yes")
    assert every.stdout.rstrip().endswith("forgot 250"), every.stdout
    assert "forgot 250" in every.stdout and "more match" not in every.stdout.splitlines()[-1]
    left = json_lines(engram(suite, "list", *ns, "--limit", "0", "--json").stdout)
    assert [m["content"] for m in left] == ["a keeper"]
    deleted = json_lines(engram(suite, "list", *ns, "--deleted", "--limit", "0", "--json").stdout)
    assert len(deleted) == 450
    # --json: one line per reply, the preview's and each executed batch's
    again = "".join(json.dumps({"content": f"stale again {n}"}) + "\n" for n in range(210))
    engram(suite, "import", "-", *ns, stdin=again)
    lines = json_lines(
        engram(suite, "forget", "--query", "again", *ns, "--all", "--yes", "--json").stdout
    )
    assert lines[0]["more_matching"] is True and "confirm_token" in lines[0]
    assert [int(line["deleted_count"]) for line in lines[1:]] == [200, 10]


def test_modify_delete_recover(suite: RunningSuite) -> None:
    """Every single-memory mutation has a command, with --json."""
    ns = ["-n", "cli-mutations"]
    memory = json.loads(engram(suite, "remember", "the lab opens at 9", *ns, "--json").stdout)
    memory_id = memory["memory"]["id"]
    changed = engram(
        suite, "modify", memory_id, *ns, "--content", "the lab opens at 8", "--tag", "lab"
    )
    assert changed.stdout.strip() == f"modified: {memory_id} (version 1 -> 2)"
    got = json.loads(engram(suite, "get", memory_id, *ns, "--json").stdout)
    assert got["content"] == "the lab opens at 8" and got["tags"] == ["lab"]
    same = json.loads(engram(suite, "modify", memory_id, *ns, "--tag", "lab", "--json").stdout)
    assert same["status"] == "PATCH_STATUS_UNCHANGED"
    stale = engram(suite, "modify", memory_id, *ns, "--pin", "--if-version", "1", check=False)
    assert stale.returncode == 1 and "version_conflict" in stale.stdout
    pinned = json.loads(engram(suite, "modify", memory_id, *ns, "--pin", "--json").stdout)
    assert pinned["status"] == "PATCH_STATUS_UPDATED"
    refused = engram(suite, "delete", memory_id, *ns, check=False)
    assert refused.returncode == 1 and "PINNED_REQUIRES_FORCE" in refused.stderr
    tombstone = json.loads(
        engram(suite, "delete", memory_id, *ns, "--force", "--reason", "moved", "--json").stdout
    )
    assert tombstone["deleted"] is True and tombstone["id"] == memory_id
    assert json_lines(engram(suite, "list", *ns, "--json").stdout) == []
    back = engram(suite, "recover", memory_id, *ns)
    assert back.stdout.strip().startswith(f"recovered: {memory_id}")
    listed = json_lines(engram(suite, "list", *ns, "--json").stdout)
    assert [m["id"] for m in listed] == [memory_id]
    twice = engram(suite, "recover", memory_id, *ns, "--json", check=False)
    assert twice.returncode == 1 and "NOT_DELETED" in twice.stderr
    events = json_lines(engram(suite, "history", memory_id, *ns, "--json").stdout)
    assert [e["event_type"].removeprefix("HISTORY_EVENT_TYPE_") for e in events] == [
        "CREATED",
        "MODIFIED",
        "MODIFIED",
        "DELETED",
        "RECOVERED",
    ]


def test_namespace_delete_and_recover(suite: RunningSuite) -> None:
    ns, other = "cli-tenant", "cli-tenant-neighbour"
    rows = "".join(json.dumps({"content": f"tenant fact {n}"}) + "\n" for n in range(30))
    engram(suite, "import", "-", "-n", ns, stdin=rows)
    engram(suite, "remember", "tenant fact 0", "-n", other)
    preview = engram(suite, "namespace", "delete", ns)
    assert "memories (to delete)" in preview.stdout and "30" in preview.stdout
    assert "nothing deleted; pass --yes" in preview.stderr
    assert len(json_lines(engram(suite, "list", "-n", ns, "--json").stdout)) == 30
    done = engram(suite, "namespace", "delete", ns, "--yes")
    assert done.stdout.splitlines()[-1].startswith(f"deleted namespace {ns}: 30 memories;")
    assert json_lines(engram(suite, "list", "-n", ns, "--json").stdout) == []
    assert len(json_lines(engram(suite, "list", "-n", other, "--json").stdout)) == 1
    back = json.loads(engram(suite, "namespace", "recover", ns, "--json").stdout)
    assert int(back["recovered_count"]) == 30
    assert len(json_lines(engram(suite, "list", "-n", ns, "--json").stdout)) == 30
    empty = engram(suite, "namespace", "delete", "cli-never-used", "--yes")
    assert "nothing to delete" in empty.stdout
    missing = engram(suite, "namespace", "recover", "cli-never-used", check=False)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def test_session_turns_and_summary_and_maintenance_and_retention(suite: RunningSuite) -> None:
    """The rest of the mutations have commands too: AppendTurn, SummarizeSession,
    RunMaintenance, RunRetention."""
    ns = ("-n", "cli-turns")
    turn = engram(suite, "session", "append", "chat-1", "user", "I ordered the blue mug", *ns)
    assert turn.stdout.startswith("captured (short-term): ")
    kept = json.loads(
        engram(
            suite, "session", "append", "chat-1", "user", "remember that I am vegan", *ns, "--json"
        ).stdout
    )
    assert kept["promoted"] is True and kept["memory"]["session_id"] == "chat-1"
    # this suite has no LLM: the summary is refused, saying how to configure one (with an
    # LLM it is queued: tests/store/test_store_turns.py, tests/e2e/test_readme_examples.py)
    refused = engram(suite, "session", "summarize", "chat-1", *ns, check=False)
    assert refused.returncode == 1, refused.stdout
    assert "FAILED_PRECONDITION" in refused.stderr and "providers.llm" in refused.stderr
    observed = json.loads(engram(suite, "maintenance", "--json").stdout)
    assert observed["mode"] == "MAINTENANCE_MODE_OBSERVE"
    assert "score" in engram(suite, "maintenance").stdout
    swept = json.loads(engram(suite, "retention", "--json").stdout)
    assert "tombstones" in [step["step"] for step in swept["steps"]]
    assert "tombstones: " in engram(suite, "retention").stdout


def test_help_lists_every_command_and_every_mcp_tool(suite: RunningSuite) -> None:
    from services.cli.client_commands import COMMANDS
    from services.cli.main import SERVER_COMMANDS
    from services.cli.mcp_server import tool_summaries

    top = engram_help("--help")
    listed = {line.split()[0] for line in top.split("client commands", 1)[1].splitlines()[1:]}
    assert listed == set(COMMANDS) and {"mcp", "session"} <= listed
    assert all(name in top for name in SERVER_COMMANDS)
    tools = engram_help("mcp", "--help")
    names = [name for name, _ in tool_summaries()]
    assert len(names) == 11 and f"Tools ({len(names)})" in tools
    assert all(f"  {name} " in tools for name in names), tools


def engram_help(*args: str) -> str:
    path = os.pathsep.join(
        [str(REPO_ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    )
    result = subprocess.run(
        engram_command(*args),
        cwd=REPO_ROOT,
        env=clean_env({"PYTHONPATH": path}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_tables_keep_ids_on_one_line_at_80_columns(suite: RunningSuite) -> None:
    """stdout is a pipe here, so rich lays tables out 80 columns wide."""
    ns = ["-n", "cli-narrow"]
    long_text = "a rather long memory about the quarterly planning offsite " * 3
    first = json.loads(engram(suite, "remember", long_text, *ns, "--tag", "x", "--json").stdout)
    first_id = first["memory"]["id"]
    new_id = (
        engram(suite, "supersede", first_id, "the offsite moved to May", *ns, "--reason", "moved")
        .stdout.strip()
        .removeprefix("superseded by: ")
    )
    outputs = {
        "list": engram(suite, "list", *ns, "--as-of", first["memory"]["create_time"]).stdout,
        "explain": engram(suite, "explain", new_id, *ns).stdout,
        "links": engram(suite, "links", new_id, *ns).stdout,
        "forget": engram(suite, "forget", "--query", "offsite", *ns).stdout,
    }
    for name, out in outputs.items():
        assert max(len(line) for line in out.splitlines()) <= 80, (name, out)
        assert first_id in out, (name, out)
    # the content keeps a readable width too: its first words stay on one line
    for name in ("list", "explain", "forget"):
        assert "a rather long memory" in outputs[name], (name, outputs[name])


def test_import_reports_failed_lines_and_a_rerun_creates_nothing_twice(
    suite: RunningSuite, tmp_path: Path
) -> None:
    rows = [json.dumps({"content": f"imported row {n}", "tags": ["bulk"]}) for n in range(1500)]
    rows[9] = "{not json"
    rows[20] = json.dumps({"content": "too important", "importance": 9})
    source = tmp_path / "rows.jsonl"
    source.write_text("\n".join(rows) + "\n", encoding="utf-8")
    first = engram(suite, "import", str(source), "-n", "cli-import", check=False)
    assert first.returncode == 1  # some rows failed
    assert "imported: 1498 created, 0 already there, 2 failed" in first.stdout
    failures = [line for line in first.stderr.splitlines() if line.startswith("line ")]
    assert failures[0].startswith("line 10: ") and failures[1].startswith("line 21: ")
    assert "importance" in failures[1]
    # an interrupted import re-run: everything already there, nothing duplicated
    rerun = engram(
        suite, "import", "-", "-n", "cli-import", "--json", stdin=source.read_text(), check=False
    )
    assert json.loads(rerun.stdout)["created"] == 0
    assert json.loads(rerun.stdout)["deduplicated"] == 1498
    listed = engram(suite, "list", "-n", "cli-import", "--limit", "0", "--json").stdout
    assert len(json_lines(listed)) == 1498


def test_import_progress_lines_when_not_on_a_terminal(suite: RunningSuite, tmp_path: Path) -> None:
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"content": f"p{n}"}) + "\n" for n in range(600)))
    result = engram(suite, "import", str(source), "-n", "cli-progress", "--batch-size", "100")
    progress = [line for line in result.stderr.splitlines() if line.startswith("import: ")]
    assert progress and "rows committed" in progress[0]  # plain lines, no control codes
    assert "\x1b[" not in result.stderr


def test_an_interrupted_import_says_what_is_committed_and_how_to_resume(
    suite: RunningSuite, tmp_path: Path
) -> None:
    """Ctrl-C (SIGINT) mid-import: the progress counts rows acknowledged as committed
    (never more than the store holds), the command says how many and how to resume,
    and the re-run creates exactly the rest."""
    total = 40_000
    source = tmp_path / "rows.jsonl"
    source.write_text(
        "".join(json.dumps({"content": f"resumable row {n}"}) + "\n" for n in range(total))
    )
    path = os.pathsep.join(
        [str(REPO_ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    )
    ns = "cli-interrupted"
    process = subprocess.Popen(
        engram_command("import", str(source), "-n", ns, "--address", suite.address("store")),
        cwd=REPO_ROOT,
        env=clean_env({"PYTHONPATH": path}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    shown = 0
    for line in process.stderr:  # a plain progress line every 2 s
        if line.startswith("import: ") and int(line.split()[1]) > 0:
            shown = int(line.split()[1])
            break
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=120)
    assert process.returncode == 130, rest
    said = next(line for line in rest.splitlines() if "interrupted:" in line)
    committed = int(said.split("interrupted: ")[1].split()[0])
    assert shown <= committed < total
    assert "run the same command again" in said and "skipped" in said
    stored = scalar_count(suite, ns)
    assert committed <= stored  # acknowledged means committed
    rerun = engram(suite, "import", str(source), "-n", ns, "--json")
    summary = json.loads(rerun.stdout)
    assert summary["deduplicated"] == stored and summary["created"] == total - stored
    assert scalar_count(suite, ns) == total


def scalar_count(suite: RunningSuite, namespace: str) -> int:
    conn = open_read_write(suite.root / "data" / "engram.db")
    try:
        row = conn.execute(
            "SELECT count(*) FROM memories WHERE namespace = ? AND is_deleted = 0", (namespace,)
        ).fetchone()
    finally:
        conn.close()
    return int(row[0])


def test_export_then_import_reproduces_every_memory(suite: RunningSuite, tmp_path: Path) -> None:
    source_ns, copy_ns = "cli-export-src", "cli-export-copy"
    engram(suite, "remember", "critical: never log tokens", "-n", source_ns, "--who", "agent-1")
    engram(
        suite,
        "remember",
        "Bob prefers vim",
        "-n",
        source_ns,
        "--type",
        "preference",
        "--importance",
        "0.4",
        "--tag",
        "bob",
        "--tag",
        "editor",
        "--why",
        "asked",
        "--source-type",
        "chat",
        "--source-id",
        "msg-9",
        "--event-time",
        "2026-01-02T03:04:05.123456789Z",
        "--category",
        "Tools",
    )
    # a session's short-term memory keeps its session and its expiry (issue 35)
    engram(
        suite, "remember", "the standup moved", "-n", source_ns, "--session", "s1", "--ttl", "1h"
    )
    # valid time rides along (a known end in the future keeps it listed now)
    ending = {"content": "the offsite lasts", "valid_until": "2999-01-01T00:00:00Z"}
    classified = {
        "content": "Dana works at Acme",
        "temporal_class": "TEMPORAL_CLASS_LONG_TERM",
        "confidence": 0.75,
        "decay_rate": 0.3,
    }
    rows = "".join(json.dumps({"content": f"bulk fact {n}"}) + "\n" for n in range(699))  # > a page
    rows += json.dumps(ending) + "\n" + json.dumps(classified) + "\n"
    engram(suite, "import", "-", "-n", source_ns, stdin=rows)
    exported = engram(suite, "export", "-n", source_ns).stdout
    dump = tmp_path / "dump.jsonl"
    dump.write_text(exported, encoding="utf-8")
    assert len(exported.splitlines()) == 704
    engram(suite, "import", str(dump), "-n", copy_ns)
    keys = (
        "content",
        "type",
        "importance",
        "tags",
        "pinned",
        "who",
        "why",
        "source_type",
        "source_id",
        "event_time",
        "categories",
        "valid_from",
        "valid_until",
        "session_id",
        "expire_time",
        "temporal_class",
        "confidence",
        "decay_rate",
    )

    def memories(ns: str) -> list[tuple[Any, ...]]:
        listed = json_lines(engram(suite, "list", "-n", ns, "--limit", "0", "--json").stdout)
        return sorted(tuple(json.dumps(m.get(k)) for k in keys) for m in listed)

    original, copy = memories(source_ns), memories(copy_ns)
    assert len(original) == 704 and original == copy
    short = next(json.loads(line) for line in exported.splitlines() if "standup" in line)
    assert short["session_id"] == "s1" and short["expire_time"] > short["valid_from"]
    bob = next(json.loads(line) for line in exported.splitlines() if "vim" in line)
    assert bob["event_time"] == "2026-01-02T03:04:05.123456789Z" and bob["tags"] == [
        "bob",
        "editor",
    ]
    assert bob["categories"] == ["tools"] and bob["valid_from"] == bob["event_time"]
    assert (
        json.loads(next(line for line in exported.splitlines() if "offsite" in line))["valid_until"]
        == "2999-01-01T00:00:00Z"
    )
    listed = json_lines(
        engram(suite, "list", "-n", copy_ns, "--category", "TOOLS", "--json").stdout
    )
    assert [m["content"] for m in listed] == ["Bob prefers vim"]


def test_diagnostics(suite: RunningSuite) -> None:
    report = json.loads(engram(suite, "diagnostics", "--json").stdout)
    assert 0.0 <= report["score"] <= 1.0
    assert "score:" in engram(suite, "diagnostics").stdout


def test_import_shows_a_progress_bar_on_a_terminal(suite: RunningSuite, tmp_path: Path) -> None:
    """stderr on a pseudo-terminal: rich's bar with rows done of the total and the rate."""
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"content": f"tty row {n}"}) + "\n" for n in range(3000)))
    path = os.pathsep.join(
        [str(REPO_ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    )
    primary, secondary = os.openpty()
    process = subprocess.Popen(
        engram_command("import", str(source), "-n", "cli-tty", "--address", suite.address("store")),
        cwd=REPO_ROOT,
        env=clean_env({"PYTHONPATH": path, "TERM": "xterm-256color", "COLUMNS": "120"}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=secondary,
    )
    os.close(secondary)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(primary, chunks), daemon=True)
    reader.start()
    stdout, _ = process.communicate(timeout=120)
    reader.join(timeout=30)
    os.close(primary)
    terminal = b"".join(chunks).decode("utf-8", errors="replace")
    assert process.returncode == 0, terminal
    assert "3000/3000" in terminal and "rows/s" in terminal
    assert "rows committed" not in terminal  # the bar, not the plain lines
    assert "imported: 3000 created" in stdout.decode()


def _drain(fd: int, into: list[bytes]) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other end is closed
            return
        if not chunk:
            return
        into.append(chunk)


def test_weak_lists_memories_decayed_below_the_threshold(suite: RunningSuite) -> None:
    """Seed 003: a memory written 200 days ago and never recalled has decayed to
    e^(-0.1 * 200^0.8) ≈ 0.0015 (the age is written to the file: a test cannot wait)."""
    ns = ("-n", "cli-weak")
    old = json.loads(engram(suite, "remember", "an old parking spot", *ns, "--json").stdout)
    engram(suite, "remember", "a new parking spot", *ns)
    conn = open_read_write(suite.root / "data" / "engram.db")
    try:
        conn.execute(
            "UPDATE memories SET created_at = ? WHERE id = ?",
            (days_ago_text(200), old["memory"]["id"]),
        )
    finally:
        conn.close()
    listed = json_lines(engram(suite, "weak", *ns, "--json").stdout)
    assert [w["memory"]["id"] for w in listed] == [old["memory"]["id"]]
    assert listed[0]["current_confidence"] < 0.05
    assert engram(suite, "weak", *ns).stdout.rstrip().endswith("1 weak memories")


def test_session_get_shows_where_consolidation_is(
    module_launcher: Launcher, tmp_path: Path
) -> None:
    """With consolidation on, a session is tracked from its first memory (open) and
    ends, its job queued, when another session starts in the namespace; a session
    the namespace never saw is NOT_FOUND, as is one of another namespace."""
    suite = start_suite(module_launcher, tmp_path, {"sessions": {"consolidate": "on"}})
    ns = ("-n", "cli-sessions")
    engram(suite, "remember", "we picked the blue tiles", *ns, "--session", "kitchen")
    opened = json.loads(engram(suite, "session", "get", "kitchen", *ns, "--json").stdout)
    assert opened["state"] == "SESSION_CONSOLIDATION_STATE_OPEN" and "end_time" not in opened
    assert engram(suite, "session", "get", "kitchen", *ns).stdout.startswith(
        "session kitchen: open"
    )
    engram(suite, "remember", "the garden needs a fence", *ns, "--session", "garden")
    ended = json.loads(engram(suite, "session", "get", "kitchen", *ns, "--json").stdout)
    assert ended["state"] in (
        "SESSION_CONSOLIDATION_STATE_QUEUED",
        "SESSION_CONSOLIDATION_STATE_FAILED",  # no LLM here: the job may have given up
    ), ended
    assert ended["end_reason"] == "new_session" and ended["job_id"]
    text = engram(suite, "session", "get", "kitchen", *ns).stdout
    assert "end reason: new_session" in text and ended["job_id"] in text
    for args in (("nowhere", *ns), ("kitchen", "-n", "another")):
        missing = engram(suite, "session", "get", *args, check=False)
        assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr, missing.stderr


def test_control_characters_are_never_printed_raw(suite: RunningSuite) -> None:
    """Issue 34: `engram list` printed ESC/CSI from stored text raw (terminal escape
    injection). The store now refuses them on writes; rows from before (written
    here directly) and text no caller wrote are shown escaped, in tables, lines
    and JSON alike, and JSON still gives the text back exactly."""
    ns = ("-n", "cli-control")
    refused = engram(suite, "remember", "evil \x1b[2J text", *ns, check=False)
    assert refused.returncode == 1 and "INVALID_ARGUMENT" in refused.stderr
    assert "\x1b" not in refused.stderr
    memory = json.loads(engram(suite, "remember", "plain text", *ns, "--json").stdout)["memory"]
    evil = "evil \x1b[2J\x1b]0;owned\x07 and \x9b31m csi\rback"
    conn = open_read_write(suite.root / "data" / "engram.db")
    try:
        conn.execute(
            "UPDATE memories SET content = ?, tags = ? WHERE id = ?",
            (evil, json.dumps(["t\x1b[1m"]), memory["id"]),
        )
    finally:
        conn.close()
    for args in (("list", *ns), ("get", memory["id"], *ns), ("recall", "evil", *ns)):
        out = engram(suite, *args).stdout
        raw = [ch for ch in out if (ord(ch) < 0x20 and ch not in "\t\n") or 0x7F <= ord(ch) < 0xA0]
        assert raw == [], (args, out)
        assert "\\x1b" in out, (args, out)
    listed = engram(suite, "list", *ns, "--json").stdout
    assert "\x9b" not in listed and "\x1b" not in listed
    assert json_lines(listed)[0]["content"] == evil
