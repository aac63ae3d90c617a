"""Bytes of one memory file -> a Memory, a NotMemory, or a Problem. Never raises."""

import codecs
import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from memoryd.model.conflicts import HINT as CONFLICT_HINT
from memoryd.model.conflicts import conflict_line, conflict_message

MAX_FILE_BYTES = 1024 * 1024
MAX_FRONTMATTER_BYTES = 16 * 1024
MAX_FRONTMATTER_LINES = 30  # the closing `---` must come within this many lines
MEMORY_TYPES = frozenset({"user", "feedback", "project", "reference"})

Frontmatter = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Memory:
    """A parsed memory file: the frontmatter fields memoryd uses, the rest kept verbatim."""

    filename: str
    name: str
    description: str
    # One of MEMORY_TYPES or "": the protective reading (`protective_type`), which the guards
    # and the budget use; `agent_type` is the type as Claude Code reads it.
    type: str
    frontmatter: Frontmatter
    body: str
    sha256: str
    size: int
    modified: str = ""  # the newer of the frontmatter's `modified` and `last_verified`, as written
    agent_type: str = ""  # see `agent_type`: what duplicate and contradiction pairing use

    @property
    def display_name(self) -> str:
        return self.name or self.filename.removesuffix(".md")


@dataclass(frozen=True, slots=True)
class NotMemory:
    """A markdown file with no frontmatter (a README, a note): kept, never indexed by us."""

    filename: str
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class Problem:
    """A file memoryd will not act on; it stays where it is, with its index line."""

    filename: str
    kind: str
    message: str
    hint: str = ""
    sha256: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.filename}: {self.message}" + (f" ({self.hint})" if self.hint else "")


Parsed = Memory | NotMemory | Problem


# --- the fast path: flat lines and one indented block ---------------------------------------


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")


def _scalar(value: str) -> str | None:
    """A one-line scalar's string exactly as YAML reads it, or None when YAML must decide."""
    if value == "":
        return ""
    first = value[0]
    if first == "'":
        inner = value[1:-1]
        if len(value) >= 2 and value[-1] == "'" and "'" not in inner.replace("''", ""):
            return inner.replace("''", "'")
        return None
    if first == '"':
        inner = value[1:-1]
        if len(value) >= 2 and value[-1] == '"' and '"' not in inner and "\\" not in inner:
            return inner
        return None
    if first in _INDICATORS or first.isspace() or value == "~" or value.endswith(":"):
        return None
    if "\t" in value or ": " in value or " #" in value:
        return None
    return value


def _key_value(line: str) -> tuple[str, str] | None:
    key, colon, value = line.partition(":")
    if not colon or (value and value[0] not in " \t") or not _KEY.match(key):
        return None
    return key, value.strip(" \t")


def _flow_list(value: str) -> list[str] | None:
    """`[a, b]` of plain items with no `:`, quotes or brackets; None otherwise."""
    if not value.endswith("]"):
        return None
    inner = value[1:-1].strip(" ")
    if not inner:
        return []
    items = [item.strip(" ") for item in inner.split(",")]
    if any(not item or any(c in item for c in ":[]{}'\"") for item in items):
        return None
    out = [_scalar(item) for item in items]
    return None if any(v is None for v in out) else out  # type: ignore[return-value]


# The commonest frontmatter in one regex pass: each line `key: value`, `key:` opening a block,
# or an indented `key: value` in it; a value plain or double-quoted with no `"` or `\`. Any
# other line leaves `key` empty. No tab, CR or ` #`, and no `: ` in a plain value, are checked
# over the whole text instead (`_simple_lines`, `parse_flat`).
_SIMPLE_LINE = re.compile(
    r"^(?:( *)([A-Za-z_][A-Za-z0-9_-]*):"
    r"(?: +([^-?:,\[\]{}#&*!|>'\"%@`~\s].*(?<![: ]))| +(\"[^\"\\\n]*\"))?|.*)$",
    re.M,
)


def _simple_lines(text: str) -> tuple[dict[str, Any], int] | None:
    """The fields of frontmatter made only of _SIMPLE_LINE lines, and how many `: ` its lines
    hold outside plain values; None for any other frontmatter."""
    if "\t" in text or "\r" in text or " #" in text:
        return None  # a comment, or a value `_keep_hash_text` must see, is for YAML to decide
    out: dict[str, Any] = {}
    block: dict[str, str] | None = None  # the indented lines under the last `key:`
    block_key = indent = ""
    colons = 0  # `: ` the lines hold: one per valued line, plus any inside quoted values
    for lead, key, plain, quoted in _SIMPLE_LINE.findall(text):
        if not key:
            return None
        value = plain
        if quoted:
            value = quoted[1:-1]
            colons += 1 + value.count(": ")
        elif plain:
            colons += 1
        if lead:
            if block is None or key in block or (block and lead != indent):
                return None
            indent = lead
            block[key] = value
            continue
        if block is not None and not block:
            out[block_key] = ""  # `key:` with nothing under it
        if key in out:
            return None
        if plain or quoted:
            out[key] = value
            block = None
        else:
            out[key] = block = {}
            block_key = key
    if block is not None and not block:
        out[block_key] = ""
    return out, colons


def _yaml_refuses(text: str) -> bool:
    """Whether YAML is sure to refuse this frontmatter: simple lines, but a plain value holds
    `: ` (a second mapping value on one line), and no character YAML takes as a line break."""
    simple = _simple_lines(text)
    return (
        simple is not None
        and text.count(": ") > simple[1]
        and not any(c in text for c in "\x85\u2028\u2029")
    )


def parse_flat(text: str) -> dict[str, Any] | None:
    """Read simple frontmatter exactly as the YAML loader would; None means ask the loader.

    Simple: top-level `key: value` lines, a value a one-line scalar or a `[a, b]` list, or
    empty and followed by one indented block of `key: value` lines (`metadata:`) or `- item`
    lines (`related:`). Anything else (comments, multi-line scalars, anchors) is YAML's.
    """
    simple = _simple_lines(text)
    if simple is not None:
        # Unless a plain value holds `: `, which `_scalar` leaves to YAML.
        return simple[0] if text.count(": ") == simple[1] else None
    out: dict[str, Any] = {}
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    i, count = 0, len(lines)
    while i < count:
        line = lines[i]
        i += 1
        if not line.strip():
            continue
        pair = _key_value(line)
        if pair is None or pair[0] in out:
            return None  # an indented or odd line; or a duplicate key, for YAML to decide
        key, value = pair
        if value:
            parsed: Any = _flow_list(value) if value[0] == "[" else _scalar(value)
        else:
            block, i = _indented_block(lines, i)
            parsed = _block_value(block) if block else ""
        if parsed is None:
            return None
        out[key] = parsed
    return out


def _indented_block(lines: list[str], i: int) -> tuple[list[str], int]:
    """The non-blank lines of the indented block from line `i`, and the line after it."""
    block = []
    while i < len(lines) and (not lines[i].strip() or lines[i][0] == " "):
        if lines[i].strip():
            block.append(lines[i])
        i += 1
    return block, i


def _block_value(block: list[str]) -> list[str] | dict[str, str] | None:
    """An empty key's indented block: `- item` lines (a list) or `key: value` lines (a
    mapping); None for anything else (YAML decides)."""
    indent = len(block[0]) - len(block[0].lstrip(" "))
    if any(len(b) - len(b.lstrip(" ")) != indent for b in block):
        return None
    items = [b[indent:] for b in block]
    if all(item.startswith("- ") for item in items):
        values = [_scalar(item[2:].strip(" \t")) for item in items]
        return None if any(not v for v in values) else [v for v in values if v]
    nested: dict[str, str] = {}
    for item in items:
        pair = _key_value(item)
        if pair is None or pair[0] in nested:
            return None
        scalar = _scalar(pair[1])
        if scalar is None:
            return None
        nested[pair[0]] = scalar
    return nested


# `key:` after any indent; the value is read with str methods (a regex for it rescans a run of
# trailing blanks from each of its positions: 15 KB of frontmatter took a second).
_LENIENT_KEY = re.compile(r"([ \t]*)([A-Za-z_][A-Za-z0-9_-]*):")
_STRUCTURE_START = "[{&*!|>%@`"


def parse_lenient(text: str) -> dict[str, Any] | None:
    """`key: value` lines (one level of nesting) that strict YAML rejects for their values.

    Agents write descriptions such as `avoid typing it as `: object`` that YAML refuses and the
    agent reads fine. Values are taken verbatim, but never one that opens a YAML structure (`[`,
    `{`, an anchor, a block scalar): its author may have meant YAML, and it is reported.
    """
    out: dict[str, Any] = {}
    nested: dict[str, str] | None = None
    for raw in text.split("\n"):
        line = raw.removesuffix("\r")
        if not line.strip():
            continue
        match = _LENIENT_KEY.match(line)
        if match is None:
            return None
        indent, key = match.group(1), match.group(2)
        value = _value_after_key(line, match.end())
        if value is None:
            return None
        if value[:1] and value[0] in _STRUCTURE_START:
            return None
        if indent:
            if nested is None or key in nested or not value:
                return None
            nested[key] = value
            continue
        if key in out:
            return None
        if value:
            out[key] = value
            nested = None
        else:
            nested = {}
            out[key] = nested
    return {k: ("" if v == {} else v) for k, v in out.items()}


def _value_after_key(line: str, at: int) -> str | None:
    """The value after the key ending at `at`, stripped; None when no blank follows the `:`."""
    rest = line[at:]
    if rest and rest[0] not in " \t":
        return None
    return rest.strip(" \t")


_TOP_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*:")
_NOT_PLAIN_START = frozenset("'\"[{&*!|>#")


def _keep_hash_text(fields: dict[str, Any], fm_text: str) -> None:
    """`description: review of #2041 dedup` means the whole text, not a YAML comment: for
    top-level plain values the text as written wins over YAML's cut at ` #`."""
    for line in fm_text.split("\n"):
        line = line.removesuffix("\r")
        match = _TOP_KEY.match(line)
        if match is None or line[match.end() : match.end() + 1] not in (" ", "\t"):
            continue
        raw = _value_after_key(line, match.end()) or ""
        # A plain value (not quoted, no structure, no comment alone) with ` #` inside it.
        if not raw or raw[0] in _NOT_PLAIN_START or raw[0].isspace() or raw.find(" #", 1) < 0:
            continue
        key = match.group(0)[:-1]
        value = fields.get(key)
        if isinstance(value, str) and raw.startswith(value.rstrip()) and raw != value:
            fields[key] = raw


# The usual header in one match: `---`, up to 29 lines that begin with a letter, `_` or a space
# (so none of them can close it), then the closing line.
_USUAL_HEADER = re.compile(r"---\n((?:[A-Za-z_ ][^\n]*\n){0,29})(?:---|\.\.\.)[^\S\n]*(?:\n|\Z)")


def _split_frontmatter(text: str, max_fm_bytes: int) -> tuple[str, int] | str | None:
    """(frontmatter, where the body starts), or None when the file has none, or an error message."""
    usual = _USUAL_HEADER.match(text)
    if usual is not None:
        fm, body_start = text[4 : max(4, usual.end(1) - 1)], usual.end()
    else:
        found = _find_closing(text)
        if found is None or isinstance(found, str):
            return found
        fm, body_start = found
    # (A UTF-8 character is at most 4 bytes: most blocks need no count of their bytes.)
    if (
        len(fm) * 4 > max_fm_bytes
        and (len(fm) if fm.isascii() else len(fm.encode("utf-8"))) > max_fm_bytes
    ):
        return f"frontmatter is larger than {max_fm_bytes} bytes"
    return fm, body_start


def _find_closing(text: str) -> tuple[str, int] | str | None:
    """`_split_frontmatter` for any header: the first `---` or `...` line within 30."""
    if not text.startswith(("---\n", "---\r\n")):
        return None
    start = text.index("\n") + 1
    newline = start - 1
    while True:
        dash = text.find("\n---", newline)
        dots = text.find("\n...", newline, len(text) if dash < 0 else dash)
        newline = dots if dots >= 0 else dash
        if newline < 0 or text.count("\n", start, newline + 1) >= MAX_FRONTMATTER_LINES:
            return f"frontmatter is not closed by '---' within {MAX_FRONTMATTER_LINES} lines"
        end = text.find("\n", newline + 4)
        rest = text[newline + 4 :] if end < 0 else text[newline + 4 : end]
        if not rest or rest.isspace():
            break
        newline += 1
    return text[start : max(start, newline)], len(text) if end < 0 else end + 1


def _text_field(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        return ""
    # Most values are one line already: checking is cheaper than splitting and joining.
    if value.isprintable() and "  " not in value and value[:1] != " " and value[-1:] != " ":
        return value
    return " ".join(value.split())  # fold newlines and runs of space: an index line is one line


def merged_type(data: Mapping[str, Any]) -> str:
    """The type as Claude Code takes it from frontmatter fields: `metadata` merged over the top
    level (a `metadata.type`, even an empty one, beats a top-level `type`), then matched
    exactly against MEMORY_TYPES (`Project` or ` user` is no type to it); "" otherwise."""
    meta = data.get("metadata")
    value = meta["type"] if isinstance(meta, dict) and "type" in meta else data.get("type")
    return value if isinstance(value, str) and value in MEMORY_TYPES else ""


# The frontmatter as Claude Code finds it (2.1.332, `K0`): `^---\s*\n([\s\S]*?)---`, on the text
# without its BOM, only if a `---` follows the first three characters at all, within the first
# 30 lines its memory scan reads. So the block ends at the first `---` anywhere, even inside a
# value (`description: a --- b`), and a `...` line does not end it.
_AGENT_FRONTMATTER = re.compile(r"---\s*\n(.*?)---", re.DOTALL)
AGENT_SCAN_LINES = 30
# Most protective first: what the guards take where two readings disagree.
_PROTECTIVE_ORDER = ("user", "feedback", "reference", "project")


def _agent_region(text: str) -> str | None:
    """The frontmatter text Claude Code reads from a memory file (BOM already gone), or None."""
    end = -1
    for _ in range(AGENT_SCAN_LINES):
        end = text.find("\n", end + 1)
        if end < 0:
            break
    head = text if end < 0 else text[: end + 1]
    if head.find("---", 3) < 0:
        return None
    found = _AGENT_FRONTMATTER.match(head)
    return found.group(1) if found else None


def _fields_of(fm_text: str) -> dict[str, Any]:
    """A block's fields for a second reading; {} when they cannot be read."""
    fields = parse_flat(fm_text)
    if fields is None:
        from yaml import YAMLError

        from memoryd.model.yamlstrings import load_yaml_strings

        try:
            loaded = load_yaml_strings(fm_text)
        except (YAMLError, ValueError, RecursionError, MemoryError):
            loaded = parse_lenient(fm_text)
        fields = loaded if isinstance(loaded, dict) else {}
    return fields


def agent_type(text: str, fm_text: str, fields: Mapping[str, Any]) -> str:
    """The type Claude Code reads in a memory file of `text` (BOM gone), given memoryd's own
    frontmatter block `fm_text` and its `fields`: where both find the same block (no `---`
    inside, closed by a `---` line: nearly every file), memoryd's fields are Claude Code's."""
    closing = 5 + len(fm_text)  # after `---\n`, the block and its `\n`
    if (
        text.startswith("---", closing)
        and text.startswith("---\n")
        and "---" not in fm_text
        and fm_text.count("\n") < AGENT_SCAN_LINES - 2  # the closing line is among the 30
    ):
        return merged_type(fields)
    region = _agent_region(text)
    if region is None:
        return ""
    if "---" in fm_text or region.rstrip("\r\n") != fm_text.rstrip("\r\n"):
        fields = _fields_of(region)
    return merged_type(fields)


def protective_type(fields: Mapping[str, Any], agent: str) -> str:
    """The reading the guards take: of Claude Code's (`agent`) and the lenient ones (top-level
    `type` and `metadata.type`, any case), the most protective type any of them gives, so a
    `type: User` or a `metadata: {type: user}` under a top-level `type: project` is guarded
    as a user memory."""
    meta = fields.get("metadata")
    top = fields.get("type", agent)
    nested = meta.get("type", agent) if isinstance(meta, dict) else None if meta else agent
    if top == agent and nested == agent:
        return agent  # the usual file: one type, written exactly (top level or in metadata)
    readings = {agent}
    for value in (fields.get("type"), meta.get("type") if isinstance(meta, dict) else None):
        if isinstance(value, str):
            readings.add(value.strip().lower())
    return next((t for t in _PROTECTIVE_ORDER if t in readings), "")


def _parse(
    filename: str, data: bytes, max_file_bytes: int, max_frontmatter_bytes: int
) -> tuple[str, dict[str, Any], str, int, str] | NotMemory | Problem:
    """(sha256, fields, text, where the body starts, frontmatter text), or what it is instead."""
    digest = hashlib.sha256(data).hexdigest()
    text = _text_of(filename, data, max_file_bytes, digest)
    if isinstance(text, Problem):
        return text
    conflict = conflict_line(text)
    if conflict is not None:  # never read as a memory: its fields may be either side's
        return Problem(filename, "conflict", conflict_message(conflict), CONFLICT_HINT, digest)
    split = _split_frontmatter(text, max_frontmatter_bytes)
    if split is None:
        return NotMemory(filename, digest, len(data))
    if isinstance(split, str):
        return Problem(
            filename,
            "bad_frontmatter",
            split,
            "close the frontmatter with a '---' line near the top",
            digest,
        )
    fm_text, body_start = split
    fields_ = _frontmatter_fields(filename, fm_text, digest)
    if isinstance(fields_, Problem):
        return fields_
    return digest, fields_, text, body_start, fm_text


def _text_of(filename: str, data: bytes, max_file_bytes: int, digest: str) -> str | Problem:
    """The file's text, or why it is none: too large, binary, not UTF-8."""
    if len(data) > max_file_bytes:
        return Problem(
            filename,
            "too_large",
            f"file is {len(data)} bytes, over the {max_file_bytes} limit",
            "split it into smaller memories or raise parse.max_file_bytes",
            digest,
        )
    if data.find(b"\x00", 0, 8192) >= 0:
        return Problem(
            filename,
            "binary",
            "file holds binary data (NUL bytes)",
            "a memory must be UTF-8 text; move the file out of the memory dir",
            digest,
        )
    try:
        # What the utf-8-sig codec does (error offsets after the BOM too), without its
        # Python-level wrapper, which doubles the cost of decoding.
        return (data[3:] if data.startswith(codecs.BOM_UTF8) else data).decode("utf-8")
    except UnicodeDecodeError as error:
        return Problem(
            filename,
            "not_utf8",
            f"not UTF-8 text (byte {error.start})",
            "re-save the file as UTF-8",
            digest,
        )


def _frontmatter_fields(filename: str, fm_text: str, digest: str) -> dict[str, Any] | Problem:
    """The frontmatter's fields: read flat when it is simple, else by the YAML loader, else
    leniently (see parse_lenient); or why they cannot be read."""
    fields_: Any = parse_flat(fm_text)
    if fields_ is None and _yaml_refuses(fm_text):
        # What the loader's error below leads to, without running the loader to see it fail.
        fields_ = parse_lenient(fm_text)
    if fields_ is None:
        fields_ = _loaded(filename, fm_text, digest)
        if isinstance(fields_, Problem):
            return fields_
    if fields_ is None:
        fields_ = {}
    if not isinstance(fields_, dict):
        return Problem(
            filename,
            "bad_frontmatter",
            f"frontmatter is a {type(fields_).__name__}, not a mapping of keys",
            "write the frontmatter as 'key: value' lines",
            digest,
        )
    if " #" in fm_text:
        _keep_hash_text(fields_, fm_text)
    return fields_


def _loaded(filename: str, fm_text: str, digest: str) -> Any:
    """The frontmatter as the YAML loader reads it, else leniently; a Problem when neither can."""
    from yaml import YAMLError

    from memoryd.model.yamlstrings import hint_for_yaml, load_yaml_strings

    try:
        return load_yaml_strings(fm_text)
    except YAMLError as error:
        lenient = parse_lenient(fm_text)
        if lenient is not None:
            return lenient
        return Problem(
            filename,
            "bad_yaml",
            f"frontmatter is not valid YAML: {hint_for_yaml(error)}",
            "fix the YAML between the '---' lines",
            digest,
        )
    except (ValueError, RecursionError, MemoryError) as error:
        return Problem(
            filename,
            "bad_yaml",
            f"frontmatter cannot be loaded: {type(error).__name__}",
            "fix the YAML between the '---' lines",
            digest,
        )


class Summary(NamedTuple):
    """`parse_memory`'s fields but the body and frontmatter (a tenth of a cold scan's cost)."""

    sha256: str
    name: str
    description: str
    type: str  # the protective reading (see Memory.type)
    modified: str
    agent_type: str = ""


@functools.lru_cache(maxsize=4096)  # the few hundred days a dir's memories name, each parsed once
def parse_date(text: str) -> float:
    """A frontmatter date (`modified`, `last_verified`) as a UNIX time; 0 when it is not one."""
    if not text:
        return 0.0
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


_mask: Callable[[str], str] | None = None
_no_hint: Callable[[str], bool] | None = None


def mask(text: str) -> str:
    """model.secrets.mask, imported at the first memory parsed (a pass that parses none
    compiles no secret pattern)."""
    global _mask
    if _mask is None:
        from memoryd.model import secrets

        _mask = secrets.mask
    return _mask(text)


def _mask_both(name: str, description: str) -> tuple[str, str]:
    """`mask` of each, after one look at both for a hint of a secret (no hint spans a line)."""
    global _no_hint
    if _no_hint is None:
        from memoryd.model import secrets

        _no_hint = secrets.holds_no_hint
    if _no_hint(f"{name}\n{description}"):
        return name, description
    return mask(name), mask(description)


def _summarize(digest: str, fields: Mapping[str, Any], text: str, fm_text: str) -> Summary:
    """The frontmatter fields memoryd uses; a secret in the name or description is masked, as
    they go into pointer lines, the parse cache and search results."""
    name, description = _text_field(fields, "name"), _text_field(fields, "description")
    name, description = _mask_both(name, description)
    # Most memories have neither date: look before calling. With both, the newer one counts
    # (a memory verified last week is recent whatever its `modified` says).
    modified = _text_field(fields, "modified") if "modified" in fields else ""
    if "last_verified" in fields:
        verified = _text_field(fields, "last_verified")
        if not modified or parse_date(verified) > parse_date(modified):
            modified = verified
    agent = agent_type(text, fm_text, fields)
    return Summary(digest, name, description, protective_type(fields, agent), modified, agent)


def parse_memory(
    filename: str,
    data: bytes,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_frontmatter_bytes: int = MAX_FRONTMATTER_BYTES,
) -> Parsed:
    """Turn a file's bytes into a value; every failure is a Problem naming what to do."""
    parsed = _parse(filename, data, max_file_bytes, max_frontmatter_bytes)
    if not isinstance(parsed, tuple):
        return parsed
    digest, fields, text, body_start, fm_text = parsed
    summary = _summarize(digest, fields, text, fm_text)._asdict()
    return Memory(filename, frontmatter=fields, body=text[body_start:], size=len(data), **summary)


def parse_summary(
    filename: str,
    data: bytes,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_frontmatter_bytes: int = MAX_FRONTMATTER_BYTES,
) -> Summary | NotMemory | Problem:
    """`parse_memory` for the scanner: the same verdict, a Summary where that has a Memory."""
    parsed = _parse(filename, data, max_file_bytes, max_frontmatter_bytes)
    if not isinstance(parsed, tuple):
        return parsed
    return _summarize(parsed[0], parsed[1], parsed[2], parsed[4])
