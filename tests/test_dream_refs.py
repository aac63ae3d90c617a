"""Reference extraction, scoping, checking and classification (DESIGN §4.2-4.3)."""

from pathlib import Path

import pytest

from memoryd.dream.refs import (
    Classification,
    RefCheck,
    RefChecker,
    Refs,
    Scope,
    Status,
    classify,
    extract_refs,
)
from memoryd.dream.repo import RepoIndex


def repo_of(
    *files: str,
    tokens: tuple[str, ...] = (),
    opaque: tuple[str, ...] = (),
    complete: bool = True,
) -> RepoIndex:
    """A RepoIndex made from a list of files, without a disk."""
    dirs = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    grouped: dict[str, list[str]] = {}
    for f in files:
        grouped.setdefault(f.rsplit("/", 1)[-1], []).append(f)
    return RepoIndex(
        root=Path("/repo"),
        files=frozenset(files),
        dirs=frozenset(dirs | set(opaque)),
        top_level=frozenset(f.split("/")[0] for f in (*files, *opaque)),
        by_basename={k: tuple(sorted(v, key=lambda p: (len(p), p))) for k, v in grouped.items()},
        tokens=frozenset(tokens),
        opaque=frozenset(opaque),
        complete=complete,
    )


REPO = repo_of(
    "src/app.py",
    "src/lib/util.py",
    "lib/old/helpers.py",
    "README.md",
    "docs/guide.md",
    tokens=("parse_config", "MemoryStore", "render"),
    opaque=("node_modules",),
)


@pytest.mark.parametrize(
    ("body", "paths"),
    [
        ("Edit `src/app.py` now", ("src/app.py",)),
        (
            "see src/app.py:12 and src/b.ts:12-30, src/c.go#L12 and src/d.rs:3:7",
            ("src/app.py", "src/b.ts", "src/c.go", "src/d.rs"),
        ),
        ("`src/a.py#L3-L9`", ("src/a.py",)),
        ("Docs at https://example.com/guide/README.md.", ("https://example.com/guide/README.md",)),
        ("Settings live in ~/.claude/settings.json", ("~/.claude/settings.json",)),
        ("Logs: /var/app/x.py, then", ("/var/app/x.py",)),
        ("`$HOME/x` and bare $HOME/y", ("$HOME/x",)),
        ("Look in README.md or package.json.", ("README.md", "package.json")),
        (
            "`src/api/route.ts`를 수정했고 lib/db.py에서 호출한다. 경로:docs/설계.md",
            ("src/api/route.ts", "lib/db.py"),
        ),
        ("b.py then a.py then `b.py`", ("b.py", "a.py")),
        ("e.g. version 1.2.3, node v20, the end.", ()),
        ("C:\\Users\\me\\app.py", ("C:\\Users\\me\\app.py",)),
        ("the `src/components/` folder", ("src/components/",)),
        ("[guide](docs/guide.md) and **docs/a.md**", ("docs/guide.md", "docs/a.md")),
        ("run `./scripts/run.sh` first", ("./scripts/run.sh",)),
        ("the Makefile and .env", ("Makefile", ".env")),
        ("`run the tests`", ()),
        ("see docs/plan.md#rollout and `docs/faq.md#why`", ("docs/plan.md", "docs/faq.md")),
        ("call console.log(x) and path.join(a, b)", ()),
        ("styles in `*.module.css`; the root is `/`", ("*.module.css",)),
        # Runs end at non-ASCII characters, even ones that are not valid text on their own.
        ("é src/a.py\ud800lib/b.py日docs/c.md", ("src/a.py", "lib/b.py", "docs/c.md")),
        ("ends here. Then v1. and a.b. and a.py. and a.py.", ("a.py",)),
        ("the Makefile, the Makefile; a Dockerfile.", ("Makefile", "Dockerfile")),
    ],
)
def test_extract_paths(body: str, paths: tuple[str, ...]) -> None:
    """Paths are found backticked or bare, suffixes stripped, once each, in order of appearance."""
    assert extract_refs(body).paths == paths


@pytest.mark.parametrize(
    ("body", "symbols"),
    [
        ("call `parse_config()` and obj.reload()", ("parse_config", "reload")),
        (
            "def build_index, class MemoryStore, fn spawn_worker, function renderPage",
            ("build_index", "MemoryStore", "spawn_worker", "renderPage"),
        ),
        (
            "`MemoryStore` `snake_name` `camelName` `pnpm` `Config` `TODO` `__init__`",
            ("MemoryStore", "snake_name", "camelName", "__init__"),
        ),
        ("the class of bugs, a function that works, def", ()),
        ("`src/app.py` and `app.py`", ()),
        ("`config.MAX_SIZE` and `os.path.join`", ("MAX_SIZE",)),
        ("`parseConfig(path)`를 호출한다", ("parseConfig",)),
        ("f() and go() are too short", ()),
        ("`if (x)` is syntax", ()),
        (
            "undef class_name and undef class Foo; 9go_on() and é_private() or x.run_all(…)",
            (
                "Foo",
                "_private",
                "run_all",
            ),
        ),
        ("function\tstart_up(", ("start_up",)),
    ],
)
def test_extract_symbols(body: str, symbols: tuple[str, ...]) -> None:
    """Symbols are calls, definitions and code-looking backticked identifiers, not English."""
    assert extract_refs(body).symbols == symbols


@pytest.mark.parametrize(
    ("ref", "scope", "status", "moved_to"),
    [
        ("src/app.py", Scope.VERIFIABLE, Status.FOUND, None),
        ("./src/app.py", Scope.VERIFIABLE, Status.FOUND, None),
        ("src\\app.py", Scope.VERIFIABLE, Status.FOUND, None),
        ("src/", Scope.VERIFIABLE, Status.FOUND, None),
        ("src/gone.py", Scope.VERIFIABLE, Status.MISSING, None),
        ("src/helpers.py", Scope.VERIFIABLE, Status.MOVED, "lib/old/helpers.py"),
        ("README.md", Scope.VERIFIABLE, Status.FOUND, None),
        ("util.py", Scope.VERIFIABLE, Status.MOVED, "src/lib/util.py"),
        ("nowhere.py", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("~/.claude/x.md", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("/var/app/x.py", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("$HOME/x", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("%APPDATA%\\x.json", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("https://example.com/src/app.py", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("C:\\src\\app.py", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("other/app.py", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("../sibling/app.py", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("src/*.py", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("*.module.css", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("node_modules/x/index.js", Scope.UNVERIFIABLE, Status.UNCHECKED, None),
        ("node_modules", Scope.VERIFIABLE, Status.FOUND, None),
    ],
)
def test_scope_and_check_paths(
    ref: str, scope: Scope, status: Status, moved_to: str | None
) -> None:
    """Each path is scoped against the repo's top level, then found, moved or missing."""
    (check,) = RefChecker(REPO).check(Refs(paths=(ref,), symbols=()))
    assert check == RefCheck(ref, "path", scope, status, moved_to)


def test_symbols_are_looked_up_in_the_token_index() -> None:
    """A symbol is FOUND when the repo's token index holds it, MISSING otherwise."""
    checks = RefChecker(REPO).check(Refs(paths=(), symbols=("parse_config", "gone_func")))
    assert [(c.ref, c.kind, c.scope, c.status) for c in checks] == [
        ("parse_config", "symbol", Scope.VERIFIABLE, Status.FOUND),
        ("gone_func", "symbol", Scope.VERIFIABLE, Status.MISSING),
    ]


def test_without_a_repo_nothing_is_checked() -> None:
    """With no repo root every reference is unverifiable and unchecked, and the memory evergreen."""
    checks = RefChecker(None).check(Refs(paths=("src/app.py",), symbols=("parse_config",)))
    assert {(c.scope, c.status) for c in checks} == {(Scope.UNVERIFIABLE, Status.UNCHECKED)}
    assert classify(checks) is Classification.EVERGREEN


def test_an_incomplete_walk_never_reports_missing() -> None:
    """When the walk stopped early, a path not seen is unverifiable rather than missing."""
    repo = repo_of("src/app.py", complete=False)
    (check,) = RefChecker(repo).check(Refs(paths=("src/gone.py",), symbols=()))
    assert (check.scope, check.status) == (Scope.UNVERIFIABLE, Status.UNCHECKED)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("Prefer small commits. Never force-push.", Classification.EVERGREEN),
        ("Config in ~/.claude/settings.json; `parse_gone()` is gone", Classification.EVERGREEN),
        ("Entry is src/app.py; helpers in src/helpers.py", Classification.FRESH),
        ("Entry is src/app.py; old code in src/gone.py", Classification.PARTIALLY_STALE),
        ("Old code in src/gone.py and docs/old.md, see `parse_gone()`", Classification.FULLY_STALE),
        ("Old code in src/gone.py, calls `parse_config()`", Classification.PARTIALLY_STALE),
        ("Old code in src/gone.py only", Classification.FULLY_STALE),
    ],
)
def test_classify_end_to_end(body: str, expected: Classification) -> None:
    """Extract, check against the repo and classify gives each class of DESIGN §4.3."""
    assert classify(RefChecker(REPO).check(extract_refs(body))) is expected


def test_classify_counts_moved_as_found() -> None:
    """A moved path keeps a memory fresh: the file still exists under a new folder."""
    checks = [
        RefCheck("src/helpers.py", "path", Scope.VERIFIABLE, Status.MOVED, "lib/helpers.py"),
        RefCheck("parse_config", "symbol", Scope.VERIFIABLE, Status.FOUND),
    ]
    assert classify(checks) is Classification.FRESH


@pytest.mark.parametrize(
    ("symbols", "expected"),
    [
        ((Status.FOUND,), Classification.FRESH),
        ((Status.FOUND, Status.MISSING), Classification.PARTIALLY_STALE),
        ((Status.MISSING,), Classification.PARTIALLY_STALE),
    ],
)
def test_fresh_needs_every_symbol_found(
    symbols: tuple[Status, ...], expected: Classification
) -> None:
    """Every path found: FRESH only when every verifiable symbol is found too."""
    checks = [RefCheck("src/app.py", "path", Scope.VERIFIABLE, Status.FOUND)] + [
        RefCheck(f"sym{i}", "symbol", Scope.VERIFIABLE, status) for i, status in enumerate(symbols)
    ]
    assert classify(checks) is expected


def test_symbols_alone_never_make_a_memory_stale() -> None:
    """Missing symbols with no verifiable path leave a memory evergreen: they may be elsewhere."""
    checks = [RefCheck("gone_func", "symbol", Scope.VERIFIABLE, Status.MISSING)]
    assert classify(checks) is Classification.EVERGREEN


def test_wikilinks_are_read_once_each_and_linearly() -> None:
    """`[[name]]`, `[[name|label]]`, `[[name#heading]]` name `name`; empty, multi-line or
    nested brackets name nothing; a megabyte of `[[` is read in one linear pass."""
    from memoryd.model.links import dangling, links_in

    data = b"see [[a]], [[b|label]], [[c#part]], [[a]], [[]], [[x\ny]], [[[d]]] and [[ e ]]"
    assert links_in(data) == ("a", "b", "c", "d", "e")
    assert links_in(b"[[" * 500_000) == ()
    found = dangling({"m.md": ("A", "gone", "note")}, {"a.md": "x", "old.md": "gone"},
                     others=["note.md"], moved=["old.md"])  # fmt: skip
    assert [(d.link, d.moved) for d in found] == [("gone", "old.md")]
