"""Bounded JSON and TOML parsing: the one way memoryd parses a document, whoever wrote it.

json and tomllib recurse once per level of nesting, so a 10 KB file of 5,000 `[` raises
RecursionError (not ValueError) from deep inside the parser, and every caller that expected a
ValueError for a bad file fell over. Here a document is measured first, in linear time and
outside its strings: over `max_bytes` or nested deeper than `max_depth` it is refused with
`OverLimit`, a ValueError, so that the caller's handling of a malformed file (name it, skip it,
do without it) covers it too. The files memoryd reads (its own state, Claude Code's settings
and transcripts, consult logs, record stores, the config) nest a few levels in practice.
"""

import json
import re
from itertools import accumulate
from typing import Any

from memoryd.model.lazyre import lazy

MAX_DEPTH = 128  # tomllib recurses ~3 frames a level and gives out near 340 levels at the top
MAX_BYTES = 64 << 20  # callers with a bound of their own pass it

# TOML: comments and the four kinds of string (a multi-line one may end in up to 5 quotes).
_TOML_SKIP = lazy(
    r'#[^\n]*|"""(?:[^"\\]|\\.|"(?!""))*+"""(?:""?)?|\'\'\'(?:[^\']|\'(?!\'\'))*+\'\'\'(?:\'\'?)?'
    r'|"(?:[^"\\\n]|\\.)*+"|\'[^\'\n]*\'',
    re.DOTALL,
)
_TOML_START = lazy(r"[#\"']")
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1, +1, -1, -1
_NOT_BRACKET = bytes(set(range(256)) - set(b"[{]}"))
_NOT_QUOTE_OR_BRACKET = bytes(set(range(256)) - set(b'"[{]}'))


class OverLimit(ValueError):
    """A document too large or too deeply nested to parse safely; the message says which."""


def loads(data: str | bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(data)`, refusing a document over `max_bytes` or `max_depth` (OverLimit).
    Raises ValueError for anything json does (OverLimit and JSONDecodeError are both)."""
    _check_size(len(data), max_bytes)
    # Fewer openings than the bound cannot nest past it (in UTF-16 or -32 bytes too, where
    # each `[` still is a 0x5B byte): most documents are measured no further.
    if isinstance(data, str):
        openings = data.count("[") + data.count("{")
    else:
        openings = data.count(b"[") + data.count(b"{")
    if openings > max_depth:
        _check_depth(_json_outside_strings(_utf8(data)), max_depth)
    try:
        return json.loads(data)
    except RecursionError:  # deep enough for a caller already deep in its own stack
        raise OverLimit(f"nested too deeply to parse (more than {max_depth} levels)") from None


def loads_toml(
    text: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH
) -> dict[str, Any]:
    """`tomllib.loads(text)`, refusing a document over `max_bytes` or `max_depth` (OverLimit,
    a ValueError, as is tomllib's TOMLDecodeError)."""
    import tomllib  # here, not at the top: most runs have no TOML to parse (~5 ms of start-up)

    _check_size(len(text), max_bytes)
    if text.count("[") + text.count("{") > max_depth:
        _check_depth(_toml_outside_strings(text).encode("utf-8", "surrogatepass"), max_depth)
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise OverLimit(f"nested too deeply to parse (more than {max_depth} levels)") from None
    _check_tables(data, max_depth)  # dotted keys nest without brackets, and without recursion
    return data


def _utf8(data: str | bytes) -> bytes:
    """The document as UTF-8 (json.loads also takes UTF-16 and -32 bytes): in UTF-8 no byte
    of another character is a bracket or a quote."""
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    encoding = json.detect_encoding(data)
    if encoding.startswith("utf-8"):
        return data
    return data.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")


def _json_outside_strings(raw: bytes) -> bytes:
    """The brackets of a JSON document that are outside its strings. The escaped backslashes
    go first (left to right, as the parser pairs them), then the escaped quotes, so that every
    quote left opens or closes a string; then all but quotes and brackets. Two quotes side by
    side enclose no bracket, and taking them out leaves every other quote's parity as it was:
    most strings go so, without a piece each. Of what is left, every other piece between
    quotes is inside a string (the last one too when a string is not closed: the parser stops
    there)."""
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in raw else raw
    reduced = unescaped.translate(None, _NOT_QUOTE_OR_BRACKET).replace(b'""', b"")
    return b"".join(reduced.split(b'"')[::2])


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise OverLimit(f"over {max_bytes} bytes ({size}): not parsed")


def _check_depth(raw: bytes, max_depth: int) -> None:
    """Refuse `raw` if its brackets nest deeper than `max_depth`. An unclosed bracket counts:
    the parser descends into it before it finds the end missing."""
    steps = raw.translate(_DEPTH_STEP, _NOT_BRACKET)
    deepest = max(accumulate(memoryview(steps).cast("b")), default=0)
    if deepest > max_depth:
        raise OverLimit(f"nested {deepest} levels deep (the most memoryd parses: {max_depth})")


def _toml_outside_strings(text: str) -> str:
    """`text` without its comments and strings, scanned once from left to right (an unclosed
    string keeps the rest: tomllib stops there anyway)."""
    kept: list[str] = []
    pos = 0
    while (start := _TOML_START.search(text, pos)) is not None:
        kept.append(text[pos : start.start()])
        skipped = _TOML_SKIP.match(text, start.start())
        if skipped is None:
            return "".join(kept) + text[start.start() :]
        pos = skipped.end()
    kept.append(text[pos:])
    return "".join(kept)


def _check_tables(data: dict[str, Any], max_depth: int) -> None:
    """Refuse parsed TOML whose tables and arrays nest deeper than `max_depth` (walked with a
    stack of its own, so the walk cannot recurse too deep either)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > max_depth:
            raise OverLimit(f"nested more than {max_depth} levels deep (dotted keys or tables)")
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
