"""Personal data and secrets in memory content (seed 004 §1): detect, then allow,
redact or reject, per kind.

Local and fast on purpose: Remember must never wait on the network, so every
detector is a regular expression plus a checksum or range check that weeds out
look-alikes (Luhn for cards, mod-97 for IBANs, the SSA's ranges for SSNs,
`ipaddress` for IPs, a measured entropy threshold for unlabelled tokens). A
detector misses rather than flags when unsure: a false positive rewrites or
refuses a user's memory.

Nothing here imports grpc or logs: a finding's value never leaves this module
except as the redacted text's placeholder.
"""

from __future__ import annotations

import bisect
import ipaddress
import itertools
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from services.common.config import PiiActionName, PiiKindActions, PiiSettings
from services.common.errors import FieldViolation, InvalidArgument

PiiAction = PiiActionName
PII_ACTIONS: tuple[PiiAction, ...] = ("allow", "redact", "reject")

# Every kind, in the order a span claimed by two detectors is given to (the
# more specific, checksummed one wins: an IBAN's digits are not a phone number).
PII_KINDS = ("secret", "iban", "card", "ssn", "email", "ip", "phone")

# Seed 004's default, raw-first and unsurprising: secrets are never kept, the
# rest is the user's own data and stays unless the namespace or request says.
DEFAULT_ACTIONS: Mapping[str, PiiAction] = {
    kind: ("redact" if kind == "secret" else "allow") for kind in PII_KINDS
}

_PLACEHOLDER_NAME = {
    "secret": "SECRET",
    "iban": "IBAN",
    "card": "CARD",
    "ssn": "SSN",
    "email": "EMAIL",
    "ip": "IP",
    "phone": "PHONE",
}
_DESCRIPTION = {
    "secret": "a secret (API key, private key or access token)",
    "iban": "an IBAN",
    "card": "a payment card number",
    "ssn": "a US social security number",
    "email": "an email address",
    "ip": "an IP address",
    "phone": "a phone number",
}

# ---- detectors ------------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![\w.+%-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"
)

# International: "+" and a country code, then 6-14 more digits in groups.
# National: NANP "(555) 123-4567" / "555-123-4567" / "555.123.4567" with one
# consistent separator; European trunk-prefixed "020 7946 0958", "06 12 34 56 78".
# Bare digit runs never match: they are order numbers, timestamps and ids; nor
# does a slice of a longer run of digit groups (an account number, an IBAN).
_PHONE = (
    r"(?<![\w+.:/-])(?<!\d )(?:"
    r"\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,6}"
    r"|\(\d{3}\) ?\d{3}[ .-]\d{4}"
    r"|\d{3}-\d{3}-\d{4}|\d{3}\.\d{3}\.\d{4}|\d{3} \d{3} \d{4}"
    r"|0\d{1,4}(?: \d{2,4}){2,4}"
    r")(?![\w.:/-]|\.\d| \d)"  # not a slice of a longer run of digit groups
)
_PHONE_MIN_DIGITS = 8
_PHONE_MAX_DIGITS = 15  # E.164

_CARD = r"(?<![\w.-])(?:\d[ -]?){12,18}\d(?![\w-]|\.\d)"
_CARD_PREFIX = re.compile(r"^(?:4|5[1-5]|2[2-7]|3[47]|3[068]|6(?:011|5|4[4-9])|35|62)")

_IBAN = r"(?<![\w-])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![\w-])"
# ISO 13616 lengths of the countries most likely to turn up; others use 15-34.
_IBAN_LENGTH = {
    "AT": 20, "BE": 16, "CH": 21, "CZ": 24, "DE": 22, "DK": 18, "ES": 24, "FI": 18,
    "FR": 27, "GB": 22, "GR": 27, "HU": 28, "IE": 22, "IT": 27, "LU": 20, "NL": 18,
    "NO": 15, "PL": 28, "PT": 25, "SE": 24, "SK": 24, "TR": 26,
}  # fmt: skip

_SSN = r"(?<![\w.-])(?:\d{3}-\d{2}-\d{4}|\d{3} \d{2} \d{4})(?![\w-]|\.\d)"

_IPV4 = r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)"
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
# The detectors of kinds made of digits, one pattern each, and all of them as one
# alternation in PII_KINDS order (one pass over the text instead of five).
_DIGIT_PATTERNS = {"iban": _IBAN, "card": _CARD, "ssn": _SSN, "ip": _IPV4, "phone": _PHONE}
_DIGIT_SINGLE = {kind: re.compile(pattern) for kind, pattern in _DIGIT_PATTERNS.items()}
_DIGIT_ANY = re.compile(
    r"(?<!\w)(?:" + "|".join(f"(?P<{k}>{p})" for k, p in _DIGIT_PATTERNS.items()) + ")"
)
_VERSION_CONTEXT = re.compile(r"(?:\bv|version|release|build)\s*$", re.IGNORECASE)

_SECRET = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|$)"
    r"|(?<![A-Za-z0-9])(?:"
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}"  # AWS access key ids
    r"|gh[pousr]_[A-Za-z0-9]{36,255}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{22,255}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,250}"  # Slack
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,247}"  # Stripe
    r"|sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,250}"  # OpenAI
    r"|sk-ant-[A-Za-z0-9_-]{20,250}"  # Anthropic
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"  # JWTs
    r")(?![A-Za-z0-9])",
    re.DOTALL,
)

# Unlabelled tokens: at least ENTROPY_MIN_CHARS of base64/url-safe characters with
# upper case, lower case and digits, whose Shannon entropy is at least
# ENTROPY_RATIO x log2(min(length, 62)) (the most a string that long over base62
# can have) and whose character class (upper/lower/digit/other) changes between
# at least CLASS_SWITCH_MIN of neighbouring characters (words in identifiers and
# paths keep one class for several characters; random text switches about 62 %
# of the time). Measured by bench/pii_entropy.py (bench/README.md, "PII"): random
# base62/base64 tokens of 24-64 characters are caught at 92-99 %, git SHAs, UUIDs,
# hex digests, long identifiers and paths flagged at 0 of 2,000 each.
ENTROPY_MIN_CHARS = 24
ENTROPY_RATIO = 0.84
CLASS_SWITCH_MIN = 0.45


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    start: int
    end: int


_NOT_DIGIT = re.compile(r"\D")


def _digits(text: str) -> str:
    return _NOT_DIGIT.sub("", text)


def luhn_valid(number: str) -> bool:
    total = 0
    for index, ch in enumerate(reversed(number)):
        digit = ord(ch) - 48
        if index % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def iban_valid(candidate: str) -> bool:
    iban = candidate.replace(" ", "")
    country = iban[:2]
    if not 15 <= len(iban) <= 34 or len(iban) != _IBAN_LENGTH.get(country, len(iban)):
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def ssn_valid(value: str) -> bool:
    """The SSA never issues area 000, 666 or 900-999, group 00 or serial 0000
    (`value`: ddd-dd-dddd or with spaces)."""
    area, group, serial = value[:3], value[4:6], value[7:]
    return area != "000" and area != "666" and area[0] != "9" and group != "00" and serial != "0000"


def shannon_entropy(text: str) -> float:
    length = len(text)
    return -sum(n / length * math.log2(n / length) for n in Counter(text).values())


def _char_class(ch: str) -> int:
    return 0 if ch.isupper() else 1 if ch.islower() else 2 if ch.isdigit() else 3


def class_switch_rate(text: str) -> float:
    classes = [_char_class(ch) for ch in text]
    return sum(a != b for a, b in itertools.pairwise(classes)) / (len(text) - 1)


def high_entropy_token(token: str) -> bool:
    body = token.rstrip("=")
    if len(body) < ENTROPY_MIN_CHARS:
        return False
    if not (
        any(c.isupper() for c in body)
        and any(c.islower() for c in body)
        and any(c.isdigit() for c in body)
    ):
        return False
    return (
        shannon_entropy(body) >= ENTROPY_RATIO * math.log2(min(len(body), 62))
        and class_switch_rate(body) >= CLASS_SWITCH_MIN
    )


def _ip_valid(text: str, match: re.Match[str]) -> bool:
    value = match.group()
    if ":" in value:
        if sum(1 for group in value.split(":") if group) < 3:
            return False  # "a::b", "12:30:45"-like runs are not worth a false positive
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            return False
        return True
    if _VERSION_CONTEXT.search(text, max(0, match.start() - 12), match.start()):
        return False
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


def _phone_valid(value: str) -> bool:
    digits = len(_digits(value))
    return _PHONE_MIN_DIGITS <= digits <= _PHONE_MAX_DIGITS


def _card_valid(value: str) -> bool:
    digits = _digits(value)
    if not 13 <= len(digits) <= 19 or not _CARD_PREFIX.match(digits):
        return False
    separators = {ch for ch in value if not ch.isdigit()}
    if len(separators) > 1:
        return False
    if separators:  # printed cards group 4-4-4-4(-3) or, Amex and Diners, 4-6-5 / 4-6-4
        groups = [len(group) for group in re.split(r"[ -]", value)]
        if groups[:4] != [4, 4, 4, 4] and groups not in ([4, 6, 5], [4, 6, 4]):
            return False
        if len(groups) > 5 or (len(groups) == 5 and groups[4] != 3):
            return False
    return luhn_valid(digits)


# Speed (bench/pii_bench.py: 4 KiB under 1 ms p50): each detector's regular
# expression runs only inside windows that a cheap scan found (Python's `re`
# costs about 100 ns per character and pattern when a pattern starts with a
# lookbehind, so nine full passes over 4 KiB would take several milliseconds):
# runs of digits for the digit kinds, "@" for emails, "::" or seven hex groups
# for IPv6, the literal prefixes for labelled secrets. Windows reach far enough
# around their hint for the longest match (an IBAN's letters before its digits)
# and a match must end before its window does, so a window never cuts one short.
_DIGIT_RUN = re.compile(r"\d[\d .()/-]{5,}\d")
# an IPv6 address has "::" or is a run of at least 15 hex digits and colons
_IPV6_FULL_HINT = re.compile(r"[0-9A-Fa-f:]{15,}")
# str.find per literal is C speed; one regex alternation of them is not
_SECRET_PREFIXES = (
    "AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
    "github_pat_", "xox", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "sk-", "AIza",
    "glpat-", "eyJ", "-----BEGIN",
)  # fmt: skip
_TOKEN_RUN = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_=-")


def _windows(
    spans: list[tuple[int, int]], before: int, after: int, length: int
) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        start, end = max(0, start - before), min(length, end + after)
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _matches(
    pattern: re.Pattern[str], text: str, windows: list[tuple[int, int]]
) -> list[re.Match[str]]:
    """`pattern`'s matches inside the windows; one that runs into a window's end
    (where the text goes on) is left out, as the window may have cut it."""
    out: list[re.Match[str]] = []
    length = len(text)
    for start, end in windows:
        for match in pattern.finditer(text, start, end):
            if end == length or match.end() < end - 2:
                out.append(match)
    return out


def _digit_valid(kind: str, text: str, match: re.Match[str]) -> bool:
    value = match.group()
    if kind == "iban":
        return iban_valid(value)
    if kind == "card":
        return _card_valid(value)
    if kind == "ssn":
        return ssn_valid(value)
    if kind == "ip":
        return _ip_valid(text, match)
    return _phone_valid(value)


def _digit_findings(text: str, start: int, end: int) -> list[Finding]:
    """The digit kinds inside one window: the first alternative that matches at
    a position is checked; when its checksum or range fails, the later kinds are
    tried at the same position, then the search goes on one character later."""
    out: list[Finding] = []
    whole = end == len(text)
    position = start
    while True:
        match = _DIGIT_ANY.search(text, position, end)
        if match is None:
            return out
        at = match.start()
        hit: re.Match[str] | None = None
        kind = match.lastgroup or ""
        if _digit_valid(kind, text, match):
            hit = match
        else:
            for other in list(_DIGIT_PATTERNS)[list(_DIGIT_PATTERNS).index(kind) + 1 :]:
                candidate = _DIGIT_SINGLE[other].match(text, at, end)
                if candidate is not None and _digit_valid(other, text, candidate):
                    hit, kind = candidate, other
                    break
        if hit is not None and (whole or hit.end() < end - 2):
            out.append(Finding(kind, hit.start(), hit.end()))
            position = hit.end()
        else:
            position = at + 1


def scan(text: str) -> list[Finding]:
    """Every finding in `text`, non-overlapping, in text order (where two
    detectors claim the same characters, the earlier kind in PII_KINDS wins)."""
    found: list[Finding] = []
    length = len(text)
    for prefix in _SECRET_PREFIXES:
        at = text.find(prefix)
        while at >= 0:
            secret = _SECRET.match(text, at)
            if secret is not None:
                found.append(Finding("secret", secret.start(), secret.end()))
            at = text.find(prefix, at + 1)
    digits = _windows([m.span() for m in _DIGIT_RUN.finditer(text)], 12, 24, length)
    for start, end in digits:
        found.extend(_digit_findings(text, start, end))
    if "@" in text:
        ats = [(m.start(), m.end()) for m in re.finditer("@", text)]
        for match in _matches(_EMAIL, text, _windows(ats, 66, 260, length)):
            found.append(Finding("email", match.start(), match.end()))
    if "::" in text or text.count(":") >= 7:
        hints = [(m.start(), m.end()) for m in re.finditer("::", text)]
        if text.count(":") >= 7:
            hints += [m.span() for m in _IPV6_FULL_HINT.finditer(text)]
        colons = _windows(sorted(hints), 40, 40, length)
        for match in _matches(_IPV6, text, colons):
            if _ip_valid(text, match):
                found.append(Finding("ip", match.start(), match.end()))
    for match in _TOKEN_RUN.finditer(text):
        # maximal runs: the character after is never a token character; the one
        # before is not either, unless a 24+ run was cut by its `=` padding
        if match.start() and text[match.start() - 1] in _TOKEN_CHARS:
            continue
        if high_entropy_token(match.group()):
            found.append(Finding("secret", match.start(), match.end()))
    return _without_overlaps(found)


def _without_overlaps(found: list[Finding]) -> list[Finding]:
    """Highest-ranked kind first, each kept unless it overlaps one kept before."""
    rank = {kind: index for index, kind in enumerate(PII_KINDS)}
    starts: list[int] = []  # the kept findings, ordered by start
    kept: list[Finding] = []
    for finding in sorted(found, key=lambda f: (rank[f.kind], f.start, -f.end)):
        at = bisect.bisect_left(starts, finding.start)
        if at < len(kept) and kept[at].start < finding.end:
            continue  # the next kept one starts inside this one
        if at and kept[at - 1].end > finding.start:
            continue  # the previous kept one runs into this one
        starts.insert(at, finding.start)
        kept.insert(at, finding)
    return kept


# ---- policy ------------------------------------------------------------------------


@dataclass(frozen=True)
class PiiPolicy:
    """What happens to each kind found (kinds not named: allowed)."""

    actions: Mapping[str, PiiAction]

    @classmethod
    def uniform(cls, action: PiiAction) -> PiiPolicy:
        return cls(dict.fromkeys(PII_KINDS, action))

    def action(self, kind: str) -> PiiAction:
        return self.actions.get(kind, "allow")

    @property
    def inspects(self) -> bool:
        return any(action != "allow" for action in self.actions.values())


DEFAULT_POLICY = PiiPolicy(DEFAULT_ACTIONS)


class PiiDetected(InvalidArgument):
    """Content holds a kind of personal data its policy rejects: one violation per
    kind, counting the values, never showing one."""

    reason = "PII_DETECTED"


def describe(kind: str, count: int) -> str:
    times = "once" if count == 1 else f"{count} times"
    return (
        f"contains {_DESCRIPTION[kind]} ({kind}, found {times}) and the PII policy "
        "rejects it; remove it or write with pii_policy REDACT"
    )


@dataclass(frozen=True)
class Gated:
    text: str
    redacted: Mapping[str, int]  # kind -> values replaced


def gate(text: str, policy: PiiPolicy, field: str) -> Gated:
    """`text` as the policy wants it stored; PiiDetected when it rejects a kind found.

    Redaction replaces each value with a typed placeholder (`[EMAIL_1]`); the same
    value gets the same placeholder throughout `text`."""
    if not policy.inspects:
        return Gated(text, {})
    findings = [f for f in scan(text) if policy.action(f.kind) != "allow"]
    if not findings:
        return Gated(text, {})
    rejected = Counter(f.kind for f in findings if policy.action(f.kind) == "reject")
    if rejected:
        first, *rest = (
            FieldViolation(field, describe(kind, count)) for kind, count in rejected.items()
        )
        raise PiiDetected(first.field, first.description, *rest)
    numbers: dict[tuple[str, str], int] = {}
    per_kind: Counter[str] = Counter()
    parts: list[str] = []
    position = 0
    for finding in findings:
        value = text[finding.start : finding.end]
        key = (finding.kind, value)
        if key not in numbers:
            per_kind[finding.kind] += 1
            numbers[key] = per_kind[finding.kind]
        parts.append(text[position : finding.start])
        parts.append(f"[{_PLACEHOLDER_NAME[finding.kind]}_{numbers[key]}]")
        position = finding.end
    parts.append(text[position:])
    return Gated("".join(parts), dict(per_kind))


_UNIFORM = {action: PiiPolicy.uniform(action) for action in PII_ACTIONS}


def _layer(below: PiiPolicy, setting: str | PiiKindActions) -> PiiPolicy:
    if isinstance(setting, str):
        return _UNIFORM[cast(PiiAction, setting)]
    named = {kind: getattr(setting, kind) for kind in PII_KINDS}
    return PiiPolicy(
        {kind: cast(PiiAction, named[kind] or below.action(kind)) for kind in PII_KINDS}
    )


class PiiGate:
    """Every namespace's policy, resolved once from `pii.*`: built-in default,
    then `pii.default_policy`, then `pii.namespaces.<name>`, each kind falling
    through to the level below when a level does not name it."""

    def __init__(self, settings: PiiSettings) -> None:
        self._default = _layer(DEFAULT_POLICY, settings.default_policy)
        self._namespaces = {
            name: _layer(self._default, setting) for name, setting in settings.namespaces.items()
        }

    def policy(self, namespace: str, requested: PiiAction | None = None) -> PiiPolicy:
        """A request's own policy (one action for every kind) wins over the namespace's."""
        if requested is not None:
            return _UNIFORM[requested]
        return self._namespaces.get(namespace, self._default)
