"""Dream-pass benchmarks (DESIGN §10): full pass, stale-symbol check, one-memory duplicate check.

Each figure is printed beside a naive baseline measured in the same run, as a median over several
runs, with the ratio naive / memoryd. Baselines too slow to run in full are timed on a sample and
extrapolated; their cells say so.

1. Full dream pass over one synthetic memory dir whose repo root is a synthetic code tree
   (~5,000 files of Python, TypeScript, Go, Rust, docs and config). The memories name existing,
   missing and moved paths and real and absent symbols; ~2 % are planted near-duplicates and a
   few pairs contradict each other, so that a real pass moves ~4 % (under the 20 % breaker).
   The dir is indexed first (as the daemon would have), then timed as `dream_dir(...,
   dry_run=True)` and as a real pass on a fresh copy that carries the dir's saved state over.
   Dry and real passes run in two fresh processes per size; the peak RSS (ru_maxrss) is that of
   each process's first pass. Real passes stop when `--real-budget` is spent (at least one runs)
   and a pass still running after `--pass-timeout` is stopped and shown as a lower bound.
   The last pass of each kind also prints where its time went (exclusive time per collaborator).
   A process keeps what a pass derived for its next pass (the repo snapshot, each memory's facts
   by content hash), as the daemon does, and a real pass also saves both in the state dir for
   the next process (a dry run only reads them). So the first pass of a process gets rows of
   its own: "first in a fresh process" finds what an earlier real pass over the same files
   saved (the usual `memoryd dream`), "first ever" finds nothing saved at all.
   Naive: python-frontmatter on every file + all pairs of frozensets of str.
2. Stale-symbol check: 1,000 memories naming a few symbols each vs the 5,000-file tree:
   `RepoIndex.build` + `extract_refs`/`RefChecker.check` vs one `grep -rqw` per symbol (sampled).

Usage (from the repo root, with the dev venv and the `bench` extra installed):

    python bench/bench_dream.py                  # 1,000 and 10,000 memories (3-4 minutes)
    python bench/bench_dream.py --big            # and 100,000 (about 10 more minutes)
    python bench/bench_dream.py --profile real   # and cProfile one real 10,000 pass
    python bench/bench_dream.py --n 1000         # a quick look
"""

import argparse
import contextlib
import cProfile
import functools
import gc
import io
import itertools
import json
import os
import platform
import pstats
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import _synth
from _stats import markdown_table, percentile, timed

from memoryd.config import Config, PathsConfig
from memoryd.discover.finder import discover
from memoryd.discover.found import MemoryDir
from memoryd.dream.refs import RefChecker, Status, extract_refs
from memoryd.dream.repo import RepoIndex
from memoryd.dream.repocache import RepoCache
from memoryd.dream.result import DreamResult
from memoryd.dream.run import dream_dir
from memoryd.dream.similar import (
    HAVE_NUMPY,
    STOPWORDS,
    significant_words,
)
from memoryd.indexing import passes
from memoryd.indexing.read import MAX_INDEX_BYTES
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME
from memoryd.paths import AppPaths
from memoryd.runtime import Runtime
from memoryd.storage.state import StateStore

try:
    import frontmatter
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("python-frontmatter is missing: pip install -e '.[bench]'")

MS = 1e-3
MB = 1024 * 1024
DAY = 86400.0
DUPLICATE = 0.6
CONTRADICTION = 0.4
NAIVE_PAIR_SAMPLE = 2_000
TREE_FILES = 5_000


# --- identifiers and words ---------------------------------------------------------------------
_ID_VERBS = (
    "get", "set", "load", "save", "parse", "build", "render", "fetch", "sync", "validate",
    "resolve", "compute", "apply", "handle", "create", "update", "delete", "merge", "split",
    "normalize", "encode", "decode", "serialize", "flush", "reset", "init", "register",
    "dispatch", "schedule", "retry", "emit", "collect", "format", "refresh", "attach", "detach",
    "open", "close", "read", "write", "ensure", "prune", "rotate", "migrate", "hydrate", "poll",
)  # fmt: skip
_ID_NOUNS = (
    "user", "session", "config", "cache", "token", "request", "response", "payload", "header",
    "route", "handler", "worker", "queue", "job", "task", "event", "message", "record", "entry",
    "index", "schema", "table", "column", "row", "query", "result", "error", "timeout", "limit",
    "budget", "window", "buffer", "stream", "chunk", "frame", "packet", "socket", "client",
    "server", "proxy", "gateway", "auth", "permission", "role", "policy", "account", "invoice",
    "order", "cart", "product", "price", "discount", "shipment", "address", "report", "metric",
    "counter", "gauge", "span", "trace", "audit", "snapshot", "backup", "migration", "seed",
    "fixture", "plugin", "module", "manifest", "release", "artifact", "image", "container",
    "node", "cluster", "region", "tenant", "team", "project", "branch", "commit", "diff",
    "patch", "webhook", "upload", "download", "search", "ranking", "feed", "comment", "thread",
    "notification", "email", "template", "locale", "currency", "ledger", "balance", "refund",
)  # fmt: skip
_ID_ADJS = (
    "active", "pending", "stale", "cached", "raw", "parsed", "signed", "encrypted", "default",
    "remote", "local", "primary", "secondary", "async", "batch", "bulk", "lazy", "partial",
    "shadow", "legacy", "draft", "public", "private", "internal", "external", "nested",
    "indexed", "sorted", "unique", "expired",
)  # fmt: skip
_CLASS_SUFFIXES = (
    "Manager", "Service", "Client", "Handler", "Store", "Repository", "Factory", "Builder",
    "Parser", "Config", "Error", "Registry", "Adapter", "Provider", "Controller", "View",
    "Model", "Schema", "Cache", "Queue", "Worker", "Policy", "Serializer", "Validator",
)  # fmt: skip
# Words of ordinary prose in notes (stopwords included: they are filtered by the pass itself).
_COMMON_TEXT = """
    the a to of in for on with at by from as and or if then than so but not it this that is
    are was be have has do will can should when run test tests deploy build file change before
    after because we you user config value error fails works check update release local remote
    server client branch merge commit review path module function class call return default
    flag option setting environment variable script command output input log message timeout
    retry request response cache database query table migration schema field type version
    package dependency install upgrade lock folder import export rename move delete create add
    remove keep make sure first also only staging production ci pipeline job step container
    image docker cluster secret token key auth login session cookie header endpoint api route
    handler worker queue event payload json yaml format lint type-check coverage fixture mock
    stub snapshot golden flaky slow fast cold warm start stop restart reload watch poll timer
    cron schedule nightly weekly monday friday team owner reviewer pr issue ticket bug fix
    regression workaround hack note todo later soon again once twice every each all some most
    few many more less new old same other next last long short small large big tiny main
    helper util common shared core base internal public private wrapper adapter layer service
    client-side server-side frontend backend mobile desktop browser terminal shell editor
    ide"""
_COMMON = tuple(_COMMON_TEXT.split())
_TOOLS = (
    "pnpm", "yarn", "npm", "bun", "poetry", "uv", "pip-tools", "pipenv", "black", "ruff",
    "prettier", "eslint", "biome", "jest", "vitest", "pytest", "unittest", "mocha", "webpack",
    "vite", "esbuild", "rollup", "docker-compose", "podman", "helm", "kustomize", "terraform",
    "pulumi", "sqlalchemy", "prisma", "drizzle", "alembic", "celery", "rq", "redis", "memcached",
    "postgres", "sqlite", "mysql", "graphql", "grpc", "protobuf", "msgpack", "orjson",
)  # fmt: skip
_PROHIBITIONS = (
    "Never {verb} {obj} on the shared runner.",
    "Don't {verb} {obj} without asking first.",
    "Do not {verb} {obj} in the release branch.",
    "Avoid {obj} in new code.",
)


def _snake(rng: random.Random) -> str:
    parts = [rng.choice(_ID_VERBS)]
    if rng.random() < 0.35:
        parts.append(rng.choice(_ID_ADJS))
    parts.append(rng.choice(_ID_NOUNS))
    name = "_".join(parts)
    return "_" + name if rng.random() < 0.08 else name


def _camel_class(rng: random.Random) -> str:
    adj = rng.choice(_ID_ADJS).title() if rng.random() < 0.4 else ""
    return adj + rng.choice(_ID_NOUNS).title() + rng.choice(_CLASS_SUFFIXES)


def _camel_func(rng: random.Random) -> str:
    noun = rng.choice(_ID_NOUNS).title()
    extra = rng.choice(_ID_NOUNS).title() if rng.random() < 0.4 else ""
    return rng.choice(_ID_VERBS) + noun + extra


def _tail_words(rng: random.Random, n: int) -> list[str]:
    """A long tail of topic words for prose: identifier parts glued into domain terms."""
    out: set[str] = set()
    while len(out) < n:
        roll = rng.random()
        if roll < 0.3:
            out.add(f"{rng.choice(_ID_ADJS)}-{rng.choice(_ID_NOUNS)}")
        elif roll < 0.6:
            out.add(f"{rng.choice(_ID_NOUNS)}-{rng.choice(_ID_NOUNS)}")
        elif roll < 0.8:
            out.add(f"{rng.choice(_ID_VERBS)}-{rng.choice(_ID_NOUNS)}s")
        else:
            suffix = rng.choice(("s", "ing", "ed", "er"))
            out.add(f"{rng.choice(_ID_NOUNS)}{suffix}-{rng.randint(2, 99)}")
    return sorted(out)


# --- the synthetic code tree -------------------------------------------------------------------
@dataclass
class Repo:
    root: Path
    files: list[str]
    symbols: list[str]  # every identifier defined in the tree (code-like: `_` or inner capital)
    absent_symbols: list[str]  # code-like identifiers that appear nowhere in the tree
    absent_paths: list[str]  # first segment is top-level, basename exists nowhere: MISSING
    moved_paths: list[str]  # a folder that does not hold it, a basename that exists: MOVED
    outside_paths: list[str]  # ~, /, $, URLs: unverifiable
    tokens: frozenset[str] = field(default_factory=frozenset)


def _py_file(rng: random.Random, defs: list[str], calls: list[str], module: str) -> str:
    out = [f'"""{module.replace("_", " ").capitalize()}: helpers for the {module} flow."""', ""]
    out += ["import logging", "from dataclasses import dataclass", ""]
    out += [f"from .{rng.choice(_ID_NOUNS)} import {c}" for c in calls[:3]] + ["", ""]
    out.append("log = logging.getLogger(__name__)")
    for name in defs:
        out.append("")
        if name[0].isupper():
            out += ["@dataclass", f"class {name}:"]
            out += [
                f"    {rng.choice(_ID_NOUNS)}_{rng.choice(_ID_NOUNS)}: str = ''" for _ in range(3)
            ]
            out += ["", f"    def {rng.choice(_ID_VERBS)}(self) -> None:"]
            out.append(f"        {rng.choice(calls) if calls else 'log.debug'}(self)")
        else:
            arg = rng.choice(_ID_NOUNS)
            out += [f"def {name}({arg}, *, {rng.choice(_ID_ADJS)}=False):"]
            out += [f'    """{rng.choice(_ID_VERBS).capitalize()} the {arg} and return it."""']
            for _ in range(rng.randint(1, 5)):
                callee = rng.choice(calls) if calls else "log.debug"
                out.append(f"    {rng.choice(_ID_NOUNS)} = {callee}({arg})")
            out.append(f"    return {arg}")
    return "\n".join(out) + "\n"


def _ts_file(rng: random.Random, defs: list[str], calls: list[str], module: str) -> str:
    out = [f"// {module}: UI and client helpers", ""]
    out += [f"import {{ {c} }} from './{rng.choice(_ID_NOUNS)}';" for c in calls[:3]] + [""]
    for name in defs:
        if name[0].isupper():
            out += [f"export class {name} {{"]
            out += [f"  private {rng.choice(_ID_NOUNS)}Id = '';" for _ in range(2)]
            out += [
                f"  {rng.choice(_ID_VERBS)}(): void {{",
                f"    {rng.choice(calls or ['console.log'])}(this);",
            ]
            out += ["  }", "}", ""]
        else:
            arg = rng.choice(_ID_NOUNS)
            out += [f"export function {name}({arg}: string): string {{"]
            for _ in range(rng.randint(1, 4)):
                out.append(
                    f"  const {rng.choice(_ID_NOUNS)} = {rng.choice(calls or ['String'])}({arg});"
                )
            out += [f"  return {arg};", "}", ""]
    return "\n".join(out) + "\n"


def _go_file(rng: random.Random, defs: list[str], calls: list[str], module: str) -> str:
    out = [f"// Package {module} holds the {module} flow.", f"package {module}", ""]
    out += ["import (", '\t"context"', '\t"fmt"', ")", ""]
    for name in defs:
        if name[0].isupper() and name.endswith(_CLASS_SUFFIXES):
            out += [f"type {name} struct {{", f"\t{rng.choice(_ID_NOUNS).title()} string", "}", ""]
        else:
            fn = name[0].upper() + name[1:] if rng.random() < 0.5 else name
            out += [f"func {fn}(ctx context.Context, {rng.choice(_ID_NOUNS)} string) error {{"]
            for _ in range(rng.randint(1, 4)):
                out.append(f"\tif err := {rng.choice(calls or ['fmt.Errorf'])}(ctx); err != nil {{")
                out += ["\t\treturn err", "\t}"]
            out += ["\treturn nil", "}", ""]
    return "\n".join(out) + "\n"


def _rs_file(rng: random.Random, defs: list[str], calls: list[str], module: str) -> str:
    out = [f"//! {module}: the {module} crate's core.", "", "use std::collections::HashMap;", ""]
    for name in defs:
        if name[0].isupper():
            out += ["#[derive(Debug, Clone)]", f"pub struct {name} {{"]
            out += [f"    pub {rng.choice(_ID_NOUNS)}: HashMap<String, u64>,", "}", ""]
        else:
            out += [f"pub fn {name}(input: &str) -> Result<(), String> {{"]
            for _ in range(rng.randint(1, 4)):
                out.append(f"    {rng.choice(calls or ['drop'])}(input)?;")
            out += ["    Ok(())", "}", ""]
    return "\n".join(out) + "\n"


def _doc_file(rng: random.Random, defs: list[str], calls: list[str], module: str) -> str:
    out = [f"# {module.replace('_', ' ').title()}", ""]
    for _ in range(rng.randint(3, 12)):
        out.append(
            " ".join(rng.choice(_COMMON) for _ in range(rng.randint(8, 20))).capitalize() + "."
        )
        if calls and rng.random() < 0.5:
            out.append(f"See `{rng.choice(calls)}()` for details.")
        out.append("")
    return "\n".join(out)


def _conf_file(rng: random.Random, defs: list[str], calls: list[str], module: str) -> str:
    out = [f"# {module} settings"]
    for _ in range(rng.randint(5, 30)):
        out.append(f"{rng.choice(_ID_NOUNS)}_{rng.choice(_ID_NOUNS)} = {rng.randint(0, 9999)}")
    return "\n".join(out) + "\n"


def make_repo(root: Path, n_files: int, seed: int) -> Repo:
    """A code tree of about `n_files` files whose identifiers read like a real project's."""
    rng = random.Random(seed)
    pkgs = sorted({rng.choice(_ID_NOUNS) for _ in range(12)})
    paths: dict[str, tuple[Callable[..., str], str]] = {}

    def add(rel: str, kind: Callable[..., str]) -> None:
        paths.setdefault(rel, (kind, rel.rsplit("/", 1)[-1].split(".")[0].lstrip("_") or "root"))

    while len(paths) < n_files:
        roll = rng.random()
        noun, other = rng.choice(_ID_NOUNS), rng.choice(_ID_NOUNS)
        pkg = rng.choice(pkgs)
        if roll < 0.32:
            sub = "/".join(rng.choice(_ID_NOUNS) for _ in range(rng.randint(0, 2)))
            base = f"src/{pkg}/{sub}/" if sub else f"src/{pkg}/"
            add(base + rng.choice((f"{noun}.py", f"{noun}_{other}.py", "__init__.py")), _py_file)
        elif roll < 0.45:
            add(f"tests/{pkg}/test_{noun}_{other}.py", _py_file)
        elif roll < 0.62:
            comp = noun.title() + other.title()
            choice = rng.choice(
                (
                    f"web/src/components/{comp}/{comp}.tsx",
                    f"web/src/components/{comp}/index.ts",
                    f"web/src/hooks/use{noun.title()}.ts",
                    f"web/src/lib/{noun}/{other}.ts",
                )
            )
            add(choice, _ts_file)
        elif roll < 0.74:
            top = rng.choice(("pkg", "internal", "cmd"))
            add(
                f"{top}/{noun}/{rng.choice((noun, other, f'{noun}_{other}', 'handler'))}.go",
                _go_file,
            )
        elif roll < 0.84:
            add(f"crates/{pkg}-{noun}/src/{rng.choice(('lib', 'mod', other, noun))}.rs", _rs_file)
        elif roll < 0.92:
            add(
                f"docs/{rng.choice(('guides', 'adr', 'runbooks', 'api'))}/{noun}-{other}.md",
                _doc_file,
            )
        elif roll < 0.96:
            add(f"scripts/{rng.choice(_ID_VERBS)}_{noun}.sh", _conf_file)
        else:
            ext = rng.choice(("yaml", "toml", "json", "ini"))
            add(f"config/{rng.choice(('dev', 'prod', 'staging', 'test'))}/{noun}.{ext}", _conf_file)
    for rel in ("README.md", "Makefile", "Dockerfile", "pyproject.toml", "package.json",
                ".gitignore", ".github/workflows/ci.yml", "docs/index.md"):  # fmt: skip
        add(rel, _conf_file)

    # Identifiers: each file defines a few, calls a few defined elsewhere.
    defined: list[str] = []
    pool = [
        (_snake if rng.random() < 0.5 else (_camel_class if rng.random() < 0.5 else _camel_func))(
            rng
        )
        for _ in range(30_000)
    ]
    pool = sorted(set(pool))
    rng.shuffle(pool)
    cursor = 0
    files = sorted(paths)
    for rel in files:
        kind, module = paths[rel]
        k = rng.randint(2, 14)
        defs = pool[cursor : cursor + k]
        cursor = (cursor + k) % (len(pool) - 20)
        calls = rng.sample(defined, min(len(defined), rng.randint(0, 6))) if defined else []
        if len(defined) < 15_000:
            defined.extend(defs)
        text = kind(rng, defs, calls, re.sub(r"[^a-z_]", "_", module.lower()) or "root")
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    # Trees the walk must skip: vendored and VCS folders.
    for rel in ("node_modules/left-pad/index.js", ".git/HEAD", "build/lib/out.py"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("module.exports = legacyPadLeft;\n")
    # A real tree was not all written in the last seconds: sources that new (by mtime or
    # ctime) are read again by every build (RepoIndex's racy-file rule), which would slow the
    # first passes timed here. Their ctime cannot be set back, so wait it out.
    old = time.time() - 3600
    for rel in files:
        os.utime(root / rel, (old, old))
    time.sleep(2.1)

    index = RepoIndex.build(root)
    tokens = index.tokens
    symbols = sorted(t for t in tokens if _code_like(t))
    absent: set[str] = set()
    while len(absent) < 5_000:
        name = (
            _snake if rng.random() < 0.5 else (_camel_class if rng.random() < 0.5 else _camel_func)
        )(rng)
        name = name if rng.random() < 0.5 else name + rng.choice(("V2", "Legacy", "_old", "_v1"))
        if name not in tokens and _code_like(name):
            absent.add(name)
    basenames = set(index.by_basename)
    tops = sorted(t for t in index.top_level if not t.startswith(".") and t in index.dirs)
    absent_paths: set[str] = set()
    while len(absent_paths) < 3_000:
        top = rng.choice(tops)
        base = rng.choice(
            (
                f"{rng.choice(_ID_ADJS)}_{rng.choice(_ID_NOUNS)}.py",
                f"{rng.choice(_ID_NOUNS).title()}{rng.choice(_CLASS_SUFFIXES)}.tsx",
                f"{rng.choice(_ID_NOUNS)}_{rng.choice(_ID_ADJS)}.go",
                f"{rng.choice(_ID_NOUNS)}-{rng.choice(_ID_ADJS)}.md",
            )
        )
        rel = f"{top}/{rng.choice(_ID_NOUNS)}/{base}"
        if base not in basenames:
            absent_paths.add(rel)
    moved_paths: set[str] = set()
    while len(moved_paths) < 2_000:
        real = rng.choice(files)
        base = real.rsplit("/", 1)[-1]
        rel = f"{rng.choice(tops)}/{rng.choice(_ID_ADJS)}/{base}"
        if (
            rel not in index.files
            and base in basenames
            and not base.startswith(("__", "index", "mod", "lib"))
        ):
            moved_paths.add(rel)
    outside = [
        "~/.config/gh/hosts.yml", "~/.aws/credentials", "/etc/nginx/nginx.conf",
        "$HOME/.npmrc", "https://github.com/org/app/pull/123", "/var/log/app/worker.log",
        "~/.ssh/config", "$XDG_CONFIG_HOME/app/settings.toml", "../sibling-repo/src/app.py",
    ]  # fmt: skip
    return Repo(
        root=root,
        files=files,
        symbols=symbols,
        absent_symbols=sorted(absent),
        absent_paths=sorted(absent_paths),
        moved_paths=sorted(moved_paths),
        outside_paths=outside,
        tokens=tokens,
    )


def _code_like(name: str) -> bool:
    core = name.strip("_")
    return len(name) >= 5 and (
        "_" in core or (any(c.islower() for c in name) and any(c.isupper() for c in name[1:]))
    )


# --- the synthetic memory dir ------------------------------------------------------------------
KIND_SHARES = (
    ("fresh", 0.50),  # existing paths, real symbols
    ("evergreen", 0.25),  # no verifiable path: home, absolute, URLs, symbols only
    ("moved", 0.08),  # a path in a folder that does not hold it, its basename elsewhere
    ("partial", 0.10),  # one existing and one missing path
    ("stale", 0.07),  # every path missing, every symbol absent
)
DUP_SHARE = 0.02
RECENT_SHARE = 0.04
PROHIBITION_SHARE = 0.12


@dataclass
class Planted:
    n: int
    kinds: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0  # near-copies (same type, ~85 % of the words)
    contradictions: int = 0  # pairs: same type, overlap in [0.4, 0.6), opposite directives
    stale_unguarded: int = 0  # fully stale, project type, no prohibition, old, not a copy

    def describe(self) -> str:
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(self.kinds.items()))
        return (
            f"planted: {kinds}; {self.duplicates:,} near-duplicates, "
            f"{self.contradictions:,} contradiction pairs, {self.stale_unguarded:,} fully stale "
            "with no guard"
        )


class Writer:
    """Prose with references, from a seeded generator (same seed, same bytes)."""

    def __init__(self, rng: random.Random, repo: Repo) -> None:
        self.rng = rng
        self.repo = repo
        self.tail = _tail_words(rng, 8_000)
        self.common_weights = list(
            itertools.accumulate(1 / (r + 1) ** 0.8 for r in range(len(_COMMON)))
        )

    def words(self, k: int) -> list[str]:
        rng = self.rng
        out = []
        for _ in range(k):
            if rng.random() < 0.45:
                out.append(rng.choices(_COMMON, cum_weights=self.common_weights)[0])
            else:
                out.append(rng.choice(self.tail))
        return out

    def sentence(self, ref: str = "") -> str:
        words = self.words(self.rng.randint(6, 16))
        text = " ".join(words).capitalize()
        if ref:
            text += f" {self.rng.choice(('in', 'see', 'via', 'from', 'at'))} {ref}"
        return text + "."

    def refs(self, kind: str) -> tuple[list[str], list[str]]:
        """(path references, symbol references), already formatted as they appear in prose."""
        rng, repo = self.rng, self.repo

        def path(rel: str) -> str:
            roll = rng.random()
            if roll < 0.6:
                return f"`{rel}`"
            if roll < 0.75:
                return f"`{rel}:{rng.randint(1, 400)}`"
            return rel

        def symbol(name: str) -> str:
            roll = rng.random()
            if roll < 0.4:
                return f"`{name}()`"
            if roll < 0.65:
                return f"{name}()"
            if roll < 0.9:
                return f"`{name}`"
            return f"`{rng.choice(_ID_NOUNS)}.{name}()`"

        found = [symbol(s) for s in rng.sample(repo.symbols, rng.randint(0, 3))]
        absent = [symbol(s) for s in rng.sample(repo.absent_symbols, rng.randint(0, 2))]
        if kind == "fresh":
            return [path(p) for p in rng.sample(repo.files, rng.randint(1, 3))], found
        if kind == "evergreen":
            outside = rng.sample(repo.outside_paths, rng.randint(0, 2))
            return [path(p) for p in outside], found + absent
        if kind == "moved":
            moved = [path(rng.choice(repo.moved_paths))]
            return moved + [path(p) for p in rng.sample(repo.files, rng.randint(0, 1))], found
        if kind == "partial":
            return [path(rng.choice(repo.files)), path(rng.choice(repo.absent_paths))], found
        stale = rng.sample(repo.absent_paths, rng.randint(1, 2))
        return [path(p) for p in stale], absent

    def body(self, kind: str, size: int, prohibition: bool) -> str:
        rng = self.rng
        paths, symbols = self.refs(kind)
        refs = paths + symbols
        rng.shuffle(refs)
        out = [self.sentence(refs.pop() if refs else ""), "", "**Why:** " + self.sentence(), ""]
        if prohibition:
            out.append(
                rng.choice(_PROHIBITIONS).format(
                    verb=rng.choice(_ID_VERBS), obj=rng.choice(self.tail)
                )
            )
        out += ["", "**How to apply:**", ""]
        while refs or sum(len(s) + 1 for s in out) < size:
            out.append("- " + self.sentence(refs.pop() if refs and rng.random() < 0.7 else ""))
        return "\n".join(out) + "\n"

    def perturb(self, body: str, rate: float) -> str:
        """The same body with about `rate` of its plain words swapped for others."""
        rng = self.rng
        lines = []
        for line in body.split("\n"):
            tokens = line.split(" ")
            for i, tok in enumerate(tokens):
                plain = tok.isalpha() or "-" in tok
                if plain and rng.random() < rate:
                    tokens[i] = rng.choice(self.tail)
            lines.append(" ".join(tokens))
        return "\n".join(lines)


def _kind(rng: random.Random) -> str:
    roll = rng.random()
    for kind, share in KIND_SHARES:
        roll -= share
        if roll < 0:
            return kind
    return KIND_SHARES[-1][0]


def _type(rng: random.Random) -> str:
    roll = rng.random() * sum(w for _, w in _synth.TYPES)
    for type_, weight in _synth.TYPES:
        roll -= weight
        if roll < 0:
            return type_
    return _synth.TYPES[-1][0]


def _shape(rng: random.Random) -> str:
    mix = _synth.REALISTIC_MIX
    roll = rng.random() * sum(mix.values())
    for shape, weight in mix.items():
        roll -= weight
        if roll < 0:
            return shape
    return list(mix)[-1]


def _write(
    path: Path, info: _synth.SynthFile, text: str, body: str, age: float, now: float
) -> None:
    head = text.split("\n---\n", 1)[0]
    target = path / info.filename
    target.write_bytes(f"{head}\n---\n\n{body}".encode())
    os.utime(target, (now - age, now - age))


def make_dream_dir(path: Path, n: int, repo: Repo, *, seed: int, now: float) -> Planted:
    """n memories about `repo`, a README note and a managed MEMORY.md (not yet settled)."""
    rng = random.Random(seed)
    writer = Writer(rng, repo)
    path.mkdir(parents=True, exist_ok=True)
    planted = Planted(n)
    users = set(rng.sample(range(n), _synth.user_count(n)))
    bodies: list[tuple[str, str, float]] = []  # (type, body, age) of originals, for copies
    infos: list[_synth.SynthFile] = []
    n_pairs = max(3, n // 400)
    pair_at = set(rng.sample(range(n // 10, n - 1, 2), n_pairs)) if n > 40 else set()
    i = 0
    while i < n:
        age = (
            rng.uniform(1, 13) * DAY if rng.random() < RECENT_SHARE else rng.uniform(30, 400) * DAY
        )
        if i in pair_at:
            # A contradiction: an older "always use X" and a newer "never use X", overlap ~0.5.
            type_ = rng.choice(("project", "feedback"))
            tool, what = rng.choice(_TOOLS), rng.choice(writer.tail)
            base = writer.body("evergreen", rng.randint(700, 1500), False)
            older = base + f"\nAlways use {tool} for {what} here.\n"
            newer = ""
            for rate in (0.45, 0.4, 0.5, 0.35, 0.55, 0.3, 0.6):
                candidate = writer.perturb(base, rate) + f"\nNever use {tool} for {what} here.\n"
                a, b = significant_words(older), significant_words(candidate)
                ov = len(a & b) / min(len(a), len(b))
                if CONTRADICTION + 0.02 <= ov < DUPLICATE - 0.02:
                    newer = candidate
                    break
            if newer:
                for offset, body, when in (
                    (0, older, age),
                    (1, newer, age - rng.uniform(1, 10) * DAY),
                ):
                    info, text = _synth.render_file(rng, i + offset, type_, _shape(rng))
                    _write(path, info, text, body, max(when, 15 * DAY), now)
                    infos.append(info)
                planted.contradictions += 1
                planted.kinds["evergreen"] += 2
                i += 2
                continue
        type_ = "user" if i in users else _type(rng)
        if bodies and rng.random() < DUP_SHARE:
            src_type, src_body, _ = bodies[rng.randrange(len(bodies))]
            type_ = src_type if i not in users else type_
            body = writer.perturb(src_body, 0.1)
            planted.duplicates += 1
            kind = "copy"
        else:
            kind = _kind(rng)
            size = int(min(3000, max(250, rng.lognormvariate(6.7, 0.6))))
            prohibition = rng.random() < PROHIBITION_SHARE
            body = writer.body(kind, size, prohibition)
            bodies.append((type_, body, age))
            if kind == "stale" and type_ == "project" and not prohibition and age > 14 * DAY:
                planted.stale_unguarded += 1
        planted.kinds[kind] += 1
        info, text = _synth.render_file(rng, i, type_, _shape(rng))
        _write(path, info, text, body, age, now)
        infos.append(info)
        i += 1
    (path / "README.md").write_text("# Notes\n\nA folder of memories for the benches.\n")
    index = _synth.render_index(path.name, infos).encode("utf-8")
    if len(index) > MAX_INDEX_BYTES:
        # Past memoryd's read limit the dir would be unmanaged and a real pass would move
        # nothing. A dir this big grew up under memoryd: start from an empty index (a heading
        # alone would read as a hand-written one) and let the settle build MEMORY.md and its
        # archive, as the daemon would have.
        index = b""
    (path / "MEMORY.md").write_bytes(index)
    return planted


# --- measuring ---------------------------------------------------------------------------------
@dataclass
class Row:
    label: str
    naive: list[float]
    memoryd: list[float]
    target: float | None  # seconds or bytes; None: no target
    unit: str = "time"  # time | bytes
    stat: str = "median"  # median | p99 | max | first (the first run: a cold process)
    extrapolated: bool = False  # the naive figure is scaled up from a sample
    censored: bool = False  # the last memoryd run was stopped at a time limit: a lower bound

    def value(self, samples: Sequence[float]) -> float:
        if self.stat == "max":
            return max(samples)
        if self.stat == "first":
            return samples[0]
        return percentile(samples, 99) if self.stat == "p99" else statistics.median(samples)

    @property
    def met(self) -> str:
        if self.target is None or not self.memoryd:
            return "—"
        if self.censored:
            return "NO"
        return "yes" if self.value(self.memoryd) <= self.target else "NO"


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "bytes":
        return f"{value / MB:.0f} MB"
    if value >= 100:
        return f"{value / 60:.1f} min"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 0.01:
        return f"{value * 1000:.0f} ms"
    return f"{value * 1000:.2f} ms"


def render_table(rows: Sequence[Row]) -> str:
    header = ("figure", "naive baseline", "memoryd", "ratio", "target", "met?")
    body = []
    for row in rows:
        naive = row.value(row.naive) if row.naive else None
        if row.stat == "first" and row.naive:
            naive = statistics.median(row.naive)  # the baseline has no caches to be cold in
        mine = row.value(row.memoryd) if row.memoryd else None
        ratio = f"{naive / mine:,.1f}×" if naive and mine else "—"
        shown = fmt(naive, row.unit) + (" (extrapolated)" if row.extrapolated else "")
        target = "≤ " + fmt(row.target, row.unit) if row.target is not None else "—"
        label = f"{row.label} [{row.stat}]"
        mine_shown = ("> " if row.censored else "") + fmt(mine, row.unit)
        if row.censored and naive and mine:
            ratio = f"< {naive / mine:,.1f}×"
        body.append((label, shown, mine_shown, ratio, target, row.met))
    return markdown_table(header, body)


def peak_rss() -> dict[str, int]:
    """ru_maxrss of this process in bytes, and Linux's VmHWM as a cross-check."""
    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"ru_maxrss": raw if sys.platform == "darwin" else raw * 1024}
    with contextlib.suppress(OSError), open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(b"VmHWM:"):
                out["vmhwm"] = int(line.split()[1]) * 1024
    return out


def run_child(job: dict[str, Any]) -> dict[str, Any]:
    """Run `job` in a fresh interpreter and return what it printed as JSON.

    On Linux ru_maxrss survives exec: a child exec'd straight from this (large) process would
    start at this process's peak. A shell in between forks the interpreter from a small process.
    """
    argv = [sys.executable, str(Path(__file__).resolve()), "--_child", json.dumps(job)]
    if os.name == "posix" and Path("/bin/sh").exists():
        argv = ["/bin/sh", "-c", '"$@"; exit $?', "sh", *argv]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"child {job['kind']} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def make_runtime(root: Path) -> Runtime:
    paths = AppPaths(config_file=root / "c.toml", state_dir=root / "state", log_dir=root / "log")
    # A Claude home of the bench's own: the consult scan must not read this user's transcripts.
    return Runtime.create(Config(paths=PathsConfig(claude_home=root / "claude")), paths)


def memory_dir(path: Path, repo_root: Path) -> MemoryDir:
    found = discover(Config(), [path])[0]
    return replace(found, repo_root=repo_root, repo_reason="bench")


def fresh_copy(work: Path, src: Path, dst: Path) -> None:
    """Copy a settled memory dir (mtimes kept) and carry the daemon's state for it over.

    The daemon has seen the dir before a pass runs: its scan cache and index state are moved
    to the copy's path, with the copy's inode numbers, so the copy is as warm as the original.
    A throwaway StateStore does it, so the pass's own store holds nothing extra in memory.
    """
    shutil.copytree(src, dst, copy_function=shutil.copy2)
    store = StateStore(work / "state")
    cache = store.load_cache(src.resolve())
    moved = {}
    for name, scanned in cache.items():
        with contextlib.suppress(OSError):
            moved[name] = replace(scanned, ino=os.lstat(dst / name).st_ino)
    store.save_cache(dst.resolve(), moved)
    state = store.load(src.resolve())
    if state.settled:  # the identities of the index files the settling pass left, the copy's
        main, archive, settings = state.settled
        state.settled = [
            None if was is None else [os.lstat(dst / name).st_ino, *was[1:]]
            for was, name in ((main, INDEX_NAME), (archive, ARCHIVE_NAME))
        ] + [settings]
    store.save(dst.resolve(), state)
    carry_facts(store, src, dst)


def carry_facts(store: StateStore, src: Path, dst: Path) -> None:
    """Give `dst` the dream facts an earlier real pass saved for `src` (they are keyed by
    content, so a dir with the same files may use them as they are)."""
    data = store.load_facts(src.resolve())
    if data is not None:
        store.save_facts(dst.resolve(), [data])


def settle(rt: Runtime, md: MemoryDir) -> str:
    """Index the dir until nothing changes, as the daemon would have before any pass."""
    outcome = passes.update(rt, md)
    for _ in range(2):
        if outcome.status != "updated":
            break
        outcome = passes.update(rt, md)
    return outcome.status + (f" ({outcome.message})" if outcome.message else "")


# --- the naive baselines -----------------------------------------------------------------------
def naive_words(body: str) -> frozenset[str]:
    return frozenset(w for w in body.lower().split() if len(w) > 2 and w not in STOPWORDS)


def naive_load(
    path: Path, limit: int | None = None
) -> tuple[list[tuple[str, frozenset[str]]], int]:
    """python-frontmatter on every memory file, then its words as a frozenset of str."""
    names = sorted(
        n for n in os.listdir(path) if n.endswith(".md") and not n.startswith(("MEMORY", "."))
    )[:limit]
    docs, failed = [], 0
    for name in names:
        try:
            post = frontmatter.load(path / name)
        except Exception:  # a naive tool skips what it cannot parse
            failed += 1
            continue
        meta = post.metadata.get("metadata")
        type_ = post.metadata.get("type") or (meta.get("type") if isinstance(meta, dict) else "")
        if not post.metadata:
            continue  # the README
        docs.append((str(type_), naive_words(post.content)))
    return docs, failed


def naive_pairs(docs: Sequence[tuple[str, frozenset[str]]]) -> int:
    """All pairs, one frozenset intersection each; counts pairs at the contradiction floor."""
    found = 0
    for (ta, a), (tb, b) in itertools.combinations(docs, 2):
        if ta == tb and a and b and len(a & b) / min(len(a), len(b)) >= CONTRADICTION:
            found += 1
    return found


# --- the child process: one size's memoryd passes ----------------------------------------------
def phase_times(
    fn: Callable[[], Any], sink: dict[str, Any]
) -> tuple[float, list[tuple[str, float, int]], Any]:
    """Run `fn` once; its wall time, the exclusive time of each collaborator, its result.

    The breakdown also goes into `sink` ("total", "phases"), even when `fn` is interrupted.
    Wrapping costs about a microsecond a call (~0.1 s of a 10,000-memory pass).
    """
    from memoryd.dream import facts as facts_mod
    from memoryd.dream import inventory as inventory_mod
    from memoryd.dream import plan as plan_mod
    from memoryd.dream import read as read_mod
    from memoryd.dream import refs as refs_mod
    from memoryd.dream import repocache as repocache_mod
    from memoryd.dream import run as run_mod
    from memoryd.dream import similar as similar_mod
    from memoryd.dream import write as write_mod
    from memoryd.storage import fsops
    from memoryd.storage.state import StateStore

    # A running (seconds, calls) per label, not one sample per call: at 100,000 memories a list
    # per wrapped function would add tens of MB to the peak RSS of the pass being measured.
    spent: dict[str, list[float]] = {}
    nested: list[float] = []
    patched: list[tuple[object, str, object]] = []

    def wrap(owner: object, attr: str, label: str) -> None:
        original = getattr(owner, attr)

        def timed_call(*args: object, **kwargs: object) -> object:
            nested.append(0.0)
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                took = time.perf_counter() - start
                inner = nested.pop()
                total = spent.setdefault(label, [0.0, 0])
                total[0] += took - inner
                total[1] += 1
                if nested:
                    nested[-1] += took

        patched.append((owner, attr, original))
        setattr(owner, attr, timed_call)

    for owner, attr, label in (
        (repocache_mod.RepoCache, "checker", "repo snapshot (the rest)"),
        (repocache_mod, "load_sources", "repo token cache: read from the state dir"),
        (repocache_mod, "dump_sources", "repo token cache: written to the state dir"),
        (RepoIndex, "build", "RepoIndex.build (walk + tokens of changed sources)"),
        (read_mod, "ownership_for_dream", "the ownership probe (indexer.ownership_for_dream)"),
        (run_mod, "index_after_dream", "index update (no moves)"),
        (write_mod, "index_after_dream", "index update after the moves (held edit or full pass)"),
        (inventory_mod, "scan_dir", "scan_dir in inventory (stat, cache)"),
        (fsops, "read_regular", "fsops.read_regular (open + read)"),
        (
            inventory_mod,
            "parse_memory",
            "parse_memory (frontmatter, sha256): content not seen before",
        ),
        (inventory_mod, "derive", "derive (the rest)"),
        (facts_mod, "extract_refs", "extract_refs"),
        (facts_mod, "words_and_directives", "words_and_directives"),
        (facts_mod, "prohibition", "prohibition"),
        (similar_mod.Vocabulary, "ids", "Vocabulary.ids"),
        (inventory_mod, "make_item", "make_item (the rest)"),
        (refs_mod.RefChecker, "check", "RefChecker.check (each distinct reference once)"),
        (plan_mod, "classify", "classify"),
        (read_mod, "consult_map", "consult_map"),
        (read_mod, "plan_pass", "plan_pass (the rest)"),
        (plan_mod, "find_similar_pairs", "find_similar_pairs"),
        (StateStore, "load", "StateStore.load (sqlite)"),
        (StateStore, "save", "StateStore.save (sqlite)"),
    ):
        wrap(owner, attr, label)
    gc.collect()
    start = time.perf_counter()
    try:
        result = fn()
    finally:
        total = time.perf_counter() - start
        for patched_owner, attr, original in reversed(patched):
            setattr(patched_owner, attr, original)
        rows = sorted(((k, v[0], int(v[1])) for k, v in spent.items()), key=lambda r: -r[1])
        sink["total"], sink["phases"] = total, rows
    return total, rows, result


def profile_top(fn: Callable[[], object], limit: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    stats.sort_stats("cumulative").print_stats(limit)
    return re.sub(r"\n{3,}", "\n\n", out.getvalue()).strip("\n")


def _moves(result: DreamResult) -> dict[str, int]:
    out = {"stale": 0, "duplicate": 0, "contradiction": 0}
    for record in result.moved:
        out[record.reason] = out.get(record.reason, 0) + 1
    return out


class Deadline(BaseException):
    """Raised inside a pass that ran past its time limit (BaseException: nothing catches it)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise Deadline

    if not hasattr(signal, "setitimer"):
        yield
        return
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def child_pass(job: dict[str, Any]) -> dict[str, Any]:
    """One size in a fresh process, so that the first pass's peak RSS is that pass's own.

    mode "dry": `repeat` dry passes over the settled dir. mode "real": real passes, each on a
    fresh copy, until `real_repeat` of them or the time budget is spent.
    """
    work = Path(job["work"])
    master = Path(job["dir"])
    repo_root = Path(job["repo"])
    rt = make_runtime(work)
    out: dict[str, Any] = {"times": [], "moved": [], "status": {}}
    if job["engine"] != "auto":
        from memoryd.dream import similar

        if job["engine"] == "numpy" and not HAVE_NUMPY:
            raise RuntimeError("--engine numpy: numpy is not installed")
        similar.HAVE_NUMPY = job["engine"] == "numpy"  # type: ignore[misc]

    def note(k: int, result: DreamResult) -> None:
        out["status"][result.status] = result.message
        if k == 0:
            out["rss_first"] = peak_rss()
            if result.plan is not None:
                out["plan"] = dict(Counter(m.reason.value for m in result.plan.moves))
                out["limit"] = result.plan.limit
                out["counts"] = result.counts()
                out["similar"] = len(result.plan.similar)

    if job["mode"] == "dry":
        md = memory_dir(master, repo_root)

        def dry() -> DreamResult:
            return dream_dir(rt, md, repos=RepoCache.of(rt), dry_run=True)

        for k in range(job["repeat"]):
            if k == job["repeat"] - 1:  # the last one also says where the time goes
                out["phases"] = {}
                took, _, result = phase_times(dry, out["phases"])
            else:
                gc.collect()
                start = time.perf_counter()
                result = dry()
                took = time.perf_counter() - start
            out["times"].append(took)
            note(k, result)
        out["rss_end"] = peak_rss()
        if job["profile"] == "dry":
            out["profile"] = profile_top(dry, job["profile_lines"])
        return out

    copies = work / "copies"
    spent = 0.0
    for k in range(job["real_repeat"]):
        if k and spent >= job["real_budget"]:
            break
        dst = copies / f"run-{k}"
        fresh_copy(work, master, dst)
        md_copy = memory_dir(dst, repo_root)

        def real(md_copy: MemoryDir = md_copy) -> DreamResult:
            return dream_dir(rt, md_copy, repos=RepoCache.of(rt))

        # Every real pass is timed with the breakdown on (< 1 % of it); the last one is shown.
        out["phases"] = {}
        try:
            with deadline(job["timeout"]):
                took, _, result = phase_times(real, out["phases"])
        except Deadline:
            out["times"].append(float(job["timeout"]))
            out["censored"] = True
            if k == 0:
                out["rss_first"] = peak_rss()
            shutil.rmtree(dst)
            break
        spent += took
        out["times"].append(took)
        note(k, result)
        out["moved"].append(_moves(result))
        # Which index update the pass made after its moves: the held edit of a settled index
        # (the daemon keeps it settled), or a full pass.
        out["index"] = (
            f"{result.index.status} ({'held edit' if result.index.held_edit else 'full pass'})"
            if result.index
            else "—"
        )
        shutil.rmtree(dst)
    out["rss_end"] = peak_rss()
    if job["profile"] == "real":
        dst = copies / "profiled"
        fresh_copy(work, master, dst)
        md_copy = memory_dir(dst, repo_root)
        out["profile"] = profile_top(
            lambda: dream_dir(rt, md_copy, repos=RepoCache.of(rt)), job["profile_lines"]
        )
        shutil.rmtree(dst)
    return out


def child_naive_rss(job: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS of the naive baseline holding every parsed file's word set."""
    docs, _ = naive_load(Path(job["dir"]))
    out = peak_rss()
    assert docs
    return out


# --- figure 1: the full pass at one size -------------------------------------------------------
def print_phases(title: str, total: float, phases: Sequence[Sequence[Any]]) -> None:
    print(f"-- where the time goes: {title} (exclusive wall times) --")
    rest = total
    for name, seconds, calls in phases:
        rest -= seconds
        print(f"  {fmt(seconds, 'time'):>9}  {name} ({calls:,} call(s))")
    print(f"  {fmt(rest, 'time'):>9}  the rest of dream_dir")
    print(f"  {fmt(total, 'time'):>9}  total")


def bench_pass(n: int, repo: Repo, work: Path, args: argparse.Namespace) -> list[Row]:
    path = work / f"memory-{n}"
    built = time.perf_counter()
    planted = make_dream_dir(path, n, repo, seed=args.seed + n, now=time.time())
    rt = make_runtime(work)
    md = memory_dir(path, repo.root)
    build_s = time.perf_counter() - built
    start = time.perf_counter()
    settled = settle(rt, md)
    settle_s = time.perf_counter() - start
    repeat = args.repeat * 2 + 1 if n <= 2_000 else args.repeat
    print(
        f"\n== 1. dream pass: {n:,} memories in one dir, repo root of {len(repo.files):,} files "
        f"({_synth.tree_bytes(path) / MB:.1f} MB of memories, built in {build_s:.1f} s; index "
        f"settled in {settle_s:.1f} s: {settled}) ==",
        flush=True,
    )
    print("   " + planted.describe())

    # memoryd: dry passes in one fresh interpreter, real passes in another (each one's peak
    # RSS is its own); the state dir is the one the settle above wrote.
    job = {
        "kind": "pass",
        "work": str(work),
        "dir": str(path),
        "repo": str(repo.root),
        "repeat": repeat,
        "real_repeat": args.real_repeat,
        "real_budget": args.real_budget,
        "timeout": args.pass_timeout,
        "profile": args.profile if n == 10_000 else "off",
        "profile_lines": args.profile_lines,
        "engine": args.engine,
    }
    dry = run_child({**job, "mode": "dry"})
    real = run_child({**job, "mode": "real"})
    # Both first passes above found nothing saved: no pass had run over these files. The real
    # ones saved the repo's token cache and the facts of every file they read; the master dir
    # gets the facts of the first (same files), as an earlier real pass over it would have left
    # them. Then one more first pass of each kind in a fresh process: the usual `memoryd dream`.
    carry_facts(StateStore(work / "state"), work / "copies" / "run-0", path)
    warm_dry = run_child({**job, "mode": "dry", "repeat": 1, "profile": "off"})
    warm_real = run_child({**job, "mode": "real", "real_repeat": 1, "profile": "off"})

    # The naive baseline: python-frontmatter + all pairs of frozensets, in this process.
    naive_repeat = args.naive_repeat
    if n <= NAIVE_PAIR_SAMPLE:
        docs, failed = naive_load(path)
        parse = timed(lambda: naive_load(path), naive_repeat)
        pairs = timed(lambda: naive_pairs(docs), naive_repeat)
        naive = [a + b for a, b in zip(parse, pairs, strict=True)]
        how = "measured in full"
        extrapolated = False
    else:
        parse_n = min(n, 10_000)
        docs, failed = naive_load(path, parse_n)
        parse = [t * n / parse_n for t in timed(lambda: naive_load(path, parse_n), naive_repeat)]
        sample = docs[:NAIVE_PAIR_SAMPLE]
        scale = (n / len(sample)) ** 2
        pairs = [t * scale for t in timed(lambda: naive_pairs(sample), naive_repeat)]
        naive = [a + b for a, b in zip(parse, pairs, strict=True)]
        how = f"pairs timed on {len(sample):,} memories and scaled by n² (×{scale:,.0f})" + (
            f", parsing timed on {parse_n:,} and scaled by n" if parse_n < n else ""
        )
        extrapolated = True
    failed_n = round(failed * n / min(n, 10_000))
    naive_rss = run_child({"kind": "naive_rss", "dir": str(path)}) if n <= 10_000 else None

    plan = dry["plan"]
    counts = dry["counts"]
    print(
        f"   plan: would move {sum(plan.values()):,} (stale {plan['stale']:,}, duplicate "
        f"{plan['duplicate']:,}, contradiction {plan['contradiction']:,}) of {n:,}; breaker "
        f"limit {dry['limit']:,}; {dry['similar']:,} pairs at overlap ≥ {CONTRADICTION}; "
        f"flagged {counts['flagged']:,} (kept by a guard {counts['kept_by_guard']:,})"
    )
    censored = bool(real.get("censored"))
    print(
        f"   first passes in a fresh process after a real pass saved its caches: dry "
        f"{fmt(warm_dry['times'][0], 'time')}, real {fmt(warm_real['times'][0], 'time')}"
    )
    print(
        f"   dry passes ({len(dry['times'])}, the first in a fresh process): "
        + ", ".join(fmt(t, "time") for t in dry["times"])
        + f"; real passes ({len(real['times'])}, each on a fresh copy, the first in a fresh "
        "process): "
        + ", ".join(fmt(t, "time") for t in real["times"])
        + (f" (the last stopped at the {fmt(args.pass_timeout, 'time')} limit)" if censored else "")
    )
    for what, res, expected in (("dry", dry, "dry_run"), ("real", real, "completed")):
        if res["status"] and set(res["status"]) != {expected}:
            print(f"   WARNING: {what} passes ended as {res['status']}")
    if real["moved"]:
        moved = real["moved"][-1]
        print(
            f"   real pass: {'/'.join(sorted(real['status']))}, moved {sum(moved.values()):,} "
            f"into the trash (stale {moved['stale']:,}, duplicate {moved['duplicate']:,}, "
            f"contradiction {moved['contradiction']:,}); index after: {real.get('index', '—')}"
        )
    rss = max(r["rss_first"]["ru_maxrss"] for r in (dry, real, warm_dry, warm_real))
    hwm = {k: r["rss_end"].get("vmhwm", 0) / MB for k, r in (("dry", dry), ("real", real))}
    print(
        f"   peak RSS (ru_maxrss) of one pass in a fresh process: dry "
        f"{dry['rss_first']['ru_maxrss'] / MB:.0f} MB, real "
        f"{real['rss_first']['ru_maxrss'] / MB:.0f} MB; after every pass: dry "
        f"{dry['rss_end']['ru_maxrss'] / MB:.0f} MB, real "
        f"{real['rss_end']['ru_maxrss'] / MB:.0f} MB"
        + (f" (VmHWM {hwm['dry']:.0f} / {hwm['real']:.0f} MB)" if hwm["dry"] else "")
        + f"; first passes after a real pass saved its caches: dry "
        f"{warm_dry['rss_first']['ru_maxrss'] / MB:.0f} MB, real "
        f"{warm_real['rss_first']['ru_maxrss'] / MB:.0f} MB"
    )
    print(
        f"   naive: python-frontmatter could not load {failed_n:,} of {n:,} files (strict "
        f"YAML; skipped); {how}"
    )
    label = f"{n:,} memories"
    if set(dry["status"]) != {"dry_run"}:
        label += f" ({'/'.join(sorted(dry['status']))}!)"
    target = 0.3 if n <= 1_000 else (3.0 if n <= 10_000 else 180.0)
    runs = len(real["times"])
    real_note = ""
    if censored:
        real_note = f" ({runs} run{'s' if runs > 1 else ''}, the last stopped)"
    elif runs < args.real_repeat:
        real_note = f" ({runs} run{'s' if runs > 1 else ''}: time budget)"
    rows = [
        Row(
            f"1. dream pass, {label}, dry run",
            naive,
            dry["times"],
            target,
            extrapolated=extrapolated,
        ),
        Row(
            f"1. dream pass, {label}, real, fresh copy" + real_note,
            naive,
            real["times"],
            target,
            extrapolated=extrapolated,
            censored=censored,
        ),
        Row(
            f"1. dream pass, {label}, dry run, first in a fresh process",
            naive,
            warm_dry["times"],
            target,
            stat="first",
            extrapolated=extrapolated,
        ),
        Row(
            f"1. dream pass, {label}, real, first in a fresh process",
            naive,
            warm_real["times"],
            target,
            stat="first",
            extrapolated=extrapolated,
            censored=bool(warm_real.get("censored")),
        ),
        Row(
            f"1. dream pass, {label}, dry run, first ever (nothing saved)",
            naive,
            dry["times"],
            target,
            stat="first",
            extrapolated=extrapolated,
        ),
        Row(
            f"1. dream pass, {label}, real, first ever (nothing saved)",
            naive,
            real["times"],
            target,
            stat="first",
            extrapolated=extrapolated,
            censored=censored and runs == 1,
        ),
        Row(
            f"1. peak RSS of one pass, {label}, fresh process",
            [naive_rss["ru_maxrss"]] if naive_rss else [],
            [rss],
            500 * MB if n >= 100_000 else None,
            unit="bytes",
            stat="max",
        ),
    ]
    if n >= 10_000:
        for what, res in (
            ("dry pass", dry),
            ("real pass", real),
            ("first real pass in a fresh process, caches saved", warm_real),
        ):
            if res.get("phases"):
                stopped = " (stopped at the time limit)" if res is real and censored else ""
                print()
                print_phases(
                    f"the last {what}, {label}{stopped}",
                    res["phases"]["total"],
                    res["phases"]["phases"],
                )
    for res in (dry, real):
        if "profile" in res:
            what = "real pass on a fresh copy" if res is real else "dry pass"
            print(
                f"\n-- cProfile: one {what}, {label}: "
                f"top {args.profile_lines} by cumulative time --"
            )
            print(res["profile"])
    return rows


# --- figure 2: stale-symbol check --------------------------------------------------------------
def symbol_bodies(repo: Repo, n: int, seed: int) -> tuple[list[str], set[str], set[str]]:
    """n memory bodies naming 2-5 symbols each (~70 % defined in the tree), and the truth."""
    rng = random.Random(seed)
    writer = Writer(rng, repo)
    bodies: list[str] = []
    real: set[str] = set()
    absent: set[str] = set()
    for _ in range(n):
        refs = []
        for _ in range(rng.randint(2, 5)):
            pool, truth = (
                (repo.symbols, real) if rng.random() < 0.7 else (repo.absent_symbols, absent)
            )
            name = rng.choice(pool)
            truth.add(name)
            refs.append(rng.choice((f"`{name}()`", f"{name}()", f"`{name}`", f"def {name}")))
        if rng.random() < 0.5:
            refs.append(f"`{rng.choice(repo.files)}`")
        lines = [writer.sentence(refs.pop())]
        while refs:
            lines.append("- " + writer.sentence(refs.pop()))
        lines.append(writer.sentence())
        bodies.append("\n".join(lines) + "\n")
    return bodies, real, absent


def bench_symbols(repo: Repo, args: argparse.Namespace) -> list[Row]:
    n = 1_000
    bodies, real, absent = symbol_bodies(repo, n, args.seed + 7)

    def check_all() -> tuple[RepoIndex, list[Any]]:
        index = RepoIndex.build(repo.root)
        checker = RefChecker(index)
        return index, [checker.check(extract_refs(body)) for body in bodies]

    index, checks = check_all()
    symbols = sorted({c.ref for cs in checks for c in cs if c.kind == "symbol"})
    wrong = [
        c.ref
        for cs in checks
        for c in cs
        if c.kind == "symbol"
        and (
            (c.ref in real and c.status is not Status.FOUND)
            or (c.ref in absent and c.status is not Status.MISSING)
        )
    ]
    build = timed(lambda: RepoIndex.build(repo.root), args.repeat * 2 + 1)
    mine = timed(check_all, args.repeat * 2 + 1)

    rng = random.Random(args.seed + 11)
    sample = rng.sample(symbols, min(len(symbols), args.grep_sample))
    scale = len(symbols) / len(sample)

    def grep(name: str) -> None:
        subprocess.run(["grep", "-rqw", "--", name, str(repo.root)], check=False)

    # One naive run greps every distinct symbol once: each round greps the sample, scaled up.
    per_symbol: dict[str, list[float]] = {name: [] for name in sample}
    naive = []
    for _ in range(args.naive_repeat):
        total = 0.0
        for name in sample:
            took = timed(functools.partial(grep, name), 1)[0]
            per_symbol[name].append(took)
            total += took
        naive.append(total * scale)
    one_grep = statistics.median(statistics.median(v) for v in per_symbol.values())
    missing = sum(1 for s in symbols if s not in index.tokens)
    print(
        f"\n== 2. stale-symbol check: {n:,} memories naming {len(symbols):,} distinct symbols "
        f"({missing:,} absent from the tree) vs {len(index.files):,} files, "
        f"{len(index.tokens):,} distinct tokens =="
    )
    print(
        f"   RepoIndex.build alone: {fmt(statistics.median(build), 'time')} (median); memoryd "
        f"misjudged {len(wrong)} symbol mentions; one grep -rqw: median "
        f"{fmt(one_grep, 'time')} over {len(sample)} sampled symbols, "
        f"scaled to {len(symbols):,} symbols"
    )
    return [
        Row(
            f"2. stale-symbol check, {n:,} memories vs {len(repo.files):,}-file tree",
            naive,
            mine,
            1.0,
            extrapolated=True,
        )
    ]


# --- figure 3: one changed memory against 10,000 -----------------------------------------------
# --- main --------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", action="store_true", help="also run 100,000 memories")
    parser.add_argument(
        "--n", type=int, nargs="+", default=[1_000, 10_000], help="memory dir sizes for figure 1"
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per size (1,000: 2r+1)")
    parser.add_argument(
        "--real-repeat", type=int, default=3, help="real passes on fresh copies (at most)"
    )
    parser.add_argument(
        "--real-budget",
        type=float,
        default=90.0,
        help="seconds of real passes per size after which no new one starts (default 90)",
    )
    parser.add_argument(
        "--pass-timeout",
        type=float,
        default=600.0,
        help="a real pass still running after this many seconds is stopped (default 600)",
    )
    parser.add_argument("--naive-repeat", type=int, default=3, help="timed naive runs")
    parser.add_argument("--grep-sample", type=int, default=24, help="symbols grepped (figure 2)")
    parser.add_argument(
        "--engine",
        choices=("auto", "numpy", "pure"),
        default="auto",
        help="duplicate-search engine of the pass in figure 1 (auto: numpy when installed)",
    )
    parser.add_argument(
        "--profile",
        choices=("off", "dry", "real"),
        default="off",
        help="also cProfile one 10,000-memory pass: a dry one, or a real one on a fresh copy",
    )
    parser.add_argument("--profile-lines", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._child:
        job = json.loads(args._child)
        handler = {"pass": child_pass, "naive_rss": child_naive_rss}[job["kind"]]
        print(json.dumps(handler(job)))
        return 0

    sizes = sorted(set(args.n) | ({100_000} if args.big else set()))
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    print(
        f"memoryd dream bench — Python {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPUs, numpy "
        f"{'installed' if HAVE_NUMPY else 'not installed'}, pass engine {args.engine}, "
        f"load average {load[0]:.2f} at start; wall clock, warm page cache; medians"
    )
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parent), "log", "-1", "--format=%h %cI"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(Path(__file__).resolve().parents[1]),
                "status",
                "--porcelain",
                "memoryd",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        if head:
            print(f"memoryd at commit {head}" + (" + uncommitted changes" if dirty else ""))
    started = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-dream-") as tmp_name:
        work = Path(tmp_name)
        built = time.perf_counter()
        repo = make_repo(work / "repo", TREE_FILES, args.seed)
        print(
            f"repo root: {len(repo.files):,} files, {len(repo.symbols):,} code-like identifiers "
            f"defined, built in {time.perf_counter() - built:.1f} s"
        )
        for n in sizes:
            rows += bench_pass(n, repo, work, args)
        rows += bench_symbols(repo, args)
    print("\n" + render_table(rows))
    print(
        "ratio = naive / memoryd. Naive pass: python-frontmatter per file + all pairs of "
        "frozenset[str] (same type, overlap ≥ 0.4); naive symbol check: one `grep -rqw` per "
        "symbol. Peak RSS is "
        "ru_maxrss after the first pass of a fresh process (dry and real passes each get one, "
        "with and without saved caches; the largest is shown), launched through /bin/sh so it "
        "does not start at this process's peak; the naive one holds every parsed file's word "
        "set."
    )
    print(f"total bench time {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "label": r.label,
                        "stat": r.stat,
                        "unit": r.unit,
                        "naive": r.naive,
                        "memoryd": r.memoryd,
                        "target": r.target,
                        "extrapolated": r.extrapolated,
                    }
                    for r in rows
                ],
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
