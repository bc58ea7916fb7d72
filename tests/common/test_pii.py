"""The PII detectors: each finds its kind in realistic text and leaves the look-alikes
(order numbers, dates, timestamps, version strings, UUIDs, git SHAs) alone."""

from __future__ import annotations

import random
import string

import pytest

from services.common.config import ConfigError, PiiSettings, load_config
from services.common.pii import (
    DEFAULT_POLICY,
    PiiDetected,
    PiiGate,
    PiiPolicy,
    gate,
    iban_valid,
    luhn_valid,
    scan,
    scan_everywhere,
)


def found(text: str) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start : f.end]) for f in scan(text)]


POSITIVES = [
    ("email", "write to jane.doe+work@example.co.uk today", "jane.doe+work@example.co.uk"),
    ("email", "ops@mail.engram.dev.", "ops@mail.engram.dev"),
    ("phone", "call +44 20 7946 0958 after lunch", "+44 20 7946 0958"),
    ("phone", "call +1 (415) 555-2671", "+1 (415) 555-2671"),
    ("phone", "cell +491701234567", "+491701234567"),
    ("phone", "office (555) 123-4567", "(555) 123-4567"),
    ("phone", "office 555-123-4567", "555-123-4567"),
    ("phone", "office 555.123.4567", "555.123.4567"),
    ("phone", "Paris 06 12 34 56 78", "06 12 34 56 78"),
    ("card", "visa 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111"),
    ("card", "mc 5500-0055-5555-5559", "5500-0055-5555-5559"),
    ("card", "amex 378282246310005", "378282246310005"),
    ("iban", "pay DE89 3704 0044 0532 0130 00 now", "DE89 3704 0044 0532 0130 00"),
    ("iban", "GB82WEST12345698765432", "GB82WEST12345698765432"),
    ("ssn", "SSN 536-22-1234 on file", "536-22-1234"),
    ("ip", "server 192.168.1.20 is down", "192.168.1.20"),
    ("ip", "v6 2001:db8::8a2e:370:7334 up", "2001:db8::8a2e:370:7334"),
    ("ip", "fe80::1ff:fe23:4567:890a%eth0", "fe80::1ff:fe23:4567:890a"),
    ("secret", "aws AKIAIOSFODNN7EXAMPLE key", "AKIAIOSFODNN7EXAMPLE"),
    (
        "secret",
        "gh ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    ),
    (
        "secret",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv",
    ),
    ("secret", "slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    ("secret", "stripe sk_live_abcdefghijklmnop1234", "sk_live_abcdefghijklmnop1234"),
    (
        "secret",
        "openai sk-proj-abcdefghijklmnopqrstuvwx1234",
        "sk-proj-abcdefghijklmnopqrstuvwx1234",
    ),
    (
        "secret",
        "google AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    ),
    (
        "secret",
        "key -----BEGIN RSA PRIVATE KEY----- MIIEowIBAAKCAQEA -----END RSA PRIVATE KEY----- end",
        "-----BEGIN RSA PRIVATE KEY----- MIIEowIBAAKCAQEA -----END RSA PRIVATE KEY-----",
    ),
    (
        "secret",
        "cut -----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAA",
        "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAA",
    ),
    ("secret", "token Zx8Qp2LmN7vB4cR9tY1uW6sK3jH5gF0d here", "Zx8Qp2LmN7vB4cR9tY1uW6sK3jH5gF0d"),
]


@pytest.mark.parametrize(("kind", "text", "value"), POSITIVES)
def test_each_detector_finds_its_kind(kind: str, text: str, value: str) -> None:
    assert found(text) == [(kind, value)]


NEAR_MISSES = [
    "order #123456789012 shipped",  # order number: no separators, not a card prefix
    "order 4111111111111112",  # card prefix and length, Luhn fails
    "ref 1234 5678 9012 3456",  # grouped like a card, no issuer prefix
    "on 2024-01-15 at 12:30:45",  # date and time
    "build 20240115123045",  # compact timestamp
    "ts 1700000000 and 1700000000123",  # unix seconds / millis
    "logged 2024-01-15T12:30:45.123Z",  # ISO timestamp
    "released version 1.2.3.4",  # four-part version string
    "upgrade to v10.0.0.1",
    "python 3.11.4, node 20.10.0",
    "id 123e4567-e89b-12d3-a456-426614174000",  # UUID
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",  # git SHA
    "digest e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "ssn-like 000-12-3456, 666-12-3456, 912-12-3456, 123-00-4567, 123-45-0000",
    "not an ip 999.1.1.1 nor 1.2.3",
    "clock 12:30:45 and ratio 16:9",
    "mac 00:1A:2B:3C:4D:5E",
    "user@localhost and @mention and foo@bar",
    "IBAN-like DE89 3704 0044 0532 0130 01",  # checksum off by one
    "getUserAccountSettingsForTenant2024 and /usr/lib/python3.11/site-packages",
    "AbstractSingletonProxyFactoryBean ENGRAM_MEMORY__PIPELINEV2__MUTATIONSFROZEN",
    "sk-short and AKIA123",
    "room 555 1234",
    "price 1,234,567.89 EUR",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_not_flagged(text: str) -> None:
    assert found(text) == []


# Values, near misses and separators that the generated texts below are made of
# (and each value with one character changed): the fast scan must find exactly
# what every detector finds when tried at every position of the text.
_PIECES = [
    *(value for _, _, value in POSITIVES),
    *NEAR_MISSES,
    "+33 1 42 68 53 00", "+1 555 123 (4567)x", "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
    "020 7946 0958", "(555) 123-4567 x", "1:2:3:4:5:6:7:8", "::1",
    "ab@cd.ef@gh.ij", "NL91ABNA0417164300", "4111 1111 1111 1111 1234", "1.2.3.4.5",
    "١٢٣-٤٥-٦٧٨٩", "４１１１１１１１１１１１１１１１",
]  # fmt: skip
_NOISE = string.digits * 3 + " .-()+/:@=_,\n" + "ABDEGKZ" + "abcdxyz" + "é٣"


def _generated_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randrange(1, 16)):
        roll = rng.random()
        if roll < 0.4:
            parts.append(rng.choice(_PIECES))
        elif roll < 0.6:
            piece = rng.choice(_PIECES)
            at = rng.randrange(len(piece))
            parts.append(piece[:at] + rng.choice(_NOISE) + piece[at + 1 :])
        else:
            parts.append("".join(rng.choices(_NOISE, k=rng.randrange(1, 10))))
    return "".join(parts)


def test_the_fast_scan_finds_what_every_detector_finds_everywhere() -> None:
    rng = random.Random(18)
    for _ in range(1500):
        text = _generated_text(rng)
        assert scan(text) == scan_everywhere(text), text


def test_the_fast_scan_agrees_on_long_digit_dense_texts() -> None:
    rng = random.Random(4)
    for _ in range(20):
        text = "".join(rng.choices(string.digits * 4 + " .-()+:", k=600))
        assert scan(text) == scan_everywhere(text), text


def test_checksums() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("DE89370400440532013000") and not iban_valid("DE89370400440532013001")
    assert not iban_valid("DE8937040044053201300")  # German IBANs have 22 characters


def test_redaction_numbers_values_per_kind_and_repeats_the_same_placeholder() -> None:
    text = "a@x.io wrote to b@y.io and a@x.io; key AKIAIOSFODNN7EXAMPLE, ip 10.0.0.7"
    gated = gate(text, PiiPolicy.uniform("redact"), "content")
    assert gated.text == "[EMAIL_1] wrote to [EMAIL_2] and [EMAIL_1]; key [SECRET_1], ip [IP_1]"
    assert gated.redacted == {"email": 2, "secret": 1, "ip": 1}


def test_default_policy_redacts_secrets_and_keeps_the_rest() -> None:
    text = "mail a@x.io, key AKIAIOSFODNN7EXAMPLE"
    assert gate(text, DEFAULT_POLICY, "content").text == "mail a@x.io, key [SECRET_1]"


def test_rejection_names_each_kind_with_its_count_and_never_the_value() -> None:
    text = "a@x.io, b@y.io, 536-22-1234"
    with pytest.raises(PiiDetected) as caught:
        gate(text, PiiPolicy.uniform("reject"), "items[3].content")
    error = caught.value
    assert error.reason == "PII_DETECTED"
    assert [v.field for v in error.violations] == ["items[3].content"] * 2
    described = " ".join(v.description for v in error.violations)
    assert "email" in described and "2 times" in described and "ssn" in described
    assert "a@x.io" not in error.message and "536-22-1234" not in error.message


def test_mixed_policy_rejects_only_when_a_rejected_kind_is_present() -> None:
    policy = PiiPolicy({"email": "redact", "ssn": "reject"})
    assert gate("mail a@x.io", policy, "content").text == "mail [EMAIL_1]"
    with pytest.raises(PiiDetected):
        gate("mail a@x.io, ssn 536-22-1234", policy, "content")


def test_namespace_policies_layer_over_the_default_per_kind() -> None:
    config = load_config(
        environ={},
        overrides={
            "pii.default_policy": {"email": "redact"},
            "pii.namespaces": {"vault": "reject", "crm": {"phone": "reject"}},
        },
    )
    policies = PiiGate(config.pii)
    default = policies.policy("other")
    assert (default.action("email"), default.action("secret"), default.action("ip")) == (
        "redact",
        "redact",  # the built-in default still holds for kinds not named
        "allow",
    )
    crm = policies.policy("crm")
    assert (crm.action("phone"), crm.action("email"), crm.action("secret")) == (
        "reject",
        "redact",
        "redact",
    )
    assert policies.policy("vault").action("ip") == "reject"
    assert policies.policy("vault", "allow").action("secret") == "allow"  # a request's own wins


def test_pii_configuration_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"pii\.namespaces"):
        load_config(environ={}, overrides={"pii.namespaces": {"bad name!": "reject"}})
    with pytest.raises(ConfigError, match=r"pii\.default_policy"):
        load_config(environ={}, overrides={"pii.default_policy": "scrub"})
    with pytest.raises(ConfigError, match=r"pii\.default_policy"):
        load_config(environ={}, overrides={"pii.default_policy": {"passport": "reject"}})
    env = load_config(environ={"ENGRAM_PII__DEFAULT_POLICY": "reject"})
    assert env.pii.default_policy == "reject"
    assert PiiSettings().default_policy.secret is None  # type: ignore[union-attr]


# ---- labelled credentials (issue 34, item 8) ---------------------------------------

LABELLED = [
    ("password=hunter2", "hunter2"),
    ('{"pwd": "s3cr3t pass"}', "s3cr3t pass"),
    ("{'password': 'correct horse'}", "correct horse"),
    ("passwd: letmein", "letmein"),
    ("passwd: letmein\nuser: bob", "letmein"),
    ("Password is tiger7", "tiger7"),
    ("my password is now Hunter2 and the user is bob", "Hunter2"),
    ("DB_PASSWORD=abc123 and DB_USER=bob", "abc123"),
    ("export GITHUB_TOKEN=abcdef", "abcdef"),
    ("mysql --password=abc -u root", "abc"),
    ("api-key: 9f8e7d6c5b", "9f8e7d6c5b"),
    ("client_secret => 'x1y2z3'", "x1y2z3"),
    ("the wifi passcode: 1234.", "1234"),
    ("Token: abc123def", "abc123def"),
    ("secret = plainword", "plainword"),
    ("url ?token=q1w2e3&x=1", "q1w2e3&x=1"),
]


@pytest.mark.parametrize(("text", "value"), LABELLED)
def test_a_labelled_credential_is_a_secret_and_only_its_value_is(text: str, value: str) -> None:
    assert found(text) == [("secret", value)]
    redacted = gate(text, DEFAULT_POLICY, "content").text
    assert value not in redacted and "[SECRET_1]" in redacted
    assert gate(redacted, DEFAULT_POLICY, "content").text == redacted  # stable when gated again


LABEL_NEAR_MISSES = [
    "I forgot my password",
    "The password is wrong.",
    "The password is 8 characters long",
    "password: see the vault for it",
    "password: None",
    "password=*** and token=<token> and secret=${SECRET}",
    "password=[SECRET_1].",
    "Token: 42",
    "secret: 3 eggs and a pinch of salt",
    "the secret is love",
    "the token is valid",
    "max_tokens=100, token_count=5",
    "bypass=yes and compass: north",
    "keyboard: 3 keys",
    "pass: the ball to Anna",
    "passwords: rotate them quarterly",
]


@pytest.mark.parametrize("text", LABEL_NEAR_MISSES)
def test_prose_about_passwords_is_not_a_labelled_credential(text: str) -> None:
    assert found(text) == []
    assert gate(text, DEFAULT_POLICY, "content").text == text


def test_a_password_named_without_a_value_is_rejected_only_by_a_rejecting_policy() -> None:
    """Seed 004's keyword-only flag: nothing to redact, so REDACT keeps the text as
    written, and a policy that rejects secrets rejects it (with its own description)."""
    text = "I forgot my password and my API key"
    assert gate(text, PiiPolicy.uniform("redact"), "content").text == text
    with pytest.raises(PiiDetected) as caught:
        gate(text, PiiPolicy.uniform("reject"), "content")
    assert [(v.field, v.description) for v in caught.value.violations] == [
        (
            "content",
            "names a password or key without a value that can be redacted (secret, found "
            "2 times) and the PII policy rejects secrets; remove it or write with "
            "pii_policy REDACT",
        )
    ]
    # a labelled value is described as a secret found, never the keyword too
    with pytest.raises(PiiDetected) as caught:
        gate("password=hunter2", PiiPolicy.uniform("reject"), "content")
    assert [v.description.split(" (")[0] for v in caught.value.violations] == ["contains a secret"]
    assert "hunter2" not in caught.value.message
    # only the secret kind's action matters for the keyword
    assert gate(text, PiiPolicy({"secret": "redact", "email": "reject"}), "c").text == text
    assert gate("pass the salt, please", PiiPolicy.uniform("reject"), "c").text == (
        "pass the salt, please"
    )


def test_the_fast_scan_finds_labelled_credentials_as_trying_every_label_would() -> None:
    rng = random.Random(34)
    pieces = [*(text for text, _ in LABELLED), *LABEL_NEAR_MISSES, "Pass", "=", ": ", " is "]
    for _ in range(1000):
        parts = []
        for _ in range(rng.randrange(1, 8)):
            piece = rng.choice(pieces)
            if rng.random() < 0.3:
                at = rng.randrange(len(piece))
                piece = piece[:at] + rng.choice(_NOISE + "\"'_") + piece[at + 1 :]
            parts.append(piece)
        text = rng.choice(["", " ", "\n", "_"]).join(parts)
        assert scan(text) == scan_everywhere(text), text
