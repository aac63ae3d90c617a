"""References in a memory body (paths, symbols), checked against a repo and classified."""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Literal

from memoryd.dream.repo import TEXT_EXTENSIONS, TEXT_FILENAMES, RepoIndex, normalize_rel


class Scope(StrEnum):
    """Whether a reference can be checked against the repo root."""

    VERIFIABLE = "verifiable"
    UNVERIFIABLE = "unverifiable"


class Status(StrEnum):
    """What the check found."""

    FOUND = "found"
    MOVED = "moved"
    MISSING = "missing"
    UNCHECKED = "unchecked"


class Classification(StrEnum):
    """How much of a memory's verifiable references still hold."""

    EVERGREEN = "evergreen"
    FRESH = "fresh"
    PARTIALLY_STALE = "partially_stale"
    FULLY_STALE = "fully_stale"


# Lower-case extensions that make a token a file path: those of the text sources the repo
# snapshot reads (but `m` and `r`, which are words), and data, media and build outputs.
PATH_EXTENSIONS: Final = (TEXT_EXTENSIONS - {"m", "r"}) | frozenset(
    {
        "jsonl", "log", "csv", "tsv", "svg", "png", "jpg", "jpeg", "gif", "webp", "ico", "pdf",
        "wasm", "db", "sqlite", "service", "plist", "patch", "diff",
    }
)  # fmt: skip
# Files that are paths without an extension (or are nothing but one).
PATH_FILENAMES: Final = TEXT_FILENAMES | frozenset(
    {
        "Containerfile", "Vagrantfile", ".env", ".gitignore", ".gitattributes", ".gitmodules",
        ".editorconfig", ".npmrc", ".nvmrc", ".prettierrc", ".eslintrc", ".dockerignore",
        ".python-version", ".tool-versions", ".envrc",
    }
)  # fmt: skip

# A run of characters a path can be made of. Anything else (spaces, brackets, quotes,
# backticks, commas, non-ASCII letters such as Korean particles) ends it.
_RUN_RE: Final = re.compile(r"[A-Za-z0-9_.~$%@+\-/\\:#*?]+")
_BACKTICK_RE: Final = re.compile(r"`([^`\n]+)`")
# The digits and separators of a `:12`, `:12-30` or `:12:5` suffix, read on the reversed run.
_LINE_SUFFIX_REVERSED_RE: Final = re.compile(r"\d+(?:[-:]\d+)*")
_URL_RE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_DRIVE_RE: Final = re.compile(r"^[A-Za-z]:[\\/]")
_LEAD_STRIP: Final = ":?#"
_TRAIL_STRIP: Final = ".,:;!?#"

# The same characters as bytes, for cutting a whole body into runs in C (see _path_runs).
_RUN_BYTES: Final = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.~$%@+-/\\:#*?"
)
_SPACE_OUT_NON_RUN: Final = bytes(c if c in _RUN_BYTES else 0x20 for c in range(256))
# A dot inside a run, or "file". A run whose only dot ends it ("the end.") is no path.
_DOT_OR_FILE_RE: Final = re.compile(rb"\.(?=[^ ])|file")

_IDENT: Final = r"[A-Za-z_][A-Za-z0-9_]*"
_IDENT_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_NOT_IDENT_BEFORE: Final = r"(?<![A-Za-z0-9_])"
# `name()`, `obj.name()`, `name(...)` anywhere; inside backticks any argument list counts.
# Found from the parentheses, which are rare, then the name before them (see _calls).
_CALL_PARENS_RE: Final = re.compile(r"\((?:\)|\.\.\.\)|…\))")
_CODE_CALL_RE: Final = re.compile(_NOT_IDENT_BEFORE + rf"({_IDENT})\(")
# No look-behind in front: it would stop the regex engine from skipping ahead to the
# keywords' first letters; _defs checks the character before a match instead.
_DEF_RE: Final = re.compile(rf"(def|class|fn|func|function)[ \t]+({_IDENT})(\(?)")
# Most bodies hold no keyword followed by a blank: a few substring tests rule them out.
_DEF_STARTS: Final = tuple(k + b for k in ("def", "class", "fn", "func", "function") for b in " \t")
_DOTTED_RE: Final = re.compile(rf"{_IDENT}(?:\.{_IDENT})*")
# Words that look like calls in code spans but are syntax.
_KEYWORDS: Final = frozenset(
    {
        "if", "elif", "for", "while", "switch", "catch", "return", "and", "not", "with",
        "assert", "lambda", "yield", "await", "typeof", "sizeof", "def", "class", "function",
        "func", "new", "print",
    }
)  # fmt: skip
_MIN_SYMBOL_LEN: Final = 3  # the repo token index keeps identifiers of 3+ characters


@dataclass(frozen=True, slots=True)
class Refs:
    """Paths and symbols a memory body mentions, each once, in order of first appearance."""

    paths: tuple[str, ...]
    symbols: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RefCheck:
    """The outcome of checking one reference."""

    ref: str
    kind: Literal["path", "symbol"]
    scope: Scope
    status: Status
    moved_to: str | None = None


def _clean_run(run: str) -> str:
    """A run without surrounding punctuation and line or anchor suffix; "" if nothing is left."""
    tok = run.lstrip(_LEAD_STRIP).rstrip(_TRAIL_STRIP)
    if not _URL_RE.match(tok):
        tok = _strip_line_suffix(tok).rstrip(_TRAIL_STRIP)
    return tok if any(c.isalnum() for c in tok) else ""


def _strip_line_suffix(tok: str) -> str:
    """``tok`` without its line or anchor suffix (`:12`, `:12-30`, `:12:5`, `#L12`, `#anchor`):
    from the leftmost `:` followed only by digit groups joined by `-` or `:`, or the leftmost
    `#` with no `/` after it. One scan each: a regex tried at every position is quadratic on
    runs like `x.md:1:1:…:1a` (a 1 MiB memory of them took an hour)."""
    cut = len(tok)
    digits = _LINE_SUFFIX_REVERSED_RE.match(tok[::-1])
    if digits is not None:
        start = len(tok) - digits.end()  # the digit groups run from here to the end
        if start and tok[start - 1] == ":":
            cut = start - 1
        else:
            colon = tok.find(":", start)  # a later `:` is followed by a digit group too
            if colon >= 0:
                cut = colon
    anchor = tok.find("#", tok.rfind("/") + 1, cut)
    if anchor >= 0:
        cut = anchor
    return tok[:cut]


def _has_path_name(tok: str) -> bool:
    """True when the last segment is a known file name or has a known extension."""
    name = tok.replace("\\", "/").rpartition("/")[2]
    if name in PATH_FILENAMES:
        return True
    stem, dot, ext = name.rpartition(".")
    return bool(dot) and stem not in ("", ".", "*") and ext.lower() in PATH_EXTENSIONS


def _looks_like_symbol(name: str) -> bool:
    """An identifier that is code, not an English word: has ``_`` or an inner capital."""
    if len(name) < _MIN_SYMBOL_LEN or name.lower() in _KEYWORDS:
        return False
    if "_" in name.strip("_") or (name.startswith("_") and any(c.isalpha() for c in name)):
        return True
    has_lower = any(c.islower() for c in name)
    return has_lower and any(c.isupper() for c in name[1:])


def _symbol_ok(name: str) -> bool:
    return len(name) >= _MIN_SYMBOL_LEN and name not in _KEYWORDS


def extract_refs(body: str) -> Refs:
    """Find the file paths and code symbols a memory body mentions."""
    paths: list[tuple[int, str]] = []
    symbols: list[tuple[int, str]] = []
    # Each run cleaned once, by its text: a path in backticks is most often a run as well.
    cleaned: dict[str, str] = {}

    for start, run in _path_runs(body):
        if "." not in run.rstrip(_TRAIL_STRIP) and "file" not in run:
            continue  # "v1.;": cleaning would leave no dot, so no path
        if body.startswith("(", start + len(run)):
            continue  # `console.log(...)`, `path.join(...)`: a call, not a file
        tok = cleaned[run] = _clean_run(run)
        if tok and _has_path_name(tok):
            paths.append((start, tok))

    for m in _BACKTICK_RE.finditer(body):
        content = m.group(1).strip()
        start = m.start(1)
        if _RUN_RE.fullmatch(content):
            known = cleaned.get(content)
            tok = _clean_run(content) if known is None else known
            # In backticks a folder or extension-less file still reads as a path.
            if tok and ("/" in tok or "\\" in tok or _has_path_name(tok)):
                paths.append((start, tok))
                continue
        for cm in _CODE_CALL_RE.finditer(content):
            if _symbol_ok(cm.group(1)):
                symbols.append((start + cm.start(1), cm.group(1)))
        bare = content.removesuffix("()")
        if _DOTTED_RE.fullmatch(bare) and not _has_path_name(bare):
            offset = start
            for part in bare.split("."):
                if _looks_like_symbol(part):
                    symbols.append((offset, part))
                offset += len(part) + 1

    symbols.extend(_calls(body))
    symbols.extend(_defs(body))
    return Refs(paths=_first_seen(paths), symbols=_first_seen(symbols))


def _path_runs(body: str) -> list[tuple[int, str]]:
    """(offset, run) of each run of path characters that holds an inner dot or "file".

    A path needs an extension or one of the extension-less names, which all end in "file". So
    runs are found from those few hits, in a copy of the body where every other byte is a space:
    the run around a hit is two searches for a space, in C. Each is then located in the text.
    """
    # Markdown bold is not part of a path (a lone `*` is kept: it makes a glob).
    text = body.replace("**", "  ")
    spaced = text.encode("utf-8", "surrogatepass").translate(_SPACE_OUT_NON_RUN)
    out: list[tuple[int, str]] = []
    end = at = 0
    for hit in _DOT_OR_FILE_RE.finditer(spaced):
        if hit.start() < end:
            continue  # another dot of the run just taken
        start = spaced.rfind(b" ", 0, hit.start()) + 1
        end = spaced.find(b" ", hit.start())
        if end < 0:
            end = len(spaced)
        run = spaced[start:end].decode("ascii")
        at = text.index(run, at)
        out.append((at, run))
        at += len(run)
    return out


def _calls(body: str) -> list[tuple[int, str]]:
    """`name()`, `name(...)`, `name(…)` anywhere: the name is the identifier run before them."""
    out: list[tuple[int, str]] = []
    for m in _CALL_PARENS_RE.finditer(body):
        end = start = m.start()
        while start and body[start - 1] in _IDENT_CHARS:
            start -= 1
        name = body[start:end]
        if name and not name[0].isdigit() and _symbol_ok(name):
            out.append((start, name))
    return out


def _defs(body: str) -> list[tuple[int, str]]:
    """Names after `def`, `class`, `fn`, `func`, `function` (the keyword a word of its own)."""
    out: list[tuple[int, str]] = []
    # Unrolled: any() over _DEF_STARTS costs twice as much, and this runs on every body.
    if not (
        "def " in body
        or "class " in body
        or "fn " in body
        or "func " in body
        or "function " in body
        or ("\t" in body and any(start in body for start in _DEF_STARTS))
    ):
        return out
    pos = 0
    while (m := _DEF_RE.search(body, pos)) is not None:
        if m.start() and body[m.start() - 1] in _IDENT_CHARS:
            pos = m.start() + 1  # inside a word ("undef x"): look again one character on
            continue
        pos = m.end()
        keyword, name, paren = m.group(1), m.group(2), m.group(3)
        if keyword == "class":
            # "class of problems" is English; "class Foo" and "class my_thing" are code.
            ok = name[0].isupper() or _looks_like_symbol(name)
        elif keyword == "function":
            ok = bool(paren) or _looks_like_symbol(name)
        else:
            ok = True
        if ok and _symbol_ok(name):
            out.append((m.start(2), name))
    return out


def _first_seen(found: list[tuple[int, str]]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for _, value in sorted(found, key=lambda item: item[0]):
        seen.setdefault(value, None)
    return tuple(seen)


def _outside_repo(ref: str) -> bool:
    """Paths that name something outside any repo root: home, absolute, env vars, URLs."""
    return (
        ref.startswith(("~", "/", "$", "%", "\\"))
        or bool(_URL_RE.match(ref))
        or bool(_DRIVE_RE.match(ref))
        or "*" in ref
        or "?" in ref
    )


def _check_path(ref: str, repo: RepoIndex | None) -> RefCheck:
    def result(scope: Scope, status: Status, moved_to: str | None = None) -> RefCheck:
        return RefCheck(ref, "path", scope, status, moved_to)

    unverifiable = result(Scope.UNVERIFIABLE, Status.UNCHECKED)
    if repo is None or _outside_repo(ref):
        return unverifiable
    rel = normalize_rel(ref)
    if not rel:
        return unverifiable
    parts = rel.split("/")
    basename = parts[-1]
    candidates = repo.by_basename.get(basename, ())
    if len(parts) == 1:
        # A bare name says nothing about where it lives: only a hit can be scoped.
        if rel in repo.top_level:
            return result(Scope.VERIFIABLE, Status.FOUND)
        if candidates:
            return result(Scope.VERIFIABLE, Status.MOVED, candidates[0])
        return unverifiable
    if parts[0] not in repo.top_level:
        return unverifiable
    if repo.has_path(rel):
        return result(Scope.VERIFIABLE, Status.FOUND)
    if repo.under_opaque(rel):
        return unverifiable
    if candidates:
        return result(Scope.VERIFIABLE, Status.MOVED, candidates[0])
    if not repo.complete:
        return unverifiable
    return result(Scope.VERIFIABLE, Status.MISSING)


class RefChecker:
    """Checks references against one repo snapshot (None: no repo), each distinct one once:
    memories name the same paths again and again (6,600 distinct among 16,500 at 10,000)."""

    __slots__ = ("_paths", "_symbols", "repo")

    def __init__(self, repo: RepoIndex | None) -> None:
        self.repo = repo
        self._paths: dict[str, RefCheck] = {}
        self._symbols: dict[str, RefCheck] = {}

    def check(self, refs: Refs) -> tuple[RefCheck, ...]:
        """Scope and check every reference: paths first, then symbols, each in input order."""
        paths, symbols = self._paths, self._symbols
        out: list[RefCheck] = []
        for p in refs.paths:
            found = paths.get(p)
            if found is None:
                found = paths[p] = _check_path(p, self.repo)
            out.append(found)
        for s in refs.symbols:
            found = symbols.get(s)
            if found is None:
                found = symbols[s] = self._check_symbol(s)
            out.append(found)
        return tuple(out)

    def _check_symbol(self, name: str) -> RefCheck:
        if self.repo is None:
            return RefCheck(name, "symbol", Scope.UNVERIFIABLE, Status.UNCHECKED)
        found = name in self.repo.tokens
        return RefCheck(name, "symbol", Scope.VERIFIABLE, Status.FOUND if found else Status.MISSING)


def classify(checks: Sequence[RefCheck]) -> Classification:
    """Classify a memory from its reference checks (DESIGN §4.3)."""
    paths = [c for c in checks if c.kind == "path" and c.scope is Scope.VERIFIABLE]
    if not paths:
        return Classification.EVERGREEN
    # Anything short of a definite MISSING counts as present: unsure means keep.
    missing = [c for c in paths if c.status is Status.MISSING]
    symbols = [c for c in checks if c.kind == "symbol" and c.scope is Scope.VERIFIABLE]
    symbols_missing = sum(c.status is Status.MISSING for c in symbols)
    if not missing:
        # FRESH needs every reference found; a missing symbol with every path there is a
        # memory half out of date (kept, flagged), never stale: symbols alone prune nothing.
        return Classification.PARTIALLY_STALE if symbols_missing else Classification.FRESH
    if len(missing) < len(paths) or symbols_missing < len(symbols):
        return Classification.PARTIALLY_STALE
    return Classification.FULLY_STALE
