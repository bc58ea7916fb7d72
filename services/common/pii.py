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
import operator
import re
import string
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, cast

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
    "secret": "a secret (password, API key, private key or access token)",
    "iban": "an IBAN",
    "card": "a payment card number",
    "ssn": "a US social security number",
    "email": "an email address",
    "ip": "an IP address",
    "phone": "a phone number",
}

# ---- detectors ------------------------------------------------------------------

_EMAIL_NOT_AFTER = r"\w.+%-"  # an address never follows these (it would be a slice)
_EMAIL_BODY = (
    r"[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"
)
_EMAIL = re.compile(f"(?<![{_EMAIL_NOT_AFTER}])" + _EMAIL_BODY)
# The same, one character early: `re` skips to that character at C speed
# instead of trying every position (an address at offset 0 is tried on its own).
_EMAIL_AFTER = re.compile(f"[^{_EMAIL_NOT_AFTER}]" + _EMAIL_BODY)

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
_PHONE_SEPARATORS = str.maketrans("", "", "+ .-()")  # (deleted)
_PHONE_MIN_DIGITS = 8
_PHONE_MAX_DIGITS = 15  # E.164

# (the lookahead changes no match: it lets `re` give up early on shorter runs)
_CARD = r"(?<![\w.-])(?=[\d -]{13})(?:\d[ -]?){12,18}\d(?![\w-]|\.\d)"
_CARD_PREFIX = re.compile(r"^(?:4|5[1-5]|2[2-7]|3[47]|3[068]|6(?:011|5|4[4-9])|35|62)")

_IBAN = r"(?<![\w-])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![\w-])"
# ISO 13616 lengths of the countries most likely to turn up; others use 15-34.
_IBAN_LENGTH = {
    "AT": 20, "BE": 16, "CH": 21, "CZ": 24, "DE": 22, "DK": 18, "ES": 24, "FI": 18,
    "FR": 27, "GB": 22, "GR": 27, "HU": 28, "IE": 22, "IT": 27, "LU": 20, "NL": 18,
    "NO": 15, "PL": 28, "PT": 25, "SE": 24, "SK": 24, "TR": 26,
}  # fmt: skip

# ISO 13616's check: letters count as 10 (A) to 35 (Z)
_IBAN_LETTER_NUMBERS = str.maketrans(
    {letter: str(int(letter, 36)) for letter in string.ascii_letters}
)

_SSN = r"(?<![\w.-])(?:\d{3}-\d{2}-\d{4}|\d{3} \d{2} \d{4})(?![\w-]|\.\d)"

_IPV4 = r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)"
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
# The detectors of kinds made of digits, in PII_KINDS order.
_DIGIT_PATTERNS = {"iban": _IBAN, "card": _CARD, "ssn": _SSN, "ip": _IPV4, "phone": _PHONE}
_DIGIT_SINGLE = {kind: re.compile(pattern) for kind, pattern in _DIGIT_PATTERNS.items()}
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

# Labelled credentials: a password or key named by its label, the value after it
# (`password=hunter2`, `"pwd": "x"`, `passwd: letmein`, `Password is tiger7`,
# `DB_PASSWORD=...`, `api-key: ...`). Only the value is the finding (the label
# stays, so the redacted text still says what was there). How sure the value is
# depends on the form, so prose that merely names a password is left alone:
# - `=` (`:=`, `=>`), or a quoted label (JSON, YAML, a Python dict): any value;
# - `label: value`: a value that looks like a credential (a digit, a symbol, an
#   inner capital) or ends its line; for the everyday words pass/secret/token
#   as a whole label, only a quoted value or one of 6+ characters with letters
#   and digits or a symbol ("Token: 42", "secret: 3 eggs" are not secrets);
# - `label is value` (password-like labels only): a quoted value, one with
#   letters and digits (or a symbol), or a credential-looking value ending its
#   clause ("the password is wrong" and "is 8 characters long" are not).
# Placeholders (`***`, `<password>`, `${PASS}`, `[SECRET_1]`, null, none) are not
# values, so a redacted text gated again is unchanged.
_LABEL_WORD = (
    r"pass(?:word|wd|phrase|code)?|pwd|secret|token|api[_-]?key"
    r"|(?:access|secret|private|client|auth)[_-]?(?:key|secret|token)"
)
_LABELLED = re.compile(
    rf"(?P<label>(?:[A-Za-z0-9]+[_.-])*(?:{_LABEL_WORD}))(?![A-Za-z0-9_-])(?P<close>[\"']?)"
    r"(?P<sep>\s*(?::=|=>|[:=])\s*|\s+(?:is|was)(?:\s+now)?\s+)"
    r"(?:(?P<qv>[\"'`])(?P<quoted>[^\"'`\n]{1,256}?)(?P=qv)|(?P<bare>[^\s\"'`]{1,256}))",
    re.IGNORECASE,
)
_LABEL_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
_LABEL_STEMS = ("pass", "pwd", "secret", "token", "key")  # every _LABEL_WORD holds one
_WEAK_LABELS = frozenset({"pass", "secret", "token"})
_PASSWORD_LABEL = re.compile(r"(?:^|[_.-])(?:pass(?:word|wd|phrase|code)?|pwd)$", re.IGNORECASE)
_VALUE_TRAILER = ".,;:!?)]}>"
_NOT_VALUES = frozenset(
    {"null", "none", "nil", "true", "false", "undefined", "empty", "required", "optional",
     "n/a", "unset", "redacted", "hidden", "tbd"}
)  # fmt: skip
_PLACEHOLDER_VALUE = re.compile(
    r"\[[A-Z]+(?:_\d+)?\]|<[^<>]*>|\$\{[^{}]*\}|\{\{.*\}\}|%s|([*x•.#?-])\1*", re.IGNORECASE
)
_CLAUSE_END = re.compile(r"[.,;!?)\]]*[ \t]*(?:\r?\n|$)")
# The labels a "keyword-only" flag (seed 004 §1) is about: text that names a
# password or key without a value this module can tell apart. Nothing to redact,
# so only a policy that rejects secrets acts on it (it rejects).
_SECRET_KEYWORD = re.compile(
    r"(?<![A-Za-z0-9])(?:pass(?:word|wd|phrase|code)s?|pwds?|api[ _-]?keys?"
    r"|(?:access|auth)[ _-]?tokens?|(?:secret|private)[ _-]?keys?)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_KEYWORD_STEMS = ("pass", "pwd", "key", "token")


def _looks_like_credential(value: str) -> bool:
    return any(ch.isdigit() or not ch.isalnum() for ch in value) or any(
        ch.isupper() for ch in value[1:]
    )


def _letters_and_digits(value: str) -> bool:
    has_symbol = any(not ch.isalnum() for ch in value)
    return (any(ch.isalpha() for ch in value) and any(ch.isdigit() for ch in value)) or (
        has_symbol and len(value) >= 4
    )


def _labelled_at(text: str, start: int) -> Finding | None:
    """The labelled credential whose label starts at `start`, if its value is one."""
    match = _LABELLED.match(text, start)
    if match is None:
        return None
    opened = text[start - 1] if start and text[start - 1] in "\"'" else ""
    quoted_label = bool(match.group("close"))
    if quoted_label and match.group("close") != opened:
        return None  # `"password": x` and `password: x` (`'password: x` too), never `password": x`
    label = match.group("label").lower()
    weak = label in _WEAK_LABELS
    sep = match.group("sep").strip().lower()
    quoted = match.group("quoted")
    if quoted is not None:
        value_start = match.start("quoted")
        value = quoted.strip()
        if not value or (sep[:2] in ("is", "wa") and weak):
            return None
        value_start += quoted.index(value[0])
    else:
        bare = match.group("bare")
        if _PLACEHOLDER_VALUE.fullmatch(bare.rstrip(".,;:!?")):
            return None  # `[SECRET_1]`, `<password>`: its brackets are no trailer
        value = bare.rstrip(_VALUE_TRAILER)
        value_start = match.start("bare")
        if not value:
            return None
    if value.lower() in _NOT_VALUES or _PLACEHOLDER_VALUE.fullmatch(value):
        return None
    value_end = value_start + len(value)
    if quoted is None and not (quoted_label or sep in ("=", ":=", "=>")):
        clause_ends = _CLAUSE_END.match(text, value_end) is not None
        if sep == ":":
            sure = (
                _letters_and_digits(value) and len(value) >= 6
                if weak
                else _looks_like_credential(value) or clause_ends
            )
        else:  # is / was
            sure = bool(_PASSWORD_LABEL.search(label)) and (
                _letters_and_digits(value) or (_looks_like_credential(value) and clause_ends)
            )
        if not sure:
            return None
    return Finding("secret", value_start, value_end)


def _label_start(text: str, at: int) -> int:
    """Where the label holding position `at` starts (leading separators skipped)."""
    start = at
    while start and text[start - 1] in _LABEL_CHARS:
        start -= 1
    while start < at and text[start] in "_.-":
        start += 1
    return start


def _labelled(text: str) -> list[Finding]:
    """Labelled credentials, tried only at labels holding a stem (`str.find` on the
    lower-cased text: C speed)."""
    lower = text.lower()
    starts: set[int] = set()
    for stem in _LABEL_STEMS:
        at = lower.find(stem)
        while at >= 0:
            starts.add(_label_start(text, at))
            at = lower.find(stem, at + 1)
    return [f for start in sorted(starts) if (f := _labelled_at(text, start)) is not None]


def secret_keywords(text: str) -> int:
    """How many times `text` names a password or key (seed 004's keyword-only flag)."""
    lower = text.lower()
    if not any(stem in lower for stem in _KEYWORD_STEMS):
        return 0
    return sum(1 for _ in _SECRET_KEYWORD.finditer(text))


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


class Finding(NamedTuple):  # a tuple: cheaper to make than a frozen dataclass
    kind: str
    start: int
    end: int


_LUHN_DOUBLED = str.maketrans(string.digits, "0246813579")  # 2d, less 9 when over 9


def luhn_valid(number: str) -> bool:
    if number.isascii() and number.isdigit():  # digit sums as byte sums: C speed
        doubled = number[-2::-2].translate(_LUHN_DOUBLED)
        return (sum(number[::-2].encode()) + sum(doubled.encode()) - 48 * len(number)) % 10 == 0
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
    return int((iban[4:] + iban[:4]).translate(_IBAN_LETTER_NUMBERS)) % 97 == 1


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


def _ip_valid(text: str, value: str, start: int) -> bool:
    """`value`: an IP address's match, at `start` in `text`."""
    if ":" in value:
        if sum(1 for group in value.split(":") if group) < 3:
            return False  # "a::b", "12:30:45"-like runs are not worth a false positive
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            return False
        return True
    if _VERSION_CONTEXT.search(text, max(0, start - 12), start):
        return False
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


def _phone_valid(value: str) -> bool:
    """`value`: a match of _PHONE (digits and "+ .-()")."""
    digits = len(value.translate(_PHONE_SEPARATORS))
    return _PHONE_MIN_DIGITS <= digits <= _PHONE_MAX_DIGITS


def _card_valid(value: str) -> bool:
    """`value`: a match of _CARD (digits, each pair at most one " " or "-" apart)."""
    spaced, dashed = " " in value, "-" in value
    digits = value.replace(" ", "").replace("-", "") if spaced or dashed else value
    if not 13 <= len(digits) <= 19 or not _CARD_PREFIX.match(digits):
        return False
    if spaced and dashed:
        return False
    if spaced or dashed:  # printed cards group 4-4-4-4(-3) or, Amex and Diners, 4-6-5 / 4-6-4
        groups = [len(group) for group in value.split(" " if spaced else "-")]
        if groups[:4] != [4, 4, 4, 4] and groups not in ([4, 6, 5], [4, 6, 4]):
            return False
        if len(groups) > 5 or (len(groups) == 5 and groups[4] != 3):
            return False
    return luhn_valid(digits)


def _digit_valid(kind: str, text: str, value: str, start: int) -> bool:
    if kind == "iban":
        return iban_valid(value)
    if kind == "card":
        return _card_valid(value)
    if kind == "ssn":
        return ssn_valid(value)
    if kind == "ip":
        return _ip_valid(text, value, start)
    return _phone_valid(value)


# ---- where the detectors run ---------------------------------------------------
#
# Speed (bench/pii_bench.py: 4 KiB under 1 ms p50). Python's `re` costs 30-300 ns
# per character and pattern, so no detector's expression runs over the whole text.
# Cheap passes find where a value could be, and each detector's expression runs
# only there, with the same results as running it everywhere (tests/common/
# test_pii.py checks that against `scan_everywhere` on generated texts):
# - `str.translate` maps the text to a "shape" (digits to 0, capitals to A, token
#   characters to x), in which a literal-prefixed expression finds digit runs,
#   IBAN starts and long tokens several times faster than a character class can;
# - `str.find` finds "@", ":" and the labelled secrets' prefixes.
_SHAPE = str.maketrans(string.digits + string.ascii_uppercase, "0" * 10 + "A" * 26)
# A digit kind's value (an IBAN's aside) is made of digits and " .-()+" only and
# has at least seven characters from its first digit to its last (an IPv4 address
# 1.2.3.4; a phone number has _PHONE_MIN_DIGITS digits, an SSN 9, a card 13), so
# it lies in a run this finds; a leading "+" or "(" or a closing ")" is one more
# character on either side.
_DIGIT_RUN_SHAPE = re.compile(r"0[0 .()+-]{5,}0")
_IBAN_START_SHAPE = re.compile("AA00")  # two capitals, two digits
_NON_IBAN_KINDS = tuple(kind for kind in _DIGIT_PATTERNS if kind != "iban")
# Where a digit kind but an IBAN starts: after a non-word character other than "."
# (every one's lookbehind says so), and consuming that character lets `re` skip
# to the next one at C speed instead of trying each position (a value at offset 0
# is tried on its own).
_NON_IBAN_AFTER = re.compile(
    r"[^\w.](?=[\d+(])(?:"
    + "|".join(f"(?P<{k}>{_DIGIT_PATTERNS[k]})" for k in _NON_IBAN_KINDS)
    + ")"
)
# After kind K's match fails its check, the kinds after K in one anchored match
_NON_IBAN_LATER = {
    kind: re.compile(
        "|".join(f"(?P<{k}>{_DIGIT_PATTERNS[k]})" for k in _NON_IBAN_KINDS[index + 1 :])
    )
    for index, kind in enumerate(_NON_IBAN_KINDS[:-1])
}
_EMAIL_DOMAIN_RUN = re.compile(r"[A-Za-z0-9.-]*")  # the characters a domain has
_EMAIL_LOCAL_MAX = 64
_IPV6_MAX_CHARS = 39  # eight groups of four and seven colons
_IPV6_SEVEN_COLONS = 30  # at most this from an address's first colon to its seventh
# str.find per literal is C speed; one regex alternation of them is not
_SECRET_PREFIXES = (
    "AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
    "github_pat_", "xox", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "sk-", "AIza",
    "glpat-", "eyJ", "-----BEGIN",
)  # fmt: skip
# the six that start with "A" in one pass (the lookahead finds overlapping ones)
_SECRET_A_PREFIX = re.compile(
    "A(?=" + "|".join(p[1:] for p in _SECRET_PREFIXES if p.startswith("A")) + ")"
)
_SECRET_FOUND_PREFIXES = tuple(p for p in _SECRET_PREFIXES if not p.startswith("A"))
_SECRET_NO_UNDERSCORE = tuple(p for p in _SECRET_FOUND_PREFIXES if "_" not in p)
_TOKEN_ALPHABET = string.ascii_letters + string.digits + "+/_-"
_TOKEN_CHARS = frozenset(_TOKEN_ALPHABET + "=")
_TOKEN_RUN = re.compile(f"[{re.escape(_TOKEN_ALPHABET)}]{{{ENTROPY_MIN_CHARS},}}={{0,2}}")
_TOKEN_SHAPE = str.maketrans(_TOKEN_ALPHABET, "x" * len(_TOKEN_ALPHABET))
_TOKEN_RUN_SHAPE = re.compile("x" * ENTROPY_MIN_CHARS + "x*={0,2}")  # _TOKEN_RUN, shaped


def _digit_shape(text: str) -> str:
    shape = text.translate(_SHAPE)
    if not text.isascii():  # `\d` also matches other scripts' digits
        others = {ord(ch): "0" for ch in set(text) if ch.isdecimal() and not ch.isascii()}
        if others:
            shape = shape.translate(others)
    return shape


# ---- what each detector finds where it runs --------------------------------------
# (scan and scan_everywhere share these; they differ only in where they look)


def _secret_at(text: str, at: int) -> Finding | None:
    match = _SECRET.match(text, at)
    return None if match is None else Finding("secret", match.start(), match.end())


def _digit_at(
    text: str, at: int, endpos: int, kinds: tuple[str, ...] = tuple(_DIGIT_PATTERNS)
) -> Finding | None:
    """The first of `kinds` (in PII_KINDS order) whose expression matches at `at`
    and whose checksum or range check passes."""
    for kind in kinds:
        match = _DIGIT_SINGLE[kind].match(text, at, endpos)
        if match is not None and _digit_valid(kind, text, match.group(), at):
            return Finding(kind, match.start(), match.end())
    return None


def _ipv6_finding(text: str, match: re.Match[str]) -> Finding | None:
    return (
        Finding("ip", match.start(), match.end())
        if _ip_valid(text, match.group(), match.start())
        else None
    )


def _token_finding(text: str, start: int, end: int) -> Finding | None:
    """A run of token characters that looks random. Runs are maximal: the character
    after is never a token character; the one before is not either, unless a 24+
    run was cut by its `=` padding."""
    if start and text[start - 1] in _TOKEN_CHARS:
        return None
    return Finding("secret", start, end) if high_entropy_token(text[start:end]) else None


# ---- scan: each detector where a cheap pass says a value could be -----------------


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _secrets(text: str) -> list[Finding]:
    found = [f for m in _SECRET_A_PREFIX.finditer(text) if (f := _secret_at(text, m.start()))]
    # most prose has no "_": then the prefixes that have one need no search
    for prefix in _SECRET_FOUND_PREFIXES if "_" in text else _SECRET_NO_UNDERSCORE:
        at = text.find(prefix)
        while at >= 0:
            if (finding := _secret_at(text, at)) is not None:
                found.append(finding)
            at = text.find(prefix, at + 1)
    return found


def _digit_kinds(text: str) -> list[Finding]:
    """The digit kinds, left to right as one pass over the text would find them: at
    each position the first kind that matches and checks out, then on from its end.
    Only IBAN starts (letters) and digit runs (no letters) can hold a value, so
    only they are tried, in text order."""
    shape = _digit_shape(text)
    length = len(text)
    runs = _merged([(max(0, m.start() - 1), m.end() + 1) for m in _DIGIT_RUN_SHAPE.finditer(shape)])
    # IBAN starts as empty spans, tried before a run that starts after them
    places = [(m.start(), -1) for m in _IBAN_START_SHAPE.finditer(shape)]
    out: list[Finding] = []
    cursor = 0  # where the last value ended: nothing starts inside it
    for start, end in sorted(places + runs) if places else runs:
        hit: Finding | None
        if end < 0:
            if start >= cursor and (hit := _digit_at(text, start, length, ("iban",))):
                out.append(hit)
                cursor = hit.end
            continue
        # a value in the run ends by its end; the lookaheads read two characters on
        endpos = min(length, end + 2)
        position = start if start > cursor else cursor  # where a value may start
        if position == 0 and (hit := _digit_at(text, 0, endpos, _NON_IBAN_KINDS)):
            out.append(hit)
            position = cursor = hit.end
        while position < end:
            match = _NON_IBAN_AFTER.search(text, position - 1 if position else 0, endpos)
            if match is None or match.start() + 1 >= end:
                break
            at = match.start() + 1
            kind = match.lastgroup or ""  # the first kind that matches here
            value = match.group(kind)
            # when its check fails, the later kinds, as one pass would try them
            while not _digit_valid(kind, text, value, at):
                later = _NON_IBAN_LATER.get(kind)
                match = later.match(text, at, endpos) if later else None
                if match is None:
                    break
                kind = match.lastgroup or ""
                value = match.group(kind)
            hit = None if match is None else Finding(kind, at, at + len(value))
            if hit is None:
                position = at + 1
            else:
                out.append(hit)
                position = cursor = hit.end
    return out


def _emails(text: str) -> list[Finding]:
    """What `_EMAIL.finditer` finds: each "@" left to right, the local part at most
    64 characters before it, the domain as far as domain characters go."""
    found: list[Finding] = []
    cursor = 0
    at = text.find("@")
    while at >= 0:
        if at >= cursor:
            domain_end = _EMAIL_DOMAIN_RUN.match(text, at + 1).end()  # type: ignore[union-attr]
            endpos = min(len(text), domain_end + 1)
            start = max(cursor, at - _EMAIL_LOCAL_MAX)  # where the address may start
            if start == 0 and (match := _EMAIL.match(text, 0, endpos)):
                found.append(Finding("email", 0, match.end()))
                cursor = match.end()
            elif match := _EMAIL_AFTER.search(text, start - 1 if start else 0, endpos):
                found.append(Finding("email", match.start() + 1, match.end()))
                cursor = match.end()
        at = text.find("@", at + 1)
    return found


def _ipv6(text: str) -> list[Finding]:
    """What `_IPV6.finditer` finds and `_ip_valid` keeps: a valid address has "::"
    or seven colons close together, and a match starts only where a run of hex
    digits and colons does, so matching near those colons finds the same ones."""
    colons = []
    at = text.find(":")
    while at >= 0:
        colons.append(at)
        at = text.find(":", at + 1)
    hints = [a for a, b in itertools.pairwise(colons) if b == a + 1]
    hints += [
        colons[i] for i in range(len(colons) - 6) if colons[i + 6] - colons[i] <= _IPV6_SEVEN_COLONS
    ]
    if not hints:
        return []
    length = len(text)
    reach = _IPV6_MAX_CHARS + 2
    spans = _merged(sorted((max(0, h - reach), min(length, h + reach)) for h in hints))
    found: dict[int, Finding] = {}
    for start, end in spans:
        for match in _IPV6.finditer(text, start, end):
            # a match running into the window's end may be cut short; the ones
            # that hold a hint end well before it
            if (match.end() < end or end == length) and (f := _ipv6_finding(text, match)):
                found[f.start] = f
    return list(found.values())


def _tokens(text: str) -> list[Finding]:
    found = []
    for match in _TOKEN_RUN_SHAPE.finditer(text.translate(_TOKEN_SHAPE)):
        if (finding := _token_finding(text, match.start(), match.end())) is not None:
            found.append(finding)
    return found


def scan(text: str, *, unlabelled_tokens: bool = True) -> list[Finding]:
    """Every finding in `text`, non-overlapping, in text order (where two
    detectors claim the same characters, the earlier kind in PII_KINDS wins).
    `unlabelled_tokens` False leaves out the high-entropy token detector (see
    gate_identifier)."""
    found = _secrets(text) + _labelled(text) + _digit_kinds(text)
    if unlabelled_tokens:
        found += _tokens(text)
    if "@" in text:
        found += _emails(text)
    if ":" in text:
        found += _ipv6(text)
    return _without_overlaps(found)


def scan_everywhere(text: str) -> list[Finding]:
    """`scan` the slow, obvious way: every detector at every position. The
    reference `scan` must agree with (tests), never used on the write path."""
    found = [f for at in range(len(text)) if (f := _secret_at(text, at)) is not None]
    found += [
        f
        for at in range(len(text))
        if _label_start(text, at) == at and (f := _labelled_at(text, at)) is not None
    ]
    cursor = 0
    for at in range(len(text)):
        if at >= cursor and (digit := _digit_at(text, at, len(text))) is not None:
            found.append(digit)
            cursor = digit.end
    found += [Finding("email", m.start(), m.end()) for m in _EMAIL.finditer(text)]
    found += [f for m in _IPV6.finditer(text) if (f := _ipv6_finding(text, m)) is not None]
    found += [
        f for m in _TOKEN_RUN.finditer(text) if (f := _token_finding(text, m.start(), m.end()))
    ]
    return _without_overlaps(found)


_SPAN = operator.itemgetter(1, 2)  # a Finding's (start, end)


def _without_overlaps(found: list[Finding]) -> list[Finding]:
    """Highest-ranked kind first, each kept unless it overlaps one kept before."""
    in_order = sorted(found, key=_SPAN)
    if all(a.end <= b.start for a, b in itertools.pairwise(in_order)):
        return in_order  # the usual case: nothing to settle
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


def describe_keyword(count: int) -> str:
    times = "once" if count == 1 else f"{count} times"
    return (
        f"names a password or key without a value that can be redacted (secret, found "
        f"{times}) and the PII policy rejects secrets; remove it or write with "
        "pii_policy REDACT"
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
    acted_on = {kind: policy.action(kind) for kind in PII_KINDS}
    findings = [f for f in scan(text) if acted_on[f.kind] != "allow"]
    rejected = Counter(f.kind for f in findings if acted_on[f.kind] == "reject")
    # seed 004: a password or key named without a value to redact is rejected
    # by a policy that rejects secrets (redact has nothing to replace: kept)
    keywords = secret_keywords(text) if acted_on["secret"] == "reject" else 0
    if rejected or keywords:
        violations = [
            FieldViolation(field, describe(kind, count)) for kind, count in rejected.items()
        ]
        if keywords and not rejected["secret"]:
            violations.append(FieldViolation(field, describe_keyword(keywords)))
        first, *rest = violations
        raise PiiDetected(first.field, first.description, *rest)
    if not findings:
        return Gated(text, {})
    placeholders: dict[tuple[str, str], str] = {}
    per_kind: dict[str, int] = {}
    parts: list[str] = []
    position = 0
    for kind, start, end in findings:
        key = (kind, text[start:end])
        placeholder = placeholders.get(key)
        if placeholder is None:
            number = per_kind[kind] = per_kind.get(kind, 0) + 1
            placeholder = placeholders[key] = f"[{_PLACEHOLDER_NAME[kind]}_{number}]"
        parts.append(text[position:start])
        parts.append(placeholder)
        position = end
    parts.append(text[position:])
    return Gated("".join(parts), per_kind)


def gate_identifier(text: str, policy: PiiPolicy, field: str) -> str:
    """An identifier a caller chooses (a session id, a source id or type) through
    the policy: kept as given, or PiiDetected when the policy acts on a kind found
    in it, redact as well as reject. An identifier is never redacted: two session
    ids holding different secrets would both become `[SECRET_1]` and merge. Random
    looking is what an id is for (OpenAI's `thread_...`, Slack's ids), so the
    unlabelled-token detector is left out; prefixed keys, labelled passwords,
    emails and the other kinds count. A named keyword is no finding here either
    ("password-reset" is a fine session id)."""
    if not policy.inspects or not text:
        return text
    kinds = Counter(
        f.kind for f in scan(text, unlabelled_tokens=False) if policy.action(f.kind) != "allow"
    )
    if kinds:
        first, *rest = (
            FieldViolation(
                field,
                f"contains {_DESCRIPTION[kind]} ({kind}, found "
                f"{'once' if count == 1 else f'{count} times'}) and the PII policy "
                f"{policy.action(kind)}s it; an identifier is never redacted (two would "
                "become equal): choose one without it",
            )
            for kind, count in kinds.items()
        )
        raise PiiDetected(first.field, first.description, *rest)
    return text


_UNIFORM = {action: PiiPolicy.uniform(action) for action in PII_ACTIONS}


def scrubbed(text: str) -> str:
    """`text` (an error message, which may echo a caller's value) as a log line
    may carry it: every kind found redacted, whatever the namespace's policy."""
    return gate(text, _REDACT_ALL, "log").text


_REDACT_ALL = _UNIFORM["redact"]


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
