"""Every example in README.md runs, in order, against a real suite (issue 13).

The README's ```sh blocks are read, not copied: each command is run with bash as
written, after these rewrites and no others (`rewrite` below):

- `localhost:5005N`, `localhost:50061` (and `127.0.0.1:` forms) -> the port this test gave
  that listener;
- `.venv/bin/grpcurl` -> the grpcurl binary of this virtualenv (the README names no bare
  `grpcurl`: `make setup` installs it only there);
- `https://example.com/guide.html` -> the same page served by a scripted HTTP server on a
  loopback port (this machine has no internet);
- `.venv/bin/engram` -> `python -m services.cli.main` (this checkout's code), with the CLI
  synopsis' optional `[--config engram.yaml]`, `[--data-dir DIR]` and `[--port N]` filled in;
- each `<placeholder>` -> a value from an earlier command's JSON output (CAPTURES says which).

The ```python block (the engram.client example) runs with its ports rewritten the same way;
the client commands' ```sh block runs in a scratch directory with ENGRAM_ADDRESS,
ENGRAM_SEARCH_ADDRESS and ENGRAM_MAINTENANCE_ADDRESS set to this suite's ports.

The tests below are defined in the README's order (the Python example, the client commands,
the grpcurl examples, then the CLI synopsis, which writes nothing) and share one suite, as a
new user following the page shares one: an example that breaks a later one fails here
(`test_the_examples_run_in_the_order_the_readme_prints_them`).

The suite is started by the README's own `engram up` line, with a config file that sets free
ports, `providers.embedding.kind: none` (recall by keywords: every example query shares a word
with the memory it should find, and the local model would cost each process ~10 s) and the LLM
at a scripted Ollama server (for Extract). Every command must exit 0, and the ones that read
must find what the examples before them wrote (CHECKS). Each capture and check must match
exactly one README command, so an example that disappears or changes shape fails here too;
a new ```sh block fails until this test runs it (or NOT_RUN says why it cannot).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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

# ```sh blocks that are not run here, and why (matched by their first line).
NOT_RUN = {
    "make run": "installs a virtualenv and starts the suite on the fixed ports; `make test` "
    "is the suite this test is part of (tests/deploy runs `engram up`)",
    "KEY=$(.venv/bin/engram keys create": "needs auth on: tests/e2e/test_auth_readme.py runs "
    "it against an auth-on store",
    '.venv/bin/engram remember "Ana Silva': "needs the pipeline with graphEnabled and a model "
    "that names entities; tests/e2e/test_graph_readme.py runs this block against one",
    ".venv/bin/engram certs dev": "the TLS section's suite needs certificates and TLS on every "
    "service; tests/tls/test_readme_tls.py runs this block against one",
    "export ENGRAM_SERVICE_KEY=": "compose's postgres profile needs Docker; "
    "tests/deploy/test_compose_postgres.py checks each line against `docker-compose config`",
    """.venv/bin/grpcurl -plaintext -d '{"namespace": "team-a"}' localhost:50061 """
    "engram.store.internal.v1.StoreAdminService/BackfillExtraction": "needs Pipeline V2 on "
    "(this suite runs with it off, where it answers FAILED_PRECONDITION); "
    "tests/providers/test_readme_providers.py runs it against a store with it on",
}

# ---- reading the README -------------------------------------------------------------


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def _complete(source: str) -> bool:
    """Whether `source` is a whole command: no trailing `\\`, no quote left open
    (the README breaks long JSON bodies over lines inside their quotes)."""
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
    assert not pending, f"README command never ends: {pending}"
    return commands


def is_not_run(block: str) -> bool:
    first = commands_of(block)[0]
    return any(first.startswith(key) for key in NOT_RUN)


def is_grpcurl_block(block: str) -> bool:
    return "grpcurl" in block and not is_not_run(block)


def is_cli_block(block: str) -> bool:
    """The CLI synopsis: the commands that run the services."""
    return ".venv/bin/engram up" in block and not is_not_run(block)


def is_client_cli_block(block: str) -> bool:
    """The client commands' examples (engram remember, recall, ...)."""
    return ".venv/bin/engram " in block and not is_cli_block(block) and not is_not_run(block)


def python_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def readme_blocks() -> list[str]:
    return sh_blocks(README.read_text(encoding="utf-8"))


def grpcurl_commands() -> list[str]:
    return [c for block in readme_blocks() if is_grpcurl_block(block) for c in commands_of(block)]


def cli_commands() -> dict[str, str]:
    """The CLI synopsis block by subcommand (`up`, `serve`, `health`)."""
    [block] = [b for b in readme_blocks() if is_cli_block(b)]
    found = {}
    for command in commands_of(block):
        words = shlex.split(command, comments=True)
        found[words[1]] = command
    return found


# ---- rewriting a command for this machine ---------------------------------------------


@dataclass(frozen=True)
class Places:
    """Where this test runs what the README names: service ports and the web page."""

    ports: dict[str, int]
    page_url: str


def rewrite(command: str, places: Places) -> str:
    """The README command as it runs here (see the module docstring)."""
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
    """One README command: the RPC it calls (or a grpcurl verb) and text only it has."""

    method: str
    needle: str = ""
    without: str = "\x00"

    def matches(self, command: str) -> bool:
        calls = re.search(rf"(/|\s){re.escape(self.method)}(\s|$)", command) is not None
        return calls and self.needle in command and self.without not in command


@dataclass
class Output:
    text: str
    messages: list[dict[str, Any]]

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
        return messages  # `list` and `describe` print text
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


# placeholder -> (the example whose output holds it, where in that output)
CAPTURES: dict[str, tuple[Example, tuple[str | int, ...]]] = {
    "<pinned id>": (Example("Remember", "critical:"), ("memory", "id")),
    "<memory id>": (Example("Remember", "Alice prefers tea"), ("memory", "id")),
    "<other id>": (Example("ImportMemories"), ("results", 0, "memory_id")),
    "<next_page_token>": (
        Example("ListMemories", '"page_size": 2}'),
        ("next_page_token",),
    ),
    "<token from preview>": (
        Example("ForgetMemories", "old project notes", without="FORGET_MODE_EXECUTE"),
        ("confirm_token",),
    ),
    "<document id>": (Example("CreateDocument", GUIDE_URL), ("document", "id")),
}

Check = Callable[[Output, dict[str, str]], None]


def contents(memories: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in memories]


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


CHECKS: list[tuple[Example, Check]] = [
    (Example("list"), lambda out, ids: _has(out.text, "engram.store.v1.MemoryStoreService")),
    (Example("describe"), lambda out, ids: _has(out.text, "rpc Remember")),
    (Example("Remember", "critical:"), _remember_pinned),
    (
        Example("Remember", "Alice prefers tea"),
        lambda out, ids: _equal(out.one["memory"]["namespace"], "team-a"),
    ),
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
        lambda out, ids: _equal([m["id"] for m in out.one["memories"]], [ids["<memory id>"]]),
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
    (
        Example("Recall", "Alice"),
        lambda out, ids: _equal(out.one["results"][0]["memory"]["id"], ids["<memory id>"]),
    ),
    (Example("Recall", "deploy day"), _recall_deploy),
    (
        Example("Recall", '"namespaces"'),
        lambda out, ids: _equal(
            {r["memory"]["namespace"] for r in out.one["results"]} <= {"team-a", "default"}, True
        ),
    ),
    (Example("AssembleContext"), _assembled),
    (Example("GetStatus"), lambda out, ids: _equal(out.one.get("store_available"), True)),
    (Example("GetQueueStats"), lambda out, ids: _has(out.text, "live_memory_count")),
    (
        Example("Extract"),
        lambda out, ids: _equal([f["content"] for f in out.one["facts"]], EXTRACTED),
    ),
    (
        Example("CreateDocument", GUIDE_URL),
        lambda out, ids: _equal(out.one["document"]["status"], "DOCUMENT_STATUS_QUEUED"),
    ),
    (Example("WatchDocument"), _watch),
    (Example("GetDocument"), _document),
    (Example("ListDocumentChunks"), _chunks),
    (
        Example("GetDiagnostics"),
        lambda out, ids: _equal(out.one["providers"].get("pipeline_reachable"), True),
    ),
    (Example("RunRetention"), lambda out, ids: _has(out.text, "steps")),
    (Example("AppendTurn", '"ttl": "3s"'), _short_turn),
    (Example("AppendTurn", "Remember that our CI"), _promoted_turn),
    (
        Example("SummarizeSession"),
        lambda out, ids: _equal((bool(out.one["job_id"]), out.one["turn_count"]), (True, "1")),
    ),
    (
        Example("ListMemories", '"session_id": "chat-42"'),
        lambda out, ids: _equal(
            contents(out.one["memories"]), ["Remember that our CI runs on Ubuntu 24.04"]
        ),
    ),
]


def _equal(actual: Any, expected: Any) -> None:
    assert actual == expected


def _has(text: str, wanted: str) -> None:
    assert wanted in text


# ---- the suite -------------------------------------------------------------------------


@dataclass
class Suite:
    root: Path
    places: Places
    up: ProcessHandle
    launcher: Launcher


def _guide_page(_request: Any) -> Reply:
    return Reply(200, GUIDE_HTML, content_type="text/html; charset=utf-8")


@pytest.fixture(scope="module")
def suite(module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    """The README's `engram up` line, on free ports, with a scripted LLM and web page."""
    root = tmp_path_factory.mktemp("readme")
    extract = scripted(lambda memory: [fact(text) for text in EXTRACTED])
    llm = LlmServer(
        lambda prompt: SUMMARY if is_summary(prompt) else extract(prompt)  # SummarizeSession
    ).start()
    pages = ScriptedHttpServer({("GET", "/guide.html"): _guide_page}).start()
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
    places = Places(ports, f"{pages.url}/guide.html")
    argv = cli_argv(
        cli_commands()["up"],
        places,
        {"[--config engram.yaml]": f"--config {config}", "[--data-dir DIR]": f"--data-dir {root}"},
    )
    up = module_launcher.spawn(argv, port=ports["store"])
    try:
        for name in SERVICES:
            ProcessHandle(up.process, up.log_path, ports[name]).wait_ready(timeout=90)
        yield Suite(root, places, up, module_launcher)
    finally:
        up.kill()
        llm.stop()
        pages.stop()


def run(command: str, prelude: list[str]) -> subprocess.CompletedProcess[str]:
    script = "\n".join(["set -euo pipefail", *prelude, command])
    return subprocess.run(
        ["bash", "-c", script],
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


# ---- the tests -------------------------------------------------------------------------


def test_every_sh_block_of_the_readme_is_run_or_says_why_not() -> None:
    blocks = readme_blocks()
    assert blocks, "README.md has no ```sh blocks?"
    for block in blocks:
        first = commands_of(block)[0]
        ran = is_grpcurl_block(block) or is_cli_block(block) or is_client_cli_block(block)
        assert ran or is_not_run(block), (
            f"README block starting {first!r} is not run by this test: run it or add it to NOT_RUN"
        )


def test_the_examples_run_in_the_order_the_readme_prints_them() -> None:
    """pytest runs this module's tests in the order they are defined; that order is the
    README's, and no command calls a bare `grpcurl` (`make setup` installs it only as
    `.venv/bin/grpcurl`)."""
    text = README.read_text(encoding="utf-8")
    [python] = python_blocks()
    [client] = [b for b in readme_blocks() if is_client_cli_block(b)]
    first_grpcurl = next(b for b in readme_blocks() if is_grpcurl_block(b))
    assert text.index(python) < text.index(client) < text.index(first_grpcurl)
    bare = [
        command
        for block in readme_blocks()
        for command in commands_of(block)
        if re.match(r"grpcurl\b", command.lstrip())
    ]
    assert bare == []


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


def test_readme_python_example_runs(suite: Suite, tmp_path: Path) -> None:
    """The README's first example: engram.client remembers, recalls, lists and
    catches a NotFound (ports rewritten as for the grpcurl examples)."""
    [block] = python_blocks()
    script = tmp_path / "example.py"
    script.write_text(rewrite(block, suite.places), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_client_env(suite.places),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("remembered ")
    assert any(line.endswith(" Alice prefers green tea") for line in lines[1:])
    assert lines[-1].startswith("not found: NOT_FOUND ")


def test_readme_client_cli_examples_run(suite: Suite, tmp_path: Path) -> None:
    """The client commands' block, in order, in a scratch directory (export writes a
    file), with `.venv/bin/engram` this checkout's CLI; export then import copies the
    namespace."""
    [block] = [b for b in readme_blocks() if is_client_cli_block(b)]
    engram = shlex.join(engram_command())
    outputs = []
    for original in commands_of(block):
        command = rewrite(original, suite.places).replace(".venv/bin/engram", engram)
        result = subprocess.run(
            ["bash", "-c", f"set -euo pipefail\n{command}"],
            cwd=tmp_path,
            env=_client_env(suite.places),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        assert result.returncode == 0, f"{original}\n{result.stdout}{result.stderr}"
        outputs.append(result.stdout)
    assert "Bob prefers vim" in outputs[2]  # recall
    exported = (tmp_path / "team-a.jsonl").read_text(encoding="utf-8").splitlines()
    assert exported and not any("Bob prefers vim" in line for line in exported)  # forgotten
    assert any("Bob reviews pull requests" in line for line in exported)
    assert f"imported: {len(exported)} created" in outputs[6]


def test_readme_grpcurl_examples_run_in_order(suite: Suite) -> None:
    commands = grpcurl_commands()
    ids: dict[str, str] = {}
    prelude: list[str] = []  # the examples' shell variables (G=..., S=...)
    captured_by: dict[str, list[str]] = {name: [] for name in CAPTURES}
    checked_by: list[list[str]] = [[] for _ in CHECKS]
    for original in commands:
        command = rewrite(original, suite.places)
        if re.match(r"^[A-Za-z_]\w*=", original):
            prelude.append(command)
            continue
        for placeholder in re.findall(r"<[a-z][a-z_ ]*>", command):
            assert placeholder in ids, (
                f"{placeholder} in {original!r} comes from no earlier example (see CAPTURES)"
            )
            command = command.replace(placeholder, ids[placeholder])
        result = run(command, prelude)
        assert result.returncode == 0, (
            f"README example failed (exit {result.returncode}):\n{original}\n"
            f"ran as:\n{command}\nstderr:\n{result.stderr}\nstdout:\n{result.stdout}"
        )
        output = Output(result.stdout, json_messages(result.stdout))
        for placeholder, (example, path) in CAPTURES.items():
            if example.matches(original):
                assert len(output.messages) == 1, f"{original}\nprinted:\n{result.stdout}"
                ids[placeholder] = dig(output.messages[0], path, original)
                captured_by[placeholder].append(original)
        for index, (example, check) in enumerate(CHECKS):
            if example.matches(original):
                try:
                    check(output, ids)
                except AssertionError as exc:
                    raise AssertionError(
                        f"README example ran but did not find what it should:\n{original}\n"
                        f"output:\n{result.stdout}"
                    ) from exc
                checked_by[index].append(original)
    for placeholder, sources in captured_by.items():
        assert len(sources) == 1, f"{placeholder} should come from one example, not {sources}"
    for (example, _), matched in zip(CHECKS, checked_by, strict=True):
        assert len(matched) == 1, f"{example} should match one README example, not {matched}"


def test_readme_cli_examples_run(suite: Suite) -> None:
    """`engram up` started the suite (the fixture); here `health`, `serve store`, and
    `backup` of the running suite's data directory `restore`d into a new one."""
    cli = cli_commands()
    assert set(cli) == {"up", "serve", "health", "backup", "restore"}, (
        "a new CLI example: run it here"
    )

    health = subprocess.run(
        cli_argv(cli["health"], suite.places, {}),
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
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
        done = subprocess.run(
            cli_argv(cli[name], suite.places, fills),
            cwd=REPO_ROOT,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"
    assert (restored / "engram.db").stat().st_size > 0
