"""Claude Code's project slugs: the folder `projects/<slug>` it keys a path's auto memory by."""

import re
from pathlib import Path

from memoryd.config import Config

_NOT_SLUG = re.compile(r"[^A-Za-z0-9]")
SLUG_MAX = 200  # a longer slug is cut there and gets the path's hash


def _dashes(match: re.Match[str]) -> str:
    return "--" if ord(match.group()) > 0xFFFF else "-"  # two UTF-16 units: two dashes


def _string_hash(text: str) -> int:
    """JavaScript's `h = (h << 5) - h + unit` over the UTF-16 code units, kept to int32."""
    h = 0
    for char in text:
        code = ord(char)
        if code > 0xFFFF:  # a surrogate pair
            code -= 0x10000
            h = (h * 31 + 0xD800 + (code >> 10)) & 0xFFFFFFFF
            code = 0xDC00 + (code & 0x3FF)
        h = (h * 31 + code) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _base36(number: int) -> str:
    digits = ""
    while True:
        number, rest = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[rest] + digits
        if number == 0:
            return digits


def slugify(path: str) -> str:
    """Claude Code's project slug (lossy): each UTF-16 unit outside [A-Za-z0-9] becomes `-`;
    over 200 characters, the first 200, `-` and the base-36 of the path's absolute 32-bit
    string hash. No Unicode normalisation (as the client on Linux)."""
    slug = _NOT_SLUG.sub(_dashes, path)
    if len(slug) <= SLUG_MAX:
        return slug
    return f"{slug[:SLUG_MAX]}-{_base36(abs(_string_hash(path)))}"


def looked_in(repo: Path, config: Config) -> list[str]:
    """Where the memory dirs of a repo would be (for saying that it has none)."""
    claude = repo / ".claude"
    home = config.paths.claude_home / "projects" / slugify(str(repo)) / "memory"
    return [
        f"{claude / 'memory'}/",
        f"{claude / 'agent-memory'}/<agent>/",
        f"{claude / 'agent-memory-local'}/<agent>/",
        f"{home}/",
    ]
