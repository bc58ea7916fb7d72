"""Every example in README.md and docs/*.md runs, page by page, in order, against a real
suite (issue 13; one page per area since issue 36).

Each page's ```sh and ```python blocks are read, not copied, and run in the order the
page prints them, against a fresh suite of the page's own (as a new user following that
page has one): an example that breaks a later one on its page fails here. Each command
of a ```sh block is run with bash as written, after these rewrites and no others
(`rewrite` below):

- `localhost:5005N`, `localhost:50061` (and `127.0.0.1:` forms) -> the port this test gave
  that listener;
- `.venv/bin/grpcurl` -> the grpcurl binary of this virtualenv (the pages name no bare
  `grpcurl`: `make setup` installs it only there);
- `https://example.com/guide.html` -> the same page served by a scripted HTTP server on a
  loopback port (this machine has no internet);
- `.venv/bin/engram` -> `python -m services.cli.main` (this checkout's code), with the CLI
  synopsis' optional `[--config engram.yaml]`, `[--data-dir DIR]` and `[--port N]` filled in;
- each `<placeholder>` -> a value from an earlier command's JSON output on the same page
  (its CAPTURES say which).

A ```python block runs with its ports rewritten the same way. Every command runs in a
scratch directory of its page (the client commands' `export` writes a file there) with
engram.client from this checkout on the path and ENGRAM_ADDRESS, ENGRAM_SEARCH_ADDRESS and
ENGRAM_MAINTENANCE_ADDRESS set to the suite's ports; a shell variable an example sets
(`G=...`, `S=...`) holds for the rest of its page.

Each suite is started by the docs' own `engram up` line (docs/running.md's CLI synopsis),
with a config file that sets free ports, `providers.embedding.kind: none` (recall by
keywords: every example query shares a word with the memory it should find, and the local
model would cost each process ~10 s) and the LLM at a scripted Ollama server (for Extract
and SummarizeSession). The CLI synopsis block itself runs `health`, `serve store`, and
`backup` of the running suite `restore`d into a new data directory. Every command must exit
0, and the ones that read must find what the examples before them wrote (each page's
CHECKS). Each capture and check must match exactly one command of its page, so an example
that disappears, moves to another page or changes shape fails here too; a new ```sh or
```python block on any page fails until this test runs it (or its page's NOT_RUN says why
it cannot).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e_helpers import (
    GRPCURL,
    REPO_ROOT,
    Launcher,
    ProcessHandle,
    clean_env,
    engram_command,
    free_port,
    needs_grpcurl,
)
from http_fakes import Reply, ScriptedHttpServer
from llm_fakes import LlmServer, fact, is_summary, scripted

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
RUNNING = DOCS / "running.md"  # the CLI synopsis, whose `engram up` line starts each suite
pytestmark = needs_grpcurl()

SERVICES = ("store", "search", "pipeline", "maintenance")
README_PORTS = {
    "50051": "store",
    "50052": "search",
    "50053": "pipeline",
    "50054": "maintenance",
    "50061": "store_internal",
}
GUIDE_URL = "https://example.com/guide.html"
GUIDE_HTML = (
    "<html><head><title>Deploy guide</title></head><body>"
    "<p>Deploys happen on Tuesdays after the stand-up. Roll back with the previous tag.</p>"
    "</body></html>"
)
EXTRACTED = ["Alice moved to Lisbon", "Alice prefers tea"]
SUMMARY = json.dumps({"summary": "The user's build fails on the linker step; CI runs on Ubuntu."})
COMMAND_TIMEOUT_S = 60


def pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_name(page: Path) -> str:
    return page.relative_to(REPO_ROOT).as_posix()


# ---- reading a page -------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    lang: str  # "sh" or "python"
    text: str


def blocks_of(page: Path) -> list[Block]:
    """The page's ```sh and ```python blocks, in the order it prints them."""
    text = page.read_text(encoding="utf-8")
    found = re.findall(r"^```(sh|python)\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    return [Block(lang, body) for lang, body in found]


def sh_blocks(page: Path) -> list[str]:
    return [b.text for b in blocks_of(page) if b.lang == "sh"]


def _complete(source: str) -> bool:
    """Whether `source` is a whole command: no trailing `\\`, no quote left open
    (the pages break long JSON bodies over lines inside their quotes)."""
    if source.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(source, comments=True)
    except ValueError:
        return False
    return True


def commands_of(block: str) -> list[str]:
    """The block's commands, each with its continuation lines; comments dropped."""
    commands: list[str] = []
    pending: list[str] = []
    for line in block.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending.append(line)
        if _complete("\n".join(pending)):
            commands.append("\n".join(pending))
            pending = []
    assert not pending, f"a command never ends: {pending}"
    return commands


def is_cli_block(block: Block) -> bool:
    """The CLI synopsis: the commands that run the services."""
    return block.lang == "sh" and ".venv/bin/engram up" in block.text


def cli_commands() -> dict[str, str]:
    """The CLI synopsis block by subcommand (`up`, `serve`, `health`, ...)."""
    [block] = [b for b in blocks_of(RUNNING) if is_cli_block(b)]
    found = {}
    for command in commands_of(block.text):
        words = shlex.split(command, comments=True)
        found[words[1]] = command
    return found


# ---- rewriting a command for this machine ---------------------------------------------


@dataclass(frozen=True)
class Places:
    """Where this test runs what the pages name: service ports and the web page."""

    ports: dict[str, int]
    page_url: str


def rewrite(command: str, places: Places) -> str:
    """The page's command as it runs here (see the module docstring)."""
    assert GRPCURL is not None and re.fullmatch(r"[\w/.+-]+", GRPCURL), GRPCURL  # quote-free
    command = re.sub(
        r"\b(?:localhost|127\.0\.0\.1):(5005[1-4]|50061)\b",
        lambda m: f"127.0.0.1:{places.ports[README_PORTS[m.group(1)]]}",
        command,
    )
    command = command.replace(".venv/bin/grpcurl", GRPCURL)
    return command.replace(GUIDE_URL, places.page_url)


def cli_argv(command: str, places: Places, fills: dict[str, str]) -> list[str]:
    """A CLI synopsis line as argv: optional parts filled in, ports rewritten."""
    text = " ".join(shlex.split(command, comments=True))
    for optional, value in fills.items():
        text = text.replace(optional, value)
    assert "[" not in text, f"an optional part of {command!r} has no value here"
    words = shlex.split(rewrite(text, places))
    assert words[0] == ".venv/bin/engram"
    return engram_command(*words[1:])


# ---- which example provides each placeholder, and what each one must find -------------


@dataclass(frozen=True)
class Example:
    """One command of a page: the RPC it calls (or a grpcurl verb, or a client
    command) and text only it has. `lang="python"` is a whole ```python block."""

    method: str
    needle: str = ""
    without: str = "\x00"
    lang: str = "sh"

    def matches(self, command: str, lang: str = "sh") -> bool:
        if lang != self.lang:
            return False
        calls = lang == "python" or (
            re.search(rf"(/|\s){re.escape(self.method)}(\s|$)", command) is not None
        )
        return calls and self.needle in command and self.without not in command


@dataclass
class Output:
    text: str
    messages: list[dict[str, Any]]
    cwd: Path

    @property
    def one(self) -> dict[str, Any]:
        assert len(self.messages) == 1, self.text
        return self.messages[0]


def json_messages(text: str) -> list[dict[str, Any]]:
    """grpcurl prints one JSON object per response message (a stream prints several)."""
    decoder = json.JSONDecoder()
    messages: list[dict[str, Any]] = []
    rest = text.strip()
    if not rest.startswith("{"):
        return messages  # `list`, `describe` and the client commands print text
    while rest:
        message, end = decoder.raw_decode(rest)
        messages.append(message)
        rest = rest[end:].strip()
    return messages


def dig(message: Any, path: tuple[str | int, ...], command: str) -> str:
    """The value at `path` of an example's output, which must be there."""
    found = message
    for key in path:
        assert isinstance(found, dict | list), f"no {path} in the output of {command}: {message}"
        try:
            found = found[key]  # type: ignore[index]
        except (KeyError, IndexError):
            pytest.fail(f"no {path} in the output of {command}: {message}")
    assert isinstance(found, str) and found, f"{path} is empty in the output of {command}"
    return found


Check = Callable[[Output, dict[str, str]], None]
Captures = dict[str, tuple[Example, tuple[str | int, ...]]]


@dataclass(frozen=True)
class PageExamples:
    """What a page's examples must capture and find, and which blocks are not run here
    (matched by their first command's start) and why."""

    captures: Captures = field(default_factory=dict)
    checks: list[tuple[Example, Check]] = field(default_factory=list)
    not_run: dict[str, str] = field(default_factory=dict)

    def is_not_run(self, block: Block) -> bool:
        first = commands_of(block.text)[0] if block.lang == "sh" else block.text
        return any(first.startswith(key) for key in self.not_run)


def contents(memories: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in memories]


def _equal(actual: Any, expected: Any) -> None:
    assert actual == expected


def _has(text: str, wanted: str) -> None:
    assert wanted in text


def _python_example(out: Output, ids: dict[str, str]) -> None:
    """engram.client remembers, recalls, lists and catches a NotFound."""
    lines = out.text.splitlines()
    assert lines[0].startswith("remembered ")
    assert any(line.endswith(" Alice prefers green tea") for line in lines[1:])
    assert lines[-1].startswith("not found: NOT_FOUND ")


def _imported_copy(out: Output, ids: dict[str, str]) -> None:
    """export then import copies the namespace, without what `forget` deleted."""
    exported = (out.cwd / "team-a.jsonl").read_text(encoding="utf-8").splitlines()
    assert exported and not any("Bob prefers vim" in line for line in exported)  # forgotten
    assert any("Bob reviews pull requests" in line for line in exported)
    assert f"imported: {len(exported)} created" in out.text


def _remember_pinned(out: Output, ids: dict[str, str]) -> None:
    memory = out.one["memory"]
    assert memory["namespace"] == "team-a"
    assert memory["pinned"] is True and memory["importance"] == 1.0
    assert memory["tags"] == ["auth", "ops"]


def _list_page_one(out: Output, ids: dict[str, str]) -> None:
    assert len(out.one["memories"]) == 2 and out.one["next_page_token"]


def _history(out: Output, ids: dict[str, str]) -> None:
    events = out.one["events"]
    assert {e["memory_id"] for e in events} == {ids["<memory id>"]}
    assert [e["event_type"] for e in events] == [
        "HISTORY_EVENT_TYPE_CREATED",
        "HISTORY_EVENT_TYPE_MODIFIED",
        "HISTORY_EVENT_TYPE_DELETED",
        "HISTORY_EVENT_TYPE_RECOVERED",
    ]


def _purge(out: Output, ids: dict[str, str]) -> None:
    assert out.one["deleted_count"] == "1" and out.one["hard_deleted"] is True
    assert [c["id"] for c in out.one["candidates"]] == [ids["<other id>"]]


def _assembled(out: Any, ids: dict[str, str]) -> None:
    assert "Alice prefers green tea" in out.one["context"]
    assert 0 < out.one["token_count"] <= out.one["token_budget"] == 300
    assert out.one["sections"][0]["memories"]


def _recall_deploy(out: Output, ids: dict[str, str]) -> None:
    found = [r["memory"] for r in out.one["results"]]
    assert contents(found) == ["Deploys happen on Tuesdays"]
    assert found[0]["type"] == "procedural"


def _watch(out: Output, ids: dict[str, str]) -> None:
    assert len(out.messages) >= 1
    assert out.messages[-1]["document"]["status"] == "DOCUMENT_STATUS_DONE", out.text


def _document(out: Output, ids: dict[str, str]) -> None:
    document = out.one["document"]
    assert document["status"] == "DOCUMENT_STATUS_DONE"
    assert document["title"] == "Deploy guide"  # backfilled from <title>


def _chunks(out: Output, ids: dict[str, str]) -> None:
    [chunk] = out.one["chunks"]
    assert "Deploys happen on Tuesdays" in json.dumps(chunk)


def _short_turn(out: Output, ids: dict[str, str]) -> None:
    memory = out.one["memory"]
    assert out.one["captured"] is True and "promoted" not in out.one
    assert (memory["session_id"], memory["type"]) == ("chat-42", "episodic")
    assert memory["expire_time"]


def _promoted_turn(out: Output, ids: dict[str, str]) -> None:
    assert out.one["promoted"] is True and out.one["long_term_intent"] is True
    assert "expire_time" not in out.one["memory"]


# The tour's and the reference's Remember examples, and what each must give.
PINNED = (Example("Remember", "critical:"), ("memory", "id"))
ALICE = (Example("Remember", "Alice prefers tea"), ("memory", "id"))
GRPCURL_LIST: tuple[Example, Check] = (
    Example("list", "$G localhost:50051 list"),
    lambda out, ids: _has(out.text, "engram.store.v1.MemoryStoreService"),
)
REMEMBER_CHECKS: list[tuple[Example, Check]] = [
    (PINNED[0], _remember_pinned),
    (ALICE[0], lambda out, ids: _equal(out.one["memory"]["namespace"], "team-a")),
]
RECALL_ALICE: tuple[Example, Check] = (
    Example("Recall", "Alice"),
    lambda out, ids: _equal(out.one["results"][0]["memory"]["id"], ids["<memory id>"]),
)
GET_STATUS: tuple[Example, Check] = (
    Example("GetStatus"),
    lambda out, ids: _equal(out.one.get("store_available"), True),
)

# page -> its examples' captures, checks and the blocks it leaves to other tests
PAGES: dict[str, PageExamples] = {
    "README.md": PageExamples(
        captures={"<pinned id>": PINNED, "<memory id>": ALICE},
        checks=[
            (Example("python", "from engram.client import", lang="python"), _python_example),
            (
                Example("recall", '"vim" -n team-a'),
                lambda out, ids: _has(out.text, "Bob prefers vim"),
            ),
            (Example("import", "team-a.jsonl"), _imported_copy),
            GRPCURL_LIST,
            *REMEMBER_CHECKS,
            RECALL_ALICE,
            GET_STATUS,
        ],
        not_run={
            "make run": "installs a virtualenv and starts the suite on the fixed ports; `make "
            "test` is the suite this test is part of (tests/deploy runs `engram up`)",
        },
    ),
    "docs/running.md": PageExamples(),  # the CLI synopsis (`run_cli_synopsis`)
    "docs/grpcurl.md": PageExamples(
        captures={
            "<pinned id>": PINNED,
            "<memory id>": ALICE,
            "<other id>": (Example("ImportMemories"), ("results", 0, "memory_id")),
            "<next_page_token>": (
                Example("ListMemories", '"page_size": 2}'),
                ("next_page_token",),
            ),
            "<token from preview>": (
                Example("ForgetMemories", "old project notes", without="FORGET_MODE_EXECUTE"),
                ("confirm_token",),
            ),
        },
        checks=[
            GRPCURL_LIST,
            (Example("describe"), lambda out, ids: _has(out.text, "rpc Remember")),
            *REMEMBER_CHECKS,
            (Example("ImportMemories"), lambda out, ids: _equal(out.one["created_count"], "4")),
            (
                Example("GetMemory"),
                lambda out, ids: _equal(
                    (out.one["memory"]["id"], out.one["memory"]["content"]),
                    (ids["<memory id>"], "Alice prefers tea"),
                ),
            ),
            (
                Example("ListMemories", '"types": ["preference"]'),
                lambda out, ids: _equal(
                    [m["id"] for m in out.one["memories"]], [ids["<memory id>"]]
                ),
            ),
            (Example("ListMemories", '"page_size": 2}'), _list_page_one),
            (
                Example("ListMemories", "page_token"),
                lambda out, ids: _equal(len(out.one["memories"]), 2),
            ),
            (
                Example("ModifyMemories"),
                lambda out, ids: _equal(
                    [r["status"] for r in out.one["results"]], ["PATCH_STATUS_UPDATED"] * 2
                ),
            ),
            (
                Example("DeleteMemory", "<memory id>"),
                lambda out, ids: _equal(out.one["memory"].get("deleted"), True),
            ),
            (
                Example("DeleteMemory", "<pinned id>"),
                lambda out, ids: _equal(out.one["memory"].get("deleted"), True),
            ),
            (
                Example("RecoverMemory"),
                lambda out, ids: _equal(
                    (out.one["memory"].get("deleted", False), out.one["memory"]["content"]),
                    (False, "Alice prefers green tea"),
                ),
            ),
            (Example("ListMemoryHistory"), _history),
            (
                Example("ForgetMemories", "old project notes", without="FORGET_MODE_EXECUTE"),
                lambda out, ids: _equal(
                    contents(out.one["candidates"]), ["Old project notes: Atlas ran on MySQL"]
                ),
            ),
            (
                Example("ForgetMemories", "project archived"),
                lambda out, ids: _equal(out.one.get("deleted_count"), "1"),
            ),
            (Example("ForgetMemories", "gdpr erasure"), _purge),
            (Example("Check"), lambda out, ids: _equal(out.one, {"status": "SERVING"})),
            RECALL_ALICE,
            (Example("Recall", "deploy day"), _recall_deploy),
            (
                Example("Recall", '"namespaces"'),
                lambda out, ids: _equal(
                    {r["memory"]["namespace"] for r in out.one["results"]} <= {"team-a", "default"},
                    True,
                ),
            ),
            (Example("AssembleContext"), _assembled),
            GET_STATUS,
            (Example("GetQueueStats"), lambda out, ids: _has(out.text, "live_memory_count")),
        ],
    ),
    "docs/sessions.md": PageExamples(
        checks=[
            (Example("AppendTurn", '"ttl": "3s"'), _short_turn),
            (Example("AppendTurn", "Remember that our CI"), _promoted_turn),
            (
                Example("SummarizeSession"),
                lambda out, ids: _equal(
                    (bool(out.one["job_id"]), out.one["turn_count"]), (True, "1")
                ),
            ),
            (
                Example("ListMemories", '"session_id": "chat-42"'),
                lambda out, ids: _equal(
                    contents(out.one["memories"]), ["Remember that our CI runs on Ubuntu 24.04"]
                ),
            ),
        ],
    ),
    "docs/pipeline.md": PageExamples(
        checks=[
            (
                Example("Extract"),
                lambda out, ids: _equal([f["content"] for f in out.one["facts"]], EXTRACTED),
            ),
        ],
        not_run={
            """.venv/bin/grpcurl -plaintext -d '{"namespace": "team-a"}' localhost:50061 """
            "engram.store.internal.v1.StoreAdminService/BackfillExtraction": "needs Pipeline "
            "V2 on (this suite runs with it off, where it answers FAILED_PRECONDITION); "
            "tests/providers/test_readme_providers.py runs it against a store with it on",
        },
    ),
    "docs/graph.md": PageExamples(
        not_run={
            '.venv/bin/engram remember "Ana Silva': "needs the pipeline with graphEnabled and "
            "a model that names entities; tests/e2e/test_graph_readme.py runs this block "
            "against one",
        },
    ),
    "docs/documents.md": PageExamples(
        captures={"<document id>": (Example("CreateDocument", GUIDE_URL), ("document", "id"))},
        checks=[
            (
                Example("CreateDocument", GUIDE_URL),
                lambda out, ids: _equal(out.one["document"]["status"], "DOCUMENT_STATUS_QUEUED"),
            ),
            (Example("WatchDocument"), _watch),
            (Example("GetDocument"), _document),
            (Example("ListDocumentChunks"), _chunks),
        ],
    ),
    "docs/maintenance.md": PageExamples(
        checks=[
            (
                Example("GetDiagnostics"),
                lambda out, ids: _equal(out.one["providers"].get("pipeline_reachable"), True),
            ),
            (Example("RunRetention"), lambda out, ids: _has(out.text, "steps")),
        ],
    ),
    "docs/storage.md": PageExamples(
        not_run={
            "export ENGRAM_SERVICE_KEY=": "compose's postgres profile needs Docker; "
            "tests/deploy/test_compose_postgres.py checks each line against "
            "`docker-compose config`",
        },
    ),
    "docs/security.md": PageExamples(
        not_run={
            ".venv/bin/engram certs dev": "the TLS section's suite needs certificates and TLS "
            "on every service; tests/tls/test_tls_suite.py runs this block against one",
            "KEY=$(.venv/bin/engram keys create": "needs auth on: tests/e2e/test_auth_readme.py "
            "runs it against an auth-on store",
        },
    ),
}


def examples_of(page: Path) -> PageExamples:
    return PAGES.get(page_name(page), PageExamples())


def run_blocks(page: Path) -> list[Block]:
    """The blocks of `page` this test runs, in order."""
    spec = examples_of(page)
    return [b for b in blocks_of(page) if not spec.is_not_run(b)]


PAGES_TO_RUN = [page_name(p) for p in pages() if run_blocks(p)]


# ---- the suite -------------------------------------------------------------------------


@dataclass
class Suite:
    root: Path
    places: Places
    up: ProcessHandle
    launcher: Launcher


def _guide_page(_request: Any) -> Reply:
    return Reply(200, GUIDE_HTML, content_type="text/html; charset=utf-8")


@pytest.fixture
def suite(launcher: Launcher, tmp_path: Path) -> Iterator[Suite]:
    """A fresh suite for one page: the docs' `engram up` line, on free ports, with a
    scripted LLM and web page."""
    root = tmp_path / "suite"
    root.mkdir()
    extract = scripted(lambda memory: [fact(text) for text in EXTRACTED])
    llm = LlmServer(
        lambda prompt: SUMMARY if is_summary(prompt) else extract(prompt)  # SummarizeSession
    ).start()
    pages_server = ScriptedHttpServer({("GET", "/guide.html"): _guide_page}).start()
    ports = {name: free_port() for name in (*SERVICES, "store_internal")}
    config = root / "engram.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"ports": ports},
                # off (the default) so that no derived fact joins the examples' memories
                "memory": {"pipelineV2": {"enabled": False}},
                # the guide page is served on loopback, refused unless allowed (issue 34)
                "documents": {"fetch_allow": ["127.0.0.1"]},
                "providers": {
                    "embedding": {"kind": "none"},
                    "llm": {"kind": "ollama", "base_url": llm.url, "model": "fake-llm"},
                },
            }
        ),
        encoding="utf-8",
    )
    places = Places(ports, f"{pages_server.url}/guide.html")
    argv = cli_argv(
        cli_commands()["up"],
        places,
        {"[--config engram.yaml]": f"--config {config}", "[--data-dir DIR]": f"--data-dir {root}"},
    )
    up = launcher.spawn(argv, port=ports["store"])
    try:
        for name in SERVICES:
            ProcessHandle(up.process, up.log_path, ports[name]).wait_ready(timeout=90)
        yield Suite(root, places, up, launcher)
    finally:
        up.kill()
        llm.stop()
        pages_server.stop()


def _client_env(places: Places) -> dict[str, str]:
    """engram.client from this checkout, and the client CLI's addresses (its
    ENGRAM_*_ADDRESS variables) pointed at this suite's ports."""
    path = os.pathsep.join(
        [str(REPO_ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    )
    return clean_env(
        {
            "PYTHONPATH": path,
            "ENGRAM_ADDRESS": f"127.0.0.1:{places.ports['store']}",
            "ENGRAM_SEARCH_ADDRESS": f"127.0.0.1:{places.ports['search']}",
            "ENGRAM_MAINTENANCE_ADDRESS": f"127.0.0.1:{places.ports['maintenance']}",
        }
    )


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def run_cli_synopsis(block: Block, suite: Suite) -> None:
    """`engram up` started the suite (the fixture); here `health`, `serve store`, and
    `backup` of the running suite's data directory `restore`d into a new one."""
    cli = cli_commands()
    assert set(cli) == {"up", "serve", "health", "backup", "restore"}, (
        "a new CLI example: run it here"
    )
    assert commands_of(block.text) == list(cli.values())

    health = _run(cli_argv(cli["health"], suite.places, {}), REPO_ROOT, clean_env())
    assert health.returncode == 0, health.stdout + health.stderr

    # Run from the checkout like every command here, so it reads the example engram.yaml
    # there; --port, ENGRAM_SERVER__PORTS__STORE_INTERNAL and ENGRAM_STORAGE__PATH keep it
    # off that file's ports and data.
    port = free_port()
    store = suite.launcher.spawn(
        cli_argv(cli["serve"], suite.places, {"[--port N]": f"--port {port}"}),
        env={
            "ENGRAM_STORAGE__PATH": str(suite.root / "serve" / "engram.db"),
            "ENGRAM_SERVER__PORTS__STORE_INTERNAL": str(free_port()),
        },
        port=port,
    )
    try:
        store.wait_ready()
    finally:
        store.kill()

    copy = suite.root / "backup" / "engram-backup.db"
    copy.parent.mkdir()
    restored = suite.root / "restored"
    for name, fills in (
        ("backup", {"FILE": str(copy), "[--data-dir DIR]": f"--data-dir {suite.root}"}),
        ("restore", {"FILE": str(copy), "[--data-dir DIR]": f"--data-dir {restored}"}),
    ):
        done = _run(cli_argv(cli[name], suite.places, fills), REPO_ROOT, clean_env())
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"
    assert (restored / "engram.db").stat().st_size > 0


@dataclass
class PageRun:
    """One page's examples as they run: the placeholders captured so far, the shell
    variables set so far, and which commands each capture and check matched."""

    page: str
    spec: PageExamples
    suite: Suite
    cwd: Path
    ids: dict[str, str] = field(default_factory=dict)
    prelude: list[str] = field(default_factory=list)
    captured_by: dict[str, list[str]] = field(default_factory=dict)
    checked_by: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.captured_by = {name: [] for name in self.spec.captures}
        self.checked_by = [[] for _ in self.spec.checks]

    def python(self, block: Block) -> None:
        script = self.cwd / "example.py"
        script.write_text(rewrite(block.text, self.suite.places), encoding="utf-8")
        result = _run([sys.executable, str(script)], self.cwd, _client_env(self.suite.places))
        assert result.returncode == 0, f"{self.page}: python example failed\n" + (
            result.stdout + result.stderr
        )
        self.found(block.text, "python", result.stdout)

    def sh(self, original: str) -> None:
        engram = shlex.join(engram_command())
        command = rewrite(original, self.suite.places).replace(".venv/bin/engram", engram)
        if re.match(r"^[A-Za-z_]\w*=", original):
            self.prelude.append(command)
            return
        for placeholder in re.findall(r"<[a-z][a-z_ ]*>", command):
            assert placeholder in self.ids, (
                f"{placeholder} in {original!r} ({self.page}) comes from no earlier example "
                "of its page (see its captures)"
            )
            command = command.replace(placeholder, self.ids[placeholder])
        script = "\n".join(["set -euo pipefail", *self.prelude, command])
        result = _run(["bash", "-c", script], self.cwd, _client_env(self.suite.places))
        assert result.returncode == 0, (
            f"{self.page} example failed (exit {result.returncode}):\n{original}\n"
            f"ran as:\n{command}\nstderr:\n{result.stderr}\nstdout:\n{result.stdout}"
        )
        self.found(original, "sh", result.stdout)

    def found(self, original: str, lang: str, stdout: str) -> None:
        output = Output(stdout, json_messages(stdout) if lang == "sh" else [], self.cwd)
        for placeholder, (example, path) in self.spec.captures.items():
            if example.matches(original, lang):
                assert len(output.messages) == 1, f"{original}\nprinted:\n{stdout}"
                self.ids[placeholder] = dig(output.messages[0], path, original)
                self.captured_by[placeholder].append(original)
        for index, (example, check) in enumerate(self.spec.checks):
            if example.matches(original, lang):
                try:
                    check(output, self.ids)
                except AssertionError as exc:
                    raise AssertionError(
                        f"{self.page} example ran but did not find what it should:\n"
                        f"{original}\noutput:\n{stdout}"
                    ) from exc
                self.checked_by[index].append(original)

    def each_matched_once(self) -> None:
        for placeholder, sources in self.captured_by.items():
            assert len(sources) == 1, (
                f"{self.page}: {placeholder} should come from one example, not {sources}"
            )
        for (example, _), matched in zip(self.spec.checks, self.checked_by, strict=True):
            assert len(matched) == 1, (
                f"{self.page}: {example} should match one example, not {matched}"
            )


# ---- the tests -------------------------------------------------------------------------


def test_every_example_block_of_every_page_is_run_or_says_why_not() -> None:
    """Every ```sh and ```python block of README.md and docs/*.md is run by
    `test_each_pages_examples_run_in_order` or listed in its page's NOT_RUN with a reason,
    and every page PAGES names exists and has a block each of its NOT_RUN keys names."""
    assert blocks_of(README), "README.md has no example blocks?"
    names = {page_name(p) for p in pages()}
    assert set(PAGES) <= names, f"PAGES names pages that are not there: {set(PAGES) - names}"
    for page in pages():
        spec = examples_of(page)
        runs = PAGES_TO_RUN
        for block in blocks_of(page):
            first = commands_of(block.text)[0] if block.lang == "sh" else block.text[:60]
            ran = page_name(page) in runs and not spec.is_not_run(block)
            assert ran or spec.is_not_run(block), (
                f"{page_name(page)} block starting {first!r} is not run by this test: run it "
                "or add it to its page's NOT_RUN"
            )
        for key, reason in spec.not_run.items():
            assert reason, key
            assert any(
                b.lang == "sh" and commands_of(b.text)[0].startswith(key) for b in blocks_of(page)
            ), f"{page_name(page)}: NOT_RUN names {key!r}, which no block of it starts with"
        if spec.captures or spec.checks:
            assert page_name(page) in runs, f"{page_name(page)} has checks but nothing runs"


def test_no_page_calls_a_bare_grpcurl_and_the_tour_runs_client_cli_grpcurl() -> None:
    """No command of any page calls a bare `grpcurl` (`make setup` installs it only as
    `.venv/bin/grpcurl`), and the README's tour prints the Python example, then the
    client commands, then grpcurl."""
    bare = [
        command
        for page in pages()
        for block in sh_blocks(page)
        for command in commands_of(block)
        if re.match(r"grpcurl\b", command.lstrip())
    ]
    assert bare == []
    blocks = run_blocks(README)
    kinds = [
        "python"
        if b.lang == "python"
        else "grpcurl"
        if "grpcurl" in b.text
        else "client"
        if ".venv/bin/engram " in b.text
        else "other"
        for b in blocks
    ]
    assert kinds == ["python", "client", "grpcurl"], kinds


@pytest.mark.parametrize("page", PAGES_TO_RUN)
def test_each_pages_examples_run_in_order(page: str, suite: Suite, tmp_path: Path) -> None:
    """The page's blocks in the order it prints them, in one fresh suite; every capture
    and check of the page matches exactly one of its commands."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    run = PageRun(page, examples_of(REPO_ROOT / page), suite, cwd)
    for block in run_blocks(REPO_ROOT / page):
        if block.lang == "python":
            run.python(block)
        elif is_cli_block(block):
            run_cli_synopsis(block, suite)
        else:
            for original in commands_of(block.text):
                run.sh(original)
    run.each_matched_once()


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_of_every_page_names_a_file_and_heading_that_exist() -> None:
    """The links between README.md and docs/*.md (and into bench/README.md) still land
    after the move: the file exists and, with a `#anchor`, has that heading."""
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page_name(page)} links to {target}, which is not there"
            if anchor and file.suffix == ".md":
                prose = re.sub(
                    r"^```.*?^```", "", file.read_text(encoding="utf-8"), flags=re.S | re.M
                )
                headings = re.findall(r"^#+ (.*)$", prose, re.M)
                assert anchor in {_anchor(h) for h in headings}, (
                    f"{page_name(page)} links to {target}: no such heading"
                )
