"""Secrets in memory text: where they are and of what kind, never what they are (pure).

Memories are loaded into every session and often synced: a credential in one is a leak.
`find(text)` gives each secret's line and kind, `mask(text)` the text with each secret replaced
by `[secret: <kind>]`, for anything memoryd shows or keeps. Nothing here returns or logs a value.

Why not the `detect-secrets` library: on the planted set of tests/secret_samples.py
(bench/bench_secrets.py; then 24 secrets, 26 look-alikes) detect-secrets 1.5.0 found 21 (no
Anthropic or Google key pattern) and flagged 6 look-alikes (sha256 digests, base64 of prose,
placeholders); this list found 24 and flagged none, starts in ~17 ms against ~130 ms and scans
1 MiB in ~0.13 s against ~3.3 s. Patterns are anchored on each provider's fixed prefix; only
secret-like assignments, a password in prose, an authorization header and a bare AWS secret key
fall back to an entropy or mixed-case check, so a `sha256:` digest is never a finding. The set
is now 41 secrets of 26 kinds and 42 look-alikes: recall 1.00, no false positive (it was
written with the patterns: a format missing from it is likely missed).

Every pattern is a plain regex without nested quantifiers, tried only on a text holding one of
its kind's plain-substring hints (assignments only just before a `:` or `=` with a keyword in
reach): linear at the 1 MiB file limit, ~0.1 ms for a typical 2 KB memory.
"""

import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from memoryd.model.lazyre import lazy


@dataclass(frozen=True, slots=True)
class Finding:
    """One secret: its 1-based line in the text and its kind (never its value)."""

    line: int
    kind: str

    def to_json(self) -> dict[str, object]:
        return {"line": self.line, "kind": self.kind}


class Kind(StrEnum):
    """A secret's kind, as a person reads it in `dirs --secrets`, `explain` and the log."""

    PRIVATE_KEY = "private key"
    AWS_ACCESS_KEY = "AWS access key id"
    AWS_SIGNING = "AWS secret access key"
    GITHUB = "GitHub token"
    GITLAB = "GitLab token"
    SLACK = "Slack token"
    SLACK_WEBHOOK = "Slack webhook URL"
    STRIPE_KEY = "Stripe live key"
    ANTHROPIC_KEY = "Anthropic API key"
    OPENAI_KEY = "OpenAI API key"
    GOOGLE_API_KEY = "Google API key"
    JWT = "JSON web token"
    URL_LOGIN = "password in a URL"
    ASSIGNMENT = "secret assignment"
    AZURE_KEY = "Azure account key"
    HTTP_AUTH = "HTTP authorization header"
    HUGGING_FACE = "Hugging Face token"
    GOOGLE_OAUTH = "Google OAuth client secret"
    TELEGRAM = "Telegram bot token"
    SENDGRID = "SendGrid API key"
    TWILIO = "Twilio auth token"
    NPM = "npm token"
    PYPI = "PyPI token"
    DIGITALOCEAN = "DigitalOcean token"
    SHOPIFY = "Shopify token"
    PROSE_PASSWORD = "password in prose"  # noqa: S105 - a kind's name


_BEGIN_KEY: Final = lazy(r"-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----")
_END_KEY: Final = lazy(r"-----END (?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----")

# (kind, hints, pattern): the value is group "v" when the pattern has one, else the whole
# match; a text holding none of the hints (plain substrings) is not searched for that kind.
# Order matters where prefixes overlap: sk-ant- before sk-.
_TOKENS: Final[tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...]] = (
    (
        Kind.AWS_ACCESS_KEY,
        ("AKIA", "ASIA", "ABIA", "ACCA"),
        lazy(r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}(?![A-Z0-9])"),
    ),
    (
        Kind.AWS_SIGNING,
        ("aws", "AWS", "Aws"),
        lazy(
            r"(?i:aws_?secret_?(?:access_?)?key)[\"']?\s*[:=]\s*[\"']?(?P<v>[A-Za-z0-9/+]{40})"
            r"(?![A-Za-z0-9/+])"
        ),
    ),
    # Unlabelled, as the console's credentials CSV and people's notes give it: 40 characters
    # of base64 on a line that names AWS or holds an access key id (see `_aws_pair`).
    (
        Kind.AWS_SIGNING,
        ("aws", "AWS", "Aws", "AKIA", "ASIA"),
        lazy(r"(?<![A-Za-z0-9/+=])(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"),
    ),
    (
        Kind.GITHUB,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        lazy(r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36,255}(?![A-Za-z0-9_])"),
    ),
    (
        Kind.GITHUB,
        ("github_pat_",),
        lazy(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{50,255}"),
    ),
    (Kind.GITLAB, ("glpat-",), lazy(r"(?<![A-Za-z0-9_-])glpat-[A-Za-z0-9_-]{20,64}")),
    (
        Kind.SLACK,
        ("xox", "xapp-"),
        lazy(r"(?<![A-Za-z0-9])(?:xox[abposre]|xapp)-[A-Za-z0-9-]{10,250}"),
    ),
    (
        Kind.SLACK_WEBHOOK,
        ("hooks.slack.com",),
        lazy(r"https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]{16,}"),
    ),
    (Kind.STRIPE_KEY, ("k_live_",), lazy(r"(?<![A-Za-z0-9_])[rs]k_live_[A-Za-z0-9]{16,247}")),
    (
        Kind.ANTHROPIC_KEY,
        ("sk-ant-",),
        lazy(r"(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{20,255}"),
    ),
    # sk- then 20+ characters; `_random` below keeps out words such as sk-learn-compatible.
    (
        Kind.OPENAI_KEY,
        ("sk-",),
        lazy(r"(?<![A-Za-z0-9_-])sk-(?!ant-)(?:proj-|svcacct-)?[A-Za-z0-9_-]{20,255}"),
    ),
    (
        Kind.GOOGLE_API_KEY,
        ("AIza",),
        lazy(r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}(?![A-Za-z0-9_-])"),
    ),
    (
        Kind.JWT,
        ("eyJ",),
        lazy(
            r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,4096}\.eyJ[A-Za-z0-9_-]{8,4096}"
            r"\.[A-Za-z0-9_-]{8,4096}"
        ),
    ),
    (
        Kind.AZURE_KEY,
        ("AccountKey=", "SharedAccessKey="),
        lazy(r"(?:Account|SharedAccess)Key=(?P<v>[A-Za-z0-9+/]{30,256}={0,2})"),
    ),
    (
        Kind.HTTP_AUTH,
        ("uthorization", "UTHORIZATION"),
        lazy(
            r"(?i:authorization)[\"']?[ \t]{0,8}[:=][ \t]{0,8}[\"']?(?i:basic|bearer|token)[ \t]+"
            r"(?P<v>[A-Za-z0-9+/._~-]{8,4096}={0,2})"
        ),
    ),
    (Kind.HUGGING_FACE, ("hf_",), lazy(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,40}(?![A-Za-z0-9_])")),
    (Kind.GOOGLE_OAUTH, ("GOCSPX-",), lazy(r"GOCSPX-[A-Za-z0-9_-]{24,40}")),
    (
        Kind.TELEGRAM,
        (":AA",),
        lazy(r"(?<![0-9])[0-9]{8,10}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])"),
    ),
    (
        Kind.SENDGRID,
        ("SG.",),
        lazy(r"(?<![A-Za-z0-9_])SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"),
    ),
    # 32 hex digits after "twilio" or "auth token" on the same line (an Account SID, `AC` and
    # 32 hex, is no secret: its digits follow a letter).
    (
        Kind.TWILIO,
        ("twilio", "Twilio", "TWILIO", "uth token", "uth_token", "UTH_TOKEN"),
        lazy(
            r"(?i:twilio|auth[ _-]token)[^\n]{0,80}?(?<![0-9A-Za-z])(?P<v>[0-9a-fA-F]{32})"
            r"(?![0-9A-Za-z])"
        ),
    ),
    (Kind.NPM, ("npm_",), lazy(r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])")),
    (Kind.PYPI, ("pypi-",), lazy(r"(?<![A-Za-z0-9_-])pypi-AgE[A-Za-z0-9_-]{50,300}")),
    (Kind.DIGITALOCEAN, ("_v1_",), lazy(r"do[opr]_v1_[0-9a-f]{64}")),
    (Kind.SHOPIFY, ("shp",), lazy(r"(?<![A-Za-z0-9_])shp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}")),
    # "the admin password is ...": the value must look generated (`_secret_value`).
    (
        Kind.PROSE_PASSWORD,
        ("assword", "ASSWORD", "assphrase"),
        lazy(
            r"(?i:password|passphrase)[^\n:=]{0,24}?\b(?i:is|was|to)[ \t]+(?i:now[ \t]+)?"
            r"[\"'`]?(?P<v>[^\s\"'`,;]{8,128})"
        ),
    ),
    (
        Kind.URL_LOGIN,
        ("://",),
        lazy(r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@]{1,128}:(?P<v>[^\s:/@]{3,128})@[\w.-]"),
    ),
)

# `password = ...`, `api_key: ...`, `"client_secret": "..."`: a secret-like name, then a value.
_ASSIGNMENT: Final = lazy(
    r"(?i)(?:(?<=[_-])|(?<![A-Za-z0-9]))"
    r"(?:password|passwd|pwd|pass|pgpassword|mysql_pwd|secret|secret[_-]?key|api[_-]?key|apikey"
    r"|access[_-]?key"
    r"|access[_-]?token|auth[_-]?token|refresh[_-]?token|bearer|token|client[_-]?secret"
    r"|private[_-]?key|credentials?)"
    r"[\"']?[ \t]{0,8}(?:[:=]|:=|=>)[ \t]{0,8}(?:bearer[ \t]+)?[\"'`]?(?P<v>[^\s\"'`,;]{8,256})"
)
_PLACEHOLDER: Final = lazy(
    r"(?i)^(?:<.*>|\$\{?[A-Z_][A-Z0-9_]*\}?|\{\{.*\}\}|%\(?\w+\)?s?|x{4,}|\*{3,}|\.{3,}"
    r"|(?:your|my|the|some|example|dummy|fake|sample|test|changeme|placeholder|redacted|"
    r"none|null|true|false|undefined|secret|password|env|process\.env|os\.environ)\b.*)$"
)
# Cheap substring hints: a text with none of them holds no secret these patterns find: a key
# block's, and each token kind's own, written as the tokens are (`AKIA`, `ghp_`; GitHub's are
# whole: "through" and "high" are in a fifth of descriptions). `_ASSIGNMENT` reads its names in
# any case (`PWD=`), so the precheck looks for every hint in the lowered text.
_HINTS: Final = ("PRIVATE KEY", *(hint for _, hints, _ in _TOKENS for hint in hints))
# Every name in `_ASSIGNMENT` holds one of these (pass/passwd/password: "ass"; api_key: "key").
_NAME_HINTS: Final = ("ass", "secret", "key", "token", "pwd", "bearer", "credential")
MASK: Final = "[secret: {kind}]"


def _trie(words: tuple[str, ...]) -> str:
    """A pattern finding any of `words`, one alternative per first character (`g(?:h|lpat)|...`):
    a flat alternation is tried literal by literal at every position (a tenth of a cold scan).
    A word that begins with a shorter one adds nothing: it is dropped."""
    heads: dict[str, list[str]] = {}
    for word in sorted(set(words)):
        heads.setdefault(word[0], []).append(word[1:])
    parts = []
    for head, tails in heads.items():
        rest = "" if "" in tails else _trie(tuple(tails))
        parts.append(re.escape(head) + rest)
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


# One C-level scan for "could this text hold a secret at all" (most memories cannot), and one
# per token kind. It searches the lowered text for every hint lowered: one `str.lower` is three
# times cheaper than a case-insensitive pattern (which loses the first-character scan).
_ANY_HINT: Final = lazy(_trie(tuple(sorted({h.lower() for h in (*_HINTS, *_NAME_HINTS)}))))
_TOKEN_HINTS: Final = tuple(
    (kind, lazy("|".join(map(re.escape, hints))), pattern) for kind, hints, pattern in _TOKENS
)
# Whether any token kind's hint is there at all: most texts past _ANY_HINT hold only a word
# such as "through" (`gh`) or "secret", and the searches per kind are then skipped.
_ANY_TOKEN_HINT: Final = lazy(_trie(tuple(h for _, hints, _ in _TOKENS for h in hints)))
_NOT_A_VALUE: Final = lazy(
    r"[a-z]+(?:[._-][a-z]+)*|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+"
    r"|[A-Za-z_][\w.]*\(.*"
)


def _random(value: str) -> bool:
    """Whether a token's tail looks generated, not written: digits and letters of both cases
    (an OpenAI key's body always has them; `sk-learn-compatible-estimators` has neither)."""
    return (
        any(c.isdigit() for c in value)
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
    )


def _secret_value(value: str) -> bool:
    """Whether an assigned value is a credential rather than a placeholder, a word, a path
    or a variable: long enough, not a placeholder, and high in entropy for its alphabet."""
    if _PLACEHOLDER.match(value):
        return False
    value = value.rstrip(".)]}>")
    if len(value) < 8 or _PLACEHOLDER.match(value):
        return False
    if "/" in value and not re.search(r"[A-Za-z0-9+/]{30,}", value):
        return False  # a path, not a base64 key
    if _NOT_A_VALUE.fullmatch(value):
        return False  # a word, a constant's name, an attribute chain, a call: `os.getenv(...)`
    hexish = re.fullmatch(r"[0-9a-fA-F]+", value) is not None
    classes = sum(
        (any(c.islower() for c in value), any(c.isupper() for c in value),
         any(c.isdigit() for c in value), any(not c.isalnum() for c in value))
    )  # fmt: skip
    if classes < 2 and not hexish:
        return False
    n = len(value)
    entropy = -sum(c / n * math.log2(c / n) for c in Counter(value).values())  # bits a char
    return entropy >= (3.0 if hexish else 3.3)


_AWS_BARE: Final = _TOKENS[2][2]  # the unlabelled AWS secret access key
_AWS_LINE: Final = lazy(r"(?i:\baws\b|aws_)|(?:AKIA|ASIA)[0-9A-Z]{16}")
_CHECKED_VALUES: Final = (Kind.PROSE_PASSWORD, Kind.HTTP_AUTH)


def _plausible(kind: str, pattern: "re.Pattern[str]", value: str, text: str, at: int) -> bool:
    """The checks a kind's match takes beyond its pattern: a bare AWS secret looks generated
    on a line naming AWS or holding an access key id; an OpenAI key looks generated, a Hugging
    Face token has both cases; a URL's password, a password in prose or a header's credential
    is no word, placeholder or variable."""
    if pattern is _AWS_BARE:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        line = text[start : len(text) if end < 0 else end]
        return _random(value) and _AWS_LINE.search(line) is not None
    if kind == Kind.OPENAI_KEY:
        return _random(value)
    if kind == Kind.URL_LOGIN:
        return not _PLACEHOLDER.match(value)
    if kind == Kind.HUGGING_FACE:
        return any(c.isupper() for c in value) and any(c.islower() for c in value)
    if kind in _CHECKED_VALUES:
        return _secret_value(value)
    return True


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    kind: str


# The letters a case-insensitive pattern takes for an ASCII one that `str.lower` leaves alone
# (`paſſword`, `credentıal`).
_FOLD: Final = str.maketrans({"\u017f": "s", "\u0131": "i"})


def _lowered(text: str) -> str:
    """`text` lowered one character for one (positions stay those of `text`: `str.lower` makes
    `İ` two), with the letters `_ASSIGNMENT`'s case-insensitive names take folded to ASCII."""
    lower = text.lower()
    if lower.isascii():
        return lower
    if len(lower) != len(text):
        lower = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    return lower.translate(_FOLD)


def holds_no_hint(text: str) -> bool:
    """Whether the cheap precheck proves the text holds no secret (its hints hold no line
    break: for texts joined with one, it proves it of each)."""
    return _ANY_HINT.search(_lowered(text)) is None


def _spans(text: str) -> list[_Span]:
    """Every secret's character span and kind, by start, overlaps dropped (first wins)."""
    lower = _lowered(text)
    if _ANY_HINT.search(lower) is None:  # holds_no_hint, with the lowered text kept
        return []
    found: list[_Span] = []
    pos = 0
    while (begin := _BEGIN_KEY.search(text, pos)) is not None:
        end = _END_KEY.search(text, begin.end())
        stop = end.end() if end is not None else len(text)
        found.append(_Span(begin.start(), stop, Kind.PRIVATE_KEY))
        pos = stop
    for kind, hinted, pattern in _TOKEN_HINTS if _ANY_TOKEN_HINT.search(text) else ():
        if hinted.search(text) is None:
            continue
        for match in pattern.finditer(text):
            group = "v" if "v" in pattern.groupindex else 0
            if _plausible(kind, pattern, match.group(group), text, match.start(group)):
                found.append(_Span(match.start(group), match.end(group), kind))
    for match in _assignments(text, lower):
        if _secret_value(match.group("v")):
            found.append(_Span(match.start("v"), match.end("v"), Kind.ASSIGNMENT))
    found.sort(key=lambda s: (s.start, -s.end))
    out: list[_Span] = []
    for span in found:
        if out and span.start < out[-1].end:
            continue  # inside one already found (a key block, a token in an assignment)
        out.append(span)
    return out


_SEPARATOR: Final = lazy(r"[:=]")
_KEYWORDS: Final = ("pass", "pwd", "secret", "key", "token", "bearer", "credential")
_NAME_REACH: Final = 48  # the longest name + quote + blanks the assignment pattern takes
_VALUE_REACH: Final = 300  # ... and the longest separator + value after the name


def _assignments(text: str, lower: str | None = None) -> Iterator[re.Match[str]]:
    """What `_ASSIGNMENT.finditer(text)` gives, tried only just before a `:` or `=` with a
    keyword within reach (tried everywhere it was most of the scan). A match's separator is
    within `_NAME_REACH` of its start with none between, so each position is tried once, for
    the first separator after it: linear however dense the separators. `lower`: `_lowered`."""
    lower = _lowered(text) if lower is None else lower
    if not any(k in lower for k in _KEYWORDS):
        return
    done = 0  # matches do not overlap: none starts before the end of the last one
    tried = 0  # every position before this was tried already
    for sep in _SEPARATOR.finditer(text):
        at = sep.start()
        start = max(done, tried, at - _NAME_REACH)
        tried = max(tried, at + 1)
        if start >= at or not any(k in lower[start:at] for k in _KEYWORDS):
            continue
        end = min(len(text), at + _VALUE_REACH)
        for pos in range(start, at):
            match = _ASSIGNMENT.match(text, pos, end)
            if match is not None:
                done = tried = match.end()
                yield match
                break


def find(text: str) -> list[Finding]:
    """The secrets of a text: line (1-based) and kind of each, in order."""
    found, line, pos = [], 1, 0
    for span in _spans(text):
        line += text.count("\n", pos, span.start)
        pos = span.start
        found.append(Finding(line, span.kind))
    return found


def mask(text: str) -> str:
    """The text with every secret replaced by `[secret: <kind>]` (itself when it holds none)."""
    spans = _spans(text)
    if not spans:
        return text
    parts: list[str] = []
    pos = 0
    for span in spans:
        parts.append(text[pos : span.start])
        parts.append(MASK.format(kind=span.kind))
        pos = span.end
    parts.append(text[pos:])
    return "".join(parts)


def fingerprints(text: str) -> dict[str, str]:
    """sha256 of each secret's value -> its kind: whether two texts hold the same secret,
    told without holding either value (memoryd.versions.purge)."""
    import hashlib

    return {
        hashlib.sha256(text[span.start : span.end].encode()).hexdigest(): span.kind
        for span in _spans(text)
    }


def find_bytes(data: bytes) -> list[Finding]:
    """`find` over a file's bytes (decoded as memoryd reads memories: UTF-8, errors replaced)."""
    return find(data.decode("utf-8", "replace"))


def summary(findings: list[Finding]) -> str:
    """`line 3: AWS access key id, line 9: private key` (for a person; no value)."""
    return ", ".join(f"line {f.line}: {f.kind}" for f in findings)
