"""What a valid memory is: limits, types, prefixes and type inference (seed 002)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from services.common import clock
from services.common.errors import InvalidArgument, Violations, echo
from services.common.facts import MAX_CATEGORIES, MAX_CATEGORY_CHARS
from services.common.importance import DEFAULT_IMPORTANCE, effective_importance
from services.common.memory_record import MEMORY_TYPES
from services.common.normalize import NormalizedContent, is_blank, normalize_content
from services.common.pii import DEFAULT_POLICY, PiiPolicy, gate, gate_identifier
from services.common.validation import check_no_control, check_session_id

MAX_CONTENT_BYTES = 64 * 1024
MAX_TAGS = 32
MAX_TAG_CHARS = 64
MAX_TEXT_FIELD_CHARS = {"who": 256, "why": 1024, "source_type": 64, "source_id": 512}
MAX_REASON_CHARS = 1024
MAX_ACTOR_CHARS = 256
DEFAULT_ACTOR = "api"
# A short-term memory's ttl: positive, at most a leap year (seed 001's short
# term is hours; a longer life is a long-term memory, which has none).
MAX_TTL_NANOS = 366 * 24 * 3600 * 1_000_000_000

# seed 002 "Memory Types": the first matching row wins; no match means fact.
_TYPE_KEYWORDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (memory_type, re.compile(r"\b(?:" + "|".join(words) + r")\b", re.IGNORECASE))
    for memory_type, words in (
        ("preference", ("prefers", "likes", "wants")),
        ("decision", ("decided", "agreed", r"will\s+use")),
        ("rule", ("never", "always", "must")),
        ("learning", ("learned", "discovered")),
        ("issue", ("bug", "broken", "problem")),
    )
)
_CRITICAL_PREFIX = re.compile(r"^critical:\s*", re.IGNORECASE)
_TAGS_PREFIX = re.compile(r"^\[([^\]]*)\]:\s*")


@dataclass(frozen=True)
class MemoryDraft:
    """A validated, normalised memory ready to be written."""

    namespace: str
    content: NormalizedContent
    type: str
    importance: float
    tags: tuple[str, ...]
    pinned: bool
    who: str
    why: str
    source_type: str
    source_id: str
    event_time: str | None
    # the history actor when it is not `who` (the API key's name when auth is on)
    actor: str = ""
    session_id: str = ""  # "" for none
    ttl_nanos: int | None = None  # None: long-term
    categories: tuple[str, ...] = ()
    valid_from: str | None = None  # None: the event time
    valid_until: str | None = None  # None: still true
    # an import's instant of expiry (ImportItem.expire_time), instead of a ttl
    expire_at: str | None = None
    temporal_class: str = ""  # permanent | long_term | short_term; "" unclassified
    confidence: float = 1.0  # seed 003's stored confidence
    decay_rate: float | None = None  # None: memory.decay_rate_default

    @property
    def long_term(self) -> bool:
        """Never expires (no ttl, no expiry instant)."""
        return self.ttl_nanos is None and self.expire_at is None


def infer_type(content: str) -> str:
    for memory_type, pattern in _TYPE_KEYWORDS:
        if pattern.search(content):
            return memory_type
    return "fact"


def split_prefixes(content: str) -> tuple[str, bool, list[str]]:
    """`critical: [a,b]: text` -> ("text", pinned, ["a", "b"]); either prefix optional."""
    pinned = False
    tags: list[str] = []
    critical = _CRITICAL_PREFIX.match(content)
    if critical:
        pinned = True
        content = content[critical.end() :]
    tagged = _TAGS_PREFIX.match(content)
    if tagged:
        tags = [t for t in tagged.group(1).split(",") if t.strip()]
        content = content[tagged.end() :]
    return content, pinned, tags


def check_not_blank(text: str, field: str) -> str:
    """The one emptiness rule of every text that becomes a memory (Remember, Import,
    a patch, a turn, a document and each of its chunks): text showing nothing
    (whitespace and invisible format characters only, see `is_blank`) is refused,
    so no path creates a memory another path would refuse on import."""
    if is_blank(text):
        raise InvalidArgument(
            field, "must not be empty, whitespace or invisible format characters only"
        )
    return text


def check_content(
    text: str,
    field: str,
    normalized: NormalizedContent | None = None,
    *,
    pii: PiiPolicy = DEFAULT_POLICY,
) -> NormalizedContent:
    """The content as it will be stored: normalised, then through the PII gate
    (DESIGN.md data flow step 1), so every write that stores user content and
    checks it here redacts or rejects alike. `normalized` may pass in the text's
    normalisation when it is already known."""
    content = normalized or normalize_content(text)
    check_not_blank(content.storage, field)
    check_no_control(content.storage, field)
    gated = gate(content.storage, pii, field)
    if gated.redacted:
        content = normalize_content(gated.text)
    if len(content.storage.encode("utf-8")) > MAX_CONTENT_BYTES:
        raise InvalidArgument(field, f"must be at most {MAX_CONTENT_BYTES} bytes")
    return content


def check_type(memory_type: str, field: str) -> str:
    if memory_type not in MEMORY_TYPES:
        raise InvalidArgument(
            field, f"unknown type {echo(memory_type)}; one of {', '.join(MEMORY_TYPES)}"
        )
    return memory_type


MAX_DECAY_RATE = 10.0  # the bound of memory.decay_rate_default too


def check_decay_rate(rate: float, field: str) -> float:
    if not 0.0 <= rate <= MAX_DECAY_RATE:  # also rejects NaN
        raise InvalidArgument(field, f"must be between 0 and {MAX_DECAY_RATE:g} (0: never decays)")
    return rate


def check_confidence(confidence: float, field: str) -> float:
    if not 0.0 <= confidence <= 1.0:  # also rejects NaN
        raise InvalidArgument(field, "must be between 0 and 1")
    return confidence


def check_expiry(expire_at: str, field: str) -> str:
    """An expiry instant: ahead of now and at most MAX_TTL_NANOS ahead, like a ttl."""
    now = clock.now_text()
    if expire_at <= now:
        raise InvalidArgument(field, "expire_time has passed")
    if expire_at > clock.plus_nanos(now, MAX_TTL_NANOS):
        raise InvalidArgument(field, "must be at most 366 days ahead")
    return expire_at


def check_importance(importance: float, field: str) -> float:
    if not 0.0 <= importance <= 1.0:  # also rejects NaN
        raise InvalidArgument(field, "must be between 0 and 1")
    return importance


def check_tags(tags: Iterable[str], field: str, *, pii: PiiPolicy | None = None) -> tuple[str, ...]:
    """Trimmed, lower-cased, de-duplicated in first-seen order, within the limits
    (every bad tag is named). With `pii`, each tag passes the PII gate first (before
    lower-casing, which would hide a key's prefix)."""
    return _check_labels(tags, field, MAX_TAGS, MAX_TAG_CHARS, "tags", pii)


def check_categories(
    categories: Iterable[str], field: str, *, pii: PiiPolicy | None = None
) -> tuple[str, ...]:
    """Categories (seed 004 §6) are labels like tags, with the extraction's limits."""
    return _check_labels(categories, field, MAX_CATEGORIES, MAX_CATEGORY_CHARS, "categories", pii)


def _check_labels(
    labels: Iterable[str],
    field: str,
    max_count: int,
    max_chars: int,
    noun: str,
    pii: PiiPolicy | None,
) -> tuple[str, ...]:
    cleaned: dict[str, None] = {}
    bad = Violations()
    for index, tag in enumerate(labels):
        value = unicodedata.normalize("NFC", tag)
        with bad.collecting():
            check_no_control(value, f"{field}[{index}]")
        if bad.names(f"{field}[{index}]"):
            continue
        if pii is not None:
            with bad.collecting():
                value = _gated(value, f"{field}[{index}]", pii)
            if bad.names(f"{field}[{index}]"):
                continue  # rejected: nothing more to say about it
        value = value.strip().lower()
        if is_blank(value):
            bad.add(f"{field}[{index}]", "must not be empty")
        elif len(value) > max_chars:
            bad.add(f"{field}[{index}]", f"must be at most {max_chars} characters")
        else:
            cleaned.setdefault(value, None)
    if len(cleaned) > max_count:
        bad.add(field, f"at most {max_count} {noun}")
    bad.raise_if_any()
    return tuple(cleaned)


def check_text(value: str, field: str, limit: int, *, pii: PiiPolicy | None = None) -> str:
    """Trimmed and within `limit`; with `pii`, through the PII gate too (free text a
    caller fills, such as who and why, may carry personal data like the content)."""
    value = check_no_control(value.strip(), field)
    if pii is not None and value:
        value = _gated(value, field, pii)
    if len(value) > limit:
        raise InvalidArgument(field, f"must be at most {limit} characters")
    return value


def _gated(value: str, field: str, pii: PiiPolicy) -> str:
    return gate(value, pii, field).text


def check_ttl(nanos: int, field: str) -> int:
    if nanos <= 0:
        raise InvalidArgument(field, "must be positive (leave it unset for a long-term memory)")
    if nanos > MAX_TTL_NANOS:
        raise InvalidArgument(field, "must be at most 366 days")
    return nanos


def check_reason(reason: str, field: str, *, pii: PiiPolicy | None = None) -> str:
    """A change's reason: free text (kept in the history), through the PII gate
    when the caller knows the namespace's policy."""
    reason = check_text(reason, field, MAX_REASON_CHARS, pii=pii)
    if not reason:
        raise InvalidArgument(field, "a reason is required")
    return reason


def check_actor(actor: str, field: str = "actor") -> str:
    return check_text(actor, field, MAX_ACTOR_CHARS) or DEFAULT_ACTOR


@dataclass(frozen=True)
class MemoryFields:
    """What a caller asks to remember (a RememberRequest, an ImportItem, a turn),
    timestamps already read: the one input `draft_memory` checks."""

    namespace: str
    content: str
    type: str = ""  # "": inferred from the content
    importance: float | None = None  # None: the default
    tags: tuple[str, ...] = ()
    pinned: bool = False
    who: str = ""
    why: str = ""
    source_type: str = ""
    source_id: str = ""
    event_time: str | None = None
    # the history actor when it is not `who` (the API key's name when auth is on)
    actor: str = ""
    session_id: str = ""
    ttl_nanos: int | None = None
    # False keeps a leading `critical:` / `[tags]:` as text (conversation turns)
    prefixes: bool = True
    categories: tuple[str, ...] = ()
    valid_from: str | None = None
    valid_until: str | None = None
    expire_at: str | None = None  # an import's expire_time
    temporal_class: str = ""
    confidence: float | None = None
    decay_rate: float | None = None


def draft_memory(
    fields: MemoryFields, *, pii: PiiPolicy = DEFAULT_POLICY, field_prefix: str = ""
) -> MemoryDraft:
    """Validate one Remember/Import input; field names in errors get `field_prefix`;
    `pii`: the write's PII policy (the namespace's or the request's).

    Every bad field is named in one InvalidArgument (a parse step that found
    others takes all of them with Violations.check_all)."""
    bad = Violations()
    f = fields
    whole = normalize_content(f.content)
    body, critical, prefix_tags = (
        split_prefixes(whole.storage) if f.prefixes else (whole.storage, False, [])
    )
    unchanged = body == whole.storage  # no prefix: the first normalisation stands
    normalized = bad.check(
        whole, check_content, body, f"{field_prefix}content", whole if unchanged else None, pii=pii
    )
    all_tags = bad.check((), check_tags, [*prefix_tags, *f.tags], f"{field_prefix}tags", pii=pii)
    all_categories = bad.check(
        (), check_categories, f.categories, f"{field_prefix}categories", pii=pii
    )
    chosen_type = (
        bad.check("fact", check_type, f.type, f"{field_prefix}type")
        if f.type
        else infer_type(normalized.storage)
    )
    base = (
        DEFAULT_IMPORTANCE
        if f.importance is None
        else bad.check(
            DEFAULT_IMPORTANCE, check_importance, f.importance, f"{field_prefix}importance"
        )
    )
    is_pinned = f.pinned or critical
    # who and why are free text and pass the PII gate; source_type, source_id and
    # session_id are the caller's identifiers: stored as given, or refused when the
    # policy acts on what they hold (pii.gate_identifier: never redacted)
    texts = {
        name: bad.check(
            "",
            check_text,
            value,
            f"{field_prefix}{name}",
            MAX_TEXT_FIELD_CHARS[name],
            pii=pii if name in ("who", "why") else None,
        )
        for name, value in (
            ("who", f.who),
            ("why", f.why),
            ("source_type", f.source_type),
            ("source_id", f.source_id),
        )
    }
    for name in ("source_type", "source_id"):
        if texts[name]:
            bad.check("", gate_identifier, texts[name], pii, f"{field_prefix}{name}")
    if f.session_id:
        with bad.collecting():
            check_session_id(f.session_id, f"{field_prefix}session_id")
            gate_identifier(f.session_id, pii, f"{field_prefix}session_id")
    if f.ttl_nanos is not None:
        bad.check(None, check_ttl, f.ttl_nanos, f"{field_prefix}ttl")
    if f.expire_at is not None:
        if f.ttl_nanos is not None:
            bad.add(f"{field_prefix}expire_time", "give ttl or expire_time, not both")
        else:
            bad.check(None, check_expiry, f.expire_at, f"{field_prefix}expire_time")
    if f.confidence is not None:
        bad.check(1.0, check_confidence, f.confidence, f"{field_prefix}confidence")
    if f.decay_rate is not None:
        bad.check(None, check_decay_rate, f.decay_rate, f"{field_prefix}decay_rate")
    if f.valid_until is not None and f.valid_until <= (
        f.valid_from or f.event_time or clock.now_text()
    ):
        bad.add(
            f"{field_prefix}valid_until",
            "must be after valid_from (unset: event_time, itself now when unset)",
        )
    bad.raise_if_any()
    return MemoryDraft(
        namespace=f.namespace,
        content=normalized,
        type=chosen_type,
        importance=effective_importance(is_pinned, base),
        tags=all_tags,
        pinned=is_pinned,
        event_time=f.event_time,
        actor=f.actor,
        session_id=f.session_id,
        ttl_nanos=f.ttl_nanos,
        categories=all_categories,
        valid_from=f.valid_from,
        valid_until=f.valid_until,
        expire_at=f.expire_at,
        temporal_class=f.temporal_class,
        confidence=1.0 if f.confidence is None else f.confidence,
        decay_rate=f.decay_rate,
        **texts,
    )
