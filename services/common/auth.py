"""API keys, roles and namespaces: who may call what (issue 14, docs/security.md "Authentication").

A key is `engram_<id>_<secret>`, sent as `authorization: Bearer <key>` metadata. The
keys file (JSON, `auth.keys_file`, default keys.json beside the database) holds, per
key, its name, role, namespace patterns, created/revoked times, its id and the
SHA-256 of the whole key: never the key itself. Keys are random 256-bit secrets, so
one unsalted hash is enough; the id finds the record and the hashes are compared
with hmac.compare_digest. `engram keys` edits the file (under a lock, replaced
atomically); every service re-reads it when its mtime changes, checked at most every
`auth.reload_ms` (at most 5 s), so a revocation needs no restart.

The services' own credential is `auth.service_key` (not in the file). It is the only
credential for RPCs outside the public table (the store's internal services) and it
may call every public RPC too, on every namespace, without a rate limit; writes made
with it keep the calling service's own actor.

Decisions, in this order: no key, or one that is unknown, revoked or malformed:
UNAUTHENTICATED. The key's token bucket is empty: RESOURCE_EXHAUSTED with RetryInfo.
The role does not include the RPC, or the request's namespace (empty means "default")
(or any of the namespaces a multi-namespace read names: services.common.validation.
named_namespaces) is not covered by the key's patterns: PERMISSION_DENIED. Errors name neither the
namespace nor any id, so they reveal nothing about what exists.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import fcntl
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common import clock
from services.common.config import AuthSettings, Config, RoleRateLimit
from services.common.errors import PermissionDenied, RateLimited, Unauthenticated
from services.common.startup import StartupError
from services.common.validation import NAMESPACE_PATTERN, named_namespaces, pattern_covers
from services.storage.db import PRIVATE_DIR_MODE

log = logging.getLogger("engram.auth")

AUTHORIZATION_KEY = "authorization"
BEARER = "bearer "
KEY_PREFIX = "engram_"
_KEY = re.compile(r"engram_([0-9a-f]{16})_[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_PATTERN = NAMESPACE_PATTERN
ALL_NAMESPACES = "*"
KEYS_FILE_NAME = "keys.json"
SERVICE_NAME = "service"


class Role(enum.IntEnum):
    """Each role includes the ones below it."""

    READER = 1
    WRITER = 2
    ADMIN = 3


def _methods(service: str, names: str) -> dict[str, str]:
    return {f"/{service}/{name}": service for name in names.split()}


_STORE = "engram.store.v1.MemoryStoreService"
_SEARCH = "engram.search.v1.SearchService"
_PIPELINE = "engram.pipeline.v1.PipelineService"
_MAINTENANCE = "engram.maintenance.v1.MaintenanceService"
_SUITE = "engram.store.v1.SuiteService"

# Every public RPC and the lowest role that may call it (the table). An RPC
# not listed here (the store's internal services) takes only the service key.
PUBLIC_RPCS: dict[str, Role] = {
    **dict.fromkeys(_methods(_SEARCH, "Recall AssembleContext"), Role.READER),
    **dict.fromkeys(
        _methods(
            _STORE,
            "GetMemory ListMemories ListMemoryHistory ExplainMemory ListMemoryLinks "
            "GetEntity ListEntities GetSession ListWeakMemories",
        ),
        Role.READER,
    ),
    **dict.fromkeys(
        _methods(_PIPELINE, "GetDocument ListDocumentChunks WatchDocument Extract GetStatus"),
        Role.READER,
    ),
    **dict.fromkeys(_methods(_SUITE, "GetSuite"), Role.READER),
    **dict.fromkeys(
        _methods(
            _STORE,
            "Remember ImportMemories ModifyMemories DeleteMemory ForgetMemories RecoverMemory "
            "AppendTurn SummarizeSession DeleteNamespace RecoverNamespace",
        ),
        Role.WRITER,
    ),
    **dict.fromkeys(_methods(_PIPELINE, "CreateDocument"), Role.WRITER),
    **dict.fromkeys(
        _methods(_MAINTENANCE, "GetDiagnostics RunMaintenance RunRetention"), Role.ADMIN
    ),
}
# Suite-wide RPCs (their requests carry no namespace): maintenance works on every
# namespace, so it needs a key whose patterns include "*"; GetStatus shows only
# queue counts and provider health, and GetSuite the suite's id and ports, so any
# reader may ask.
ALL_NAMESPACE_RPCS = frozenset(_methods(_MAINTENANCE, "GetDiagnostics RunMaintenance RunRetention"))
SUITE_WIDE_READS = frozenset({**_methods(_PIPELINE, "GetStatus"), **_methods(_SUITE, "GetSuite")})


def role_table() -> str:
    """The role table of docs/security.md ("Authentication"), written from PUBLIC_RPCS so the
    two never disagree (scripts/gen_role_table.py rewrites it; a test compares)."""

    def names(role: Role) -> list[str]:
        return [m.rsplit("/", 1)[1] for m, r in PUBLIC_RPCS.items() if r == role]

    suite_wide = [m.rsplit("/", 1)[1] for m in PUBLIC_RPCS if m in ALL_NAMESPACE_RPCS]
    rows = [
        ("reader", ", ".join(names(Role.READER))),
        ("writer", "reader's, plus " + ", ".join(names(Role.WRITER))),
        (
            "admin",
            "everything: writer's, plus "
            + ", ".join(names(Role.ADMIN))
            + f" ({', '.join(suite_wide)} act on every namespace, so they need a key for `*`)",
        ),
    ]
    return "\n".join(
        ["| role | may call |", "|---|---|", *(f"| `{role}` | {text} |" for role, text in rows)]
    )


# Open to everyone: orchestrators probe health without credentials.
OPEN_PREFIXES = ("/grpc.health.v1.Health/",)
# Any valid key (so grpcurl can list and describe with -H 'authorization: Bearer …').
REFLECTION_PREFIXES = (
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


@dataclass(frozen=True)
class Principal:
    """Who is calling: a key from the keys file, or the services' own credential."""

    name: str
    role: Role
    namespaces: tuple[str, ...]
    service: bool = False

    def covers(self, namespace: str) -> bool:
        return any(pattern_covers(pattern, namespace) for pattern in self.namespaces)


SERVICE = Principal(SERVICE_NAME, Role.ADMIN, (ALL_NAMESPACES,), service=True)

# The caller of the RPC being served (set by the interceptor when auth is on).
principal_var: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "principal", default=None
)


def acting(claimed: str) -> str:
    """The actor recorded in a mutation's history: the key's name when a key made
    the call, else what the request (or the calling service) says."""
    principal = principal_var.get()
    if principal is None or principal.service:
        return claimed
    return principal.name


# ---- the keys file ------------------------------------------------------------------


class KeyRequestError(ValueError):
    """A bad `engram keys` request (the message says what to fix)."""


@dataclass(frozen=True)
class KeyRecord:
    name: str
    role: Role
    namespaces: tuple[str, ...]
    key_id: str
    key_hash: str
    created_at: str
    revoked_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role.name.lower(),
            "namespaces": list(self.namespaces),
            "key_id": self.key_id,
            "sha256": self.key_hash,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> KeyRecord:
        return cls(
            name=str(item["name"]),
            role=Role[str(item["role"]).upper()],
            namespaces=tuple(str(p) for p in item["namespaces"]),
            key_id=str(item["key_id"]),
            key_hash=str(item["sha256"]),
            created_at=str(item["created_at"]),
            revoked_at=None if item.get("revoked_at") is None else str(item["revoked_at"]),
        )


def keys_path(config: Config) -> Path:
    """`auth.keys_file`, or keys.json in the database's directory."""
    if config.auth.keys_file:
        return Path(config.auth.keys_file)
    return Path(config.storage.path).parent / KEYS_FILE_NAME


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _read(path: Path) -> list[KeyRecord]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    document = json.loads(text)
    return [KeyRecord.from_json(item) for item in document.get("keys", [])]


def _write(path: Path, records: Sequence[KeyRecord]) -> None:
    """Replace the file atomically (readers see the old or the new one, never half)."""
    text = json.dumps({"version": 1, "keys": [r.to_json() for r in records]}, indent=2)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".keys-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One `engram keys` edit at a time (a lock file beside the keys file). The
    directory is the database's by default: created private, as the store does."""
    path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_patterns(patterns: Sequence[str]) -> tuple[str, ...]:
    """Namespace patterns: exact names or `prefix*` (`*` alone: every namespace)."""
    if not patterns:
        raise KeyRequestError("give at least one --namespace (an exact name, `prefix*`, or `*`)")
    for pattern in patterns:
        if not pattern or not _PATTERN.fullmatch(pattern):
            raise KeyRequestError(
                f"namespace pattern {pattern!r}: use a namespace name ([A-Za-z0-9._:-]) "
                "optionally ending in `*`"
            )
    return tuple(patterns)


def create_key(
    path: Path, role: str, namespaces: Sequence[str], name: str | None = None
) -> tuple[KeyRecord, str]:
    """A new key: its record (saved) and the key itself (shown once, never stored)."""
    try:
        checked_role = Role[role.upper()]
    except KeyError:
        raise KeyRequestError(f"role {role!r}: use reader, writer or admin") from None
    patterns = check_patterns(namespaces)
    key_id = secrets.token_hex(8)
    key = f"{KEY_PREFIX}{key_id}_{secrets.token_hex(32)}"
    name = name or f"{checked_role.name.lower()}-{key_id[:8]}"
    if not _NAME.fullmatch(name):
        raise KeyRequestError(f"name {name!r}: use 1-64 of [A-Za-z0-9._-]")
    with _locked(path):
        records = _read(path)
        if any(r.name == name for r in records):
            raise KeyRequestError(f"a key named {name!r} exists already (names are never reused)")
        record = KeyRecord(name, checked_role, patterns, key_id, _digest(key), clock.now_text())
        _write(path, [*records, record])
    return record, key


def list_keys(path: Path) -> list[KeyRecord]:
    return _read(path)


def revoke_key(path: Path, name: str) -> KeyRecord:
    """Mark the key revoked (kept, so the name is not reused and the history reads)."""
    with _locked(path):
        records = _read(path)
        for index, record in enumerate(records):
            if record.name == name:
                if record.revoked_at is None:
                    record = KeyRecord(**{**record.__dict__, "revoked_at": clock.now_text()})
                    records[index] = record
                    _write(path, records)
                return record
    raise KeyRequestError(f"no key named {name!r}")


# ---- the per-process guard ------------------------------------------------------------


# what reading a damaged keys file raises (bad JSON, a missing field, a wrong role)
_UNREADABLE = (OSError, ValueError, KeyError, TypeError)


class _KeyTable:
    """The keys file as this process last read it, re-read when it changes."""

    def __init__(self, path: Path, reload_s: float) -> None:
        self._path = path
        self._reload_s = reload_s
        self._next_check = 0.0
        self._stamp: tuple[int, int, int] | None = None
        self._by_id: dict[str, tuple[KeyRecord, Principal]] = {}

    def find(self, key_id: str) -> tuple[KeyRecord, Principal] | None:
        """Known keys are re-checked every reload interval (a revocation shows
        within it); an unknown id looks at the file at once (one stat), so a key
        works as soon as `engram keys create` has printed it."""
        now = time.monotonic()
        record = self._by_id.get(key_id)
        if record is None or now >= self._next_check:
            self._next_check = now + self._reload_s
            self._refresh()
            record = self._by_id.get(key_id)
        return record

    def _refresh(self) -> None:
        try:
            st = self._path.stat()
            stamp: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_ino, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        try:
            records = _read(self._path)
        except _UNREADABLE as exc:
            # the file is replaced atomically, so this is a hand edit gone wrong:
            # keep the keys we had rather than lock everyone out (or let anyone in)
            log.error(
                "cannot read the keys file", extra={"path": str(self._path), "error": str(exc)}
            )
            return
        self._stamp = stamp
        self._by_id = {r.key_id: (r, Principal(r.name, r.role, r.namespaces)) for r in records}


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at


class Guard:
    """Authentication, rate limits and authorisation for one listener."""

    def __init__(self, settings: AuthSettings, keys_file: Path, *, internal: bool = False) -> None:
        self._table = _KeyTable(keys_file, settings.reload_ms / 1000)
        self._service_hash = _digest(settings.service_key) if settings.service_key else None
        self._limits: dict[Role, RoleRateLimit] = {
            Role.READER: settings.rate_limits.reader,
            Role.WRITER: settings.rate_limits.writer,
            Role.ADMIN: settings.rate_limits.admin,
        }
        self._buckets: dict[str, _Bucket] = {}
        self.internal = internal

    def method(self, method: str) -> MethodGuard | None:
        """The check for one RPC, built once when its handler is registered; None
        for RPCs open to everyone (health)."""
        if method.startswith(OPEN_PREFIXES):
            return None
        return MethodGuard(self, method)

    def authenticate(self, metadata: Any) -> Principal:
        presented = None
        for key, value in metadata or ():
            if key == AUTHORIZATION_KEY:
                presented = value if isinstance(value, str) else None
                break
        if not presented or not presented[: len(BEARER)].lower() == BEARER:
            raise Unauthenticated("missing API key: send `authorization: Bearer <key>` metadata")
        key = presented[len(BEARER) :].strip()
        digest = _digest(key)
        if self._service_hash is not None and hmac.compare_digest(digest, self._service_hash):
            return SERVICE
        match = _KEY.fullmatch(key)
        found = self._table.find(match.group(1)) if match else None
        if (
            found is None
            or not hmac.compare_digest(digest, found[0].key_hash)
            or found[0].revoked_at is not None
        ):
            raise Unauthenticated("invalid API key")
        return found[1]

    def take_token(self, principal: Principal) -> None:
        """One call from the key's token bucket, or RateLimited with the wait (the
        service credential has no bucket: `admit` lets it through first)."""
        limit = self._limits[principal.role]
        now = time.monotonic()
        bucket = self._buckets.get(principal.name)
        if bucket is None:
            bucket = self._buckets[principal.name] = _Bucket(float(limit.burst), now)
        bucket.tokens = min(float(limit.burst), bucket.tokens + (now - bucket.at) * limit.rate)
        bucket.at = now
        if bucket.tokens < 1.0:
            raise RateLimited((1.0 - bucket.tokens) / limit.rate)
        bucket.tokens -= 1.0


class MethodGuard:
    """The check for one RPC: `admit` from the call's metadata, then `check` every
    request message (each message of a client stream)."""

    def __init__(self, guard: Guard, method: str) -> None:
        self._guard = guard
        self._reflection = method.startswith(REFLECTION_PREFIXES)
        self._role = PUBLIC_RPCS.get(method)
        self._all_namespaces = method in ALL_NAMESPACE_RPCS
        self._suite_wide = method in SUITE_WIDE_READS

    def admit(self, metadata: Any) -> Principal:
        principal = self._guard.authenticate(metadata)
        if principal.service:
            return principal
        if self._guard.internal:  # the store's internal listener: reflection included
            raise PermissionDenied("this listener takes only the services' own credential")
        self._guard.take_token(principal)
        if self._reflection:
            return principal
        if self._role is None:  # an RPC outside the public table
            raise PermissionDenied("this RPC takes only the services' own credential")
        if principal.role < self._role:
            raise PermissionDenied(
                f"the key's role ({principal.role.name.lower()}) may not call this RPC "
                f"(needs {self._role.name.lower()})"
            )
        if self._all_namespaces and ALL_NAMESPACES not in principal.namespaces:
            raise PermissionDenied("this RPC acts on every namespace; the key must cover `*`")
        return principal

    def check(self, principal: Principal, request: Any) -> None:
        """The request's namespace (empty: the default one) against the key's patterns."""
        if principal.service or self._reflection or self._all_namespaces or self._suite_wide:
            return
        # a public request without a namespace field that is not suite-wide: refused;
        # one that names several (Recall's `namespaces`) needs every one covered
        names = named_namespaces(request)
        if names is None or not all(principal.covers(name) for name in names):
            raise PermissionDenied("the key does not cover the request's namespace")


# ---- protected mode --------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def server_guard(config: Config, host: str, *, internal: bool = False) -> Guard | None:
    """The guard for a listener on `host`, or None with auth off. A listener on
    anything but loopback with auth off refuses to start (protected mode, as in
    Redis) unless auth.allow_insecure_public_bind accepts the risk."""
    if config.auth.enabled:
        path = keys_path(config)
        try:
            _read(path)  # a damaged file stops the service here, not every call later
        except _UNREADABLE as exc:
            raise StartupError(f"cannot read the keys file {path}: {exc}") from exc
        return Guard(config.auth, path, internal=internal)
    if not is_loopback(host) and not config.auth.allow_insecure_public_bind:
        raise StartupError(
            f"refusing to listen on {host} with authentication off: set auth.enabled: true "
            "(ENGRAM_AUTH__ENABLED=true) and create keys with `engram keys create`, or set "
            "auth.allow_insecure_public_bind: true to accept that anyone who can reach "
            "this port can read and change every memory"
        )
    return None
