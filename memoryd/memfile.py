"""Bytes of one memory file -> a Memory, a NotMemory, or a Problem. Never raises."""

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

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
    type: str  # one of MEMORY_TYPES, or "" when missing or unknown
    frontmatter: Frontmatter
    body: str
    sha256: str
    size: int
    modified: str = ""  # the frontmatter's `modified` or `last_verified`, as written

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


# --- YAML: strings only, no aliases ------------------------------------------------------------
class _StringOnlyLoader(yaml.SafeLoader):
    """Every scalar stays a string (no `no` -> False, no dates); aliases are refused (bombs)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "aliases are not allowed in memory frontmatter", event.start_mark
            )
        return super().compose_node(parent, index)


def _construct_str(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    return str(loader.construct_scalar(node))  # type: ignore[arg-type]


# Resolve every plain scalar as a string by removing the implicit resolvers; explicit tags
# (`!!int 3`) are refused by routing every known scalar tag to the string constructor.
_StringOnlyLoader.yaml_implicit_resolvers = {}
for _tag in (
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:timestamp",
    "tag:yaml.org,2002:binary",
    "tag:yaml.org,2002:str",
):
    _StringOnlyLoader.add_constructor(_tag, _construct_str)


def load_yaml_strings(text: str) -> Any:
    return yaml.load(text, Loader=_StringOnlyLoader)  # noqa: S506 - the loader is safe, see above


# --- the fast path: flat `key: value` lines ----------------------------------------------------
_FLAT_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*):(?:[ \t]+(.*?))?[ \t]*$")
# A plain scalar that YAML would read exactly as its text: no leading indicator, no `: ` or ` #`.
_PLAIN_SAFE = re.compile(r"^[^-?:,\[\]{}#&*!|>'\"%@`\s](?:(?!: | #)[^\t])*$")
_SINGLE_QUOTED = re.compile(r"^'((?:[^']|'')*)'$")
_DOUBLE_QUOTED = re.compile(r'^"([^"\\]*)"$')


def parse_flat(text: str) -> dict[str, str] | None:
    """Read frontmatter made only of flat `key: value` lines; None means ask the YAML loader."""
    out: dict[str, str] = {}
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        match = _FLAT_LINE.match(line)
        if match is None:
            return None
        key, value = match.group(1), match.group(2) or ""
        if key in out:
            return None  # let YAML decide what a duplicate key means
        if value == "":
            out[key] = ""
        elif (quoted := _SINGLE_QUOTED.match(value)) is not None:
            out[key] = quoted.group(1).replace("''", "'")
        elif (quoted := _DOUBLE_QUOTED.match(value)) is not None:
            out[key] = quoted.group(1)
        elif _PLAIN_SAFE.match(value) and value not in ("~",) and not value.endswith(":"):
            out[key] = value
        else:
            return None
    return out


_LENIENT_LINE = re.compile(r"^([ \t]*)([A-Za-z_][A-Za-z0-9_-]*):(?:[ \t]+(.*?))?[ \t]*$")
_STRUCTURE_START = "[{&*!|>%@`"


def parse_lenient(text: str) -> dict[str, Any] | None:
    """`key: value` lines (one level of nesting) that strict YAML rejects for their values.

    Agents write descriptions such as `avoid typing it as `: object`` or `"quoted" then more`:
    strict YAML refuses them, the agent itself reads them fine. Values are taken verbatim, but
    never when one opens a YAML structure (`[`, `{`, an anchor, a block scalar): then the author
    may have meant YAML, and the file is reported instead.
    """
    out: dict[str, Any] = {}
    nested: dict[str, str] | None = None
    for raw in text.split("\n"):
        line = raw.removesuffix("\r")
        if not line.strip():
            continue
        match = _LENIENT_LINE.match(line)
        if match is None:
            return None
        indent, key, value = match.group(1), match.group(2), match.group(3) or ""
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


def _hint_for_yaml(error: Exception) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:200]


def _split_frontmatter(text: str, max_fm_bytes: int) -> tuple[str, str] | str | None:
    """(frontmatter, body), or None when the file has none, or an error message."""
    if not text.startswith(("---\n", "---\r\n")):
        return None
    lines = text.split("\n")
    for i in range(1, min(len(lines), MAX_FRONTMATTER_LINES + 1)):
        if lines[i].rstrip("\r").rstrip() in ("---", "..."):
            fm = "\n".join(lines[1:i])
            if len(fm.encode("utf-8")) > max_fm_bytes:
                return f"frontmatter is larger than {max_fm_bytes} bytes"
            return fm, "\n".join(lines[i + 1 :])
    return f"frontmatter is not closed by '---' within {MAX_FRONTMATTER_LINES} lines"


def _text_field(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if isinstance(value, str):
        return " ".join(value.split())  # fold newlines and runs of space: an index line is one line
    return ""


def memory_type(data: Mapping[str, Any]) -> str:
    """`type` top-level, or nested as `metadata.type`; "" when missing or not one we know."""
    meta = data.get("metadata")
    for value in (data.get("type"), meta.get("type") if isinstance(meta, dict) else None):
        if isinstance(value, str) and value.strip().lower() in MEMORY_TYPES:
            return value.strip().lower()
    return ""


def parse_memory(
    filename: str,
    data: bytes,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_frontmatter_bytes: int = MAX_FRONTMATTER_BYTES,
) -> Parsed:
    """Turn a file's bytes into a value; every failure is a Problem naming what to do."""
    digest = hashlib.sha256(data).hexdigest()
    if len(data) > max_file_bytes:
        return Problem(
            filename,
            "too_large",
            f"file is {len(data)} bytes, over the {max_file_bytes} limit",
            "split it into smaller memories or raise parse.max_file_bytes",
            digest,
        )
    if b"\x00" in data[:8192]:
        return Problem(
            filename,
            "binary",
            "file holds binary data (NUL bytes)",
            "a memory must be UTF-8 text; move the file out of the memory dir",
            digest,
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return Problem(
            filename,
            "not_utf8",
            f"not UTF-8 text (byte {error.start})",
            "re-save the file as UTF-8",
            digest,
        )
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
    fm_text, body = split
    fields_: Any = parse_flat(fm_text)
    if fields_ is None:
        try:
            fields_ = load_yaml_strings(fm_text)
        except yaml.YAMLError as error:
            lenient = parse_lenient(fm_text)
            if lenient is not None:
                fields_ = lenient
            else:
                return Problem(
                    filename,
                    "bad_yaml",
                    f"frontmatter is not valid YAML: {_hint_for_yaml(error)}",
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
    modified = _text_field(fields_, "modified") or _text_field(fields_, "last_verified")
    return Memory(
        filename=filename,
        name=_text_field(fields_, "name"),
        description=_text_field(fields_, "description"),
        type=memory_type(fields_),
        frontmatter=fields_,
        body=body,
        sha256=digest,
        size=len(data),
        modified=modified,
    )
