"""Synthetic memory dirs for the benches: realistic files, a managed index, old mtimes.

Everything is derived from a seeded `random.Random`, so two runs with the same arguments build
byte-identical folders (only the mtimes follow the clock).

The frontmatter shapes and their default shares follow the real memory folders collected in
`shared/corpus` (439 files from 14 repos): most agents now nest `type` under `metadata:`, some
keep `related:` lists, and a few write a `: ` inside a plain description. `FLAT_MIX` is the
all-flat `name`/`description`/`type` case, for comparison.
"""

import os
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

DAY = 86400.0
SEPARATOR = " — "

# Frontmatter shapes: (shape, share). Shares are normalised; the corpus mix is ~16 % flat,
# ~77 % a nested `metadata:` block, ~2 % `related:` lists, ~4 % `: ` or ` #` inside a value.
REALISTIC_MIX: Mapping[str, float] = {
    "flat": 0.16,
    "flat_extra": 0.02,  # flat, plus originSessionId and a `modified` date
    "nested": 0.76,  # metadata: {node_type, type, originSessionId}
    "related": 0.02,  # type flat, `related:` as a block list
    "colon": 0.04,  # a plain description holding `: ` (strict YAML refuses it)
}
FLAT_MIX: Mapping[str, float] = {"flat": 0.9, "flat_extra": 0.1}
MIXES: Mapping[str, Mapping[str, float]] = {"realistic": REALISTIC_MIX, "flat": FLAT_MIX}

# Type shares among non-`user` memories; `user` memories are few (a person has one profile,
# not thousands), so they are capped rather than proportional: see `user_count`.
TYPES: Sequence[tuple[str, float]] = (("feedback", 0.45), ("project", 0.38), ("reference", 0.17))

_TOPICS = (
    "deploy",
    "staging",
    "migrations",
    "auth",
    "cache",
    "ci",
    "lint",
    "tests",
    "fixtures",
    "logging",
    "retries",
    "timeouts",
    "schema",
    "api",
    "cli",
    "docs",
    "release",
    "i18n",
    "perf",
    "profiling",
    "build",
    "docker",
    "k8s",
    "secrets",
    "config",
    "flags",
    "queue",
    "worker",
    "cron",
    "webhook",
    "search",
    "index",
    "parser",
    "router",
    "session",
    "upload",
)
_VERBS = (
    "always run",
    "never skip",
    "prefer",
    "avoid",
    "check",
    "pin",
    "mock only",
    "split",
    "rename",
    "document",
    "batch",
    "retry",
    "guard",
    "stub",
    "reuse",
    "inline",
)
_OBJECTS = (
    "the staging deploy",
    "migrations before seeding",
    "ruff before commit",
    "flaky e2e tests",
    "the retry budget",
    "config reloads",
    "the queue worker",
    "webhook signatures",
    "the release checklist",
    "fixture factories",
    "the cache warm-up",
    "schema drift",
    "long-running cron jobs",
    "the search reindex",
    "upload size limits",
    "session cookies",
)
_NON_ASCII = (
    "Überprüfung der Migrationen",
    "déploiement en préproduction",
    "テストは実機で確認する",
    "계획 문서는 한국어로",
    "ручная проверка релиза",
    "ñandú cache — señales",
    "emoji ✅ in logs",
    "naïve café résumé",
    "日本語のコミットメッセージ",
    "Größenlimit für Uploads",
)
_DIRS = ("src", "app", "lib", "tests", "scripts", "docs", "tools", "pkg", "internal", "web")
_FILES = (
    "deploy.py",
    "config.toml",
    "main.go",
    "index.ts",
    "worker.rs",
    "settings.py",
    "conftest.py",
    "Makefile",
    "Dockerfile",
    "schema.sql",
    "router.tsx",
    "justfile",
)
_SENTENCES = (
    "The user asked for this explicitly after a failed run, so keep doing it.",
    "This bit us twice: the second time it cost an afternoon of bisecting.",
    "Check the logs first; the error message is misleading and points at the wrong module.",
    "It only shows up under load, so the unit tests do not catch it.",
    "Do not revert this without asking: the old behaviour broke the nightly job.",
    "The staging environment differs from production in exactly this setting.",
    "Run the full suite, not just the changed module, because the fixtures are shared.",
    "Keep the change small and land it behind a flag first.",
    "The upstream library changed its default in the last minor release.",
    "Prefer the explicit form even though it is longer; reviewers asked for it.",
)


@dataclass(frozen=True, slots=True)
class SynthFile:
    filename: str
    name: str
    description: str
    type: str
    shape: str


def _path(rng: random.Random) -> str:
    depth = rng.randint(1, 3)
    parts = [rng.choice(_DIRS)] + [rng.choice(_TOPICS) for _ in range(depth - 1)]
    return "/".join([*parts, rng.choice(_FILES)])


def _body(rng: random.Random, size: int, non_ascii: bool) -> str:
    """Markdown of about `size` bytes: a lead, Why/How sections, bullets, backticked paths."""
    out = [
        f"{rng.choice(_SENTENCES)} See `{_path(rng)}`.",
        "",
        "**Why:** " + rng.choice(_SENTENCES),
    ]
    if non_ascii:
        out.append(f"Note: {rng.choice(_NON_ASCII)}.")
    out += ["", "**How to apply:**", ""]
    while sum(len(s.encode("utf-8")) + 1 for s in out) < size:
        roll = rng.random()
        if roll < 0.55:
            out.append(f"- {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} in `{_path(rng)}`")
        elif roll < 0.8:
            out.append(rng.choice(_SENTENCES))
        elif roll < 0.9:
            out += ["```sh", f"just {rng.choice(_TOPICS)} --{rng.choice(_TOPICS)}", "```"]
        else:
            out += ["", f"## {rng.choice(_TOPICS).title()}", ""]
    text = "\n".join(out) + "\n"
    encoded = text.encode("utf-8")[:size]
    return encoded.decode("utf-8", "ignore").rstrip() + "\n"


def _pick(rng: random.Random, shares: Mapping[str, float] | Sequence[tuple[str, float]]) -> str:
    items = list(shares.items()) if isinstance(shares, Mapping) else list(shares)
    roll = rng.random() * sum(w for _, w in items)
    for key, weight in items:
        roll -= weight
        if roll < 0:
            return key
    return items[-1][0]


def _quote(text: str) -> str:
    """A description as an agent writes it: plain when YAML reads it back unchanged, else quoted."""
    if any(c in text for c in ":#'\"[]{}&*!|>%@`") or text[:1] in "-? ":
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def user_count(n: int) -> int:
    """How many `user` memories a dir of n holds: a few, never enough to overflow the window."""
    return min(max(1, n // 200), 20)


def render_file(rng: random.Random, index: int, type_: str, shape: str) -> tuple[SynthFile, str]:
    topic = rng.choice(_TOPICS)
    non_ascii = rng.random() < 0.1
    slug = f"{type_}_{topic}_{rng.choice(_TOPICS)}_{index:05d}"
    filename = f"{slug}.md"
    if non_ascii:
        name = f"{rng.choice(_NON_ASCII)} ({index})"
    else:
        name = f"{rng.choice(_VERBS).capitalize()} {rng.choice(_OBJECTS)} ({index})"
    description = (
        f"{rng.choice(_VERBS).capitalize()} {rng.choice(_OBJECTS)} when touching "
        f"{rng.choice(_TOPICS)}; {rng.choice(_SENTENCES).rstrip('.').lower()}"
    )
    if non_ascii:
        description += f" — {rng.choice(_NON_ASCII)}"
    session = str(uuid.UUID(int=rng.getrandbits(128)))
    if shape == "colon":
        description = f"{description.split(';')[0]}: use `{_path(rng)}` only"
        fm = [f"name: {name}", f"description: {description}", f"type: {type_}"]
    elif shape == "flat":
        fm = [f"name: {_quote(name)}", f"description: {_quote(description)}", f"type: {type_}"]
    elif shape == "flat_extra":
        modified = time.strftime("%Y-%m-%d", time.gmtime(time.time() - rng.uniform(30, 400) * DAY))
        fm = [
            f"name: {_quote(name)}",
            f"description: {_quote(description)}",
            f"type: {type_}",
            f"originSessionId: {session}",
            f"modified: {modified}",
        ]
    elif shape == "nested":
        fm = [
            f"name: {_quote(name)}",
            f"description: {_quote(description)}",
            "metadata:",
            "  node_type: memory",
            f"  type: {type_}",
            f"  originSessionId: {session}",
        ]
    elif shape == "related":
        fm = [
            f"name: {_quote(name)}",
            f"description: {_quote(description)}",
            f"type: {type_}",
            "related:",
            *(f"  - {type_}_{rng.choice(_TOPICS)}.md" for _ in range(rng.randint(1, 3))),
        ]
    else:
        raise ValueError(shape)
    body = _body(rng, rng.randint(300, 3000), non_ascii)
    text = "---\n" + "\n".join(fm) + "\n---\n\n" + body
    return SynthFile(filename, name, description, type_, shape), text


def pointer_line(f: SynthFile) -> str:
    return f"- [{f.name}]({f.filename}){SEPARATOR}{f.description}"


def render_index(heading: str, files: Sequence[SynthFile]) -> str:
    """A managed MEMORY.md: a heading, a line of prose, and one pointer per file by type."""
    out = [f"# {heading} Memory", "", "Read the linked file before acting on a line.", ""]
    for type_ in ("user", *(t for t, _ in TYPES)):
        group = [f for f in files if f.type == type_]
        if group:
            out += [f"## {type_.title()}", "", *(pointer_line(f) for f in group), ""]
    return "\n".join(out)


def make_memory_dir(
    path: Path,
    n: int,
    *,
    seed: int = 0,
    mix: Mapping[str, float] = REALISTIC_MIX,
    min_age_days: float = 30.0,
    max_age_days: float = 400.0,
    now: float | None = None,
) -> list[SynthFile]:
    """Write n memory files, a README note and a managed MEMORY.md into `path`.

    Every file's mtime is set between `min_age_days` and `max_age_days` ago (all older than the
    7-day keep-recent guard, so all but `user` memories may be demoted to the archive).
    """
    rng = random.Random(seed)
    now = time.time() if now is None else now
    path.mkdir(parents=True, exist_ok=True)
    users = set(rng.sample(range(n), user_count(n)))
    files: list[SynthFile] = []
    for i in range(n):
        type_ = "user" if i in users else _pick(rng, TYPES)
        info, text = render_file(rng, i, type_, _pick(rng, mix))
        target = path / info.filename
        target.write_bytes(text.encode("utf-8"))
        age = rng.uniform(min_age_days, max_age_days) * DAY
        os.utime(target, (now - age, now - age))
        files.append(info)
    (path / "README.md").write_text("# Notes\n\nA folder of memories for the benches.\n")
    index = path / "MEMORY.md"
    index.write_bytes(render_index(path.name, files).encode("utf-8"))
    os.utime(index, (now - min_age_days * DAY, now - min_age_days * DAY))
    return files


def set_description(path: Path, description: str) -> None:
    """Rewrite one memory file's `description:` line in place, as an agent's edit would."""
    lines = path.read_text(encoding="utf-8").split("\n")
    for i, line in enumerate(lines):
        if line.startswith("description:"):
            lines[i] = f"description: {_quote(description)}"
            break
    else:
        raise ValueError(f"{path} has no description line")
    path.write_bytes("\n".join(lines).encode("utf-8"))


def new_file(path: Path, index: int, *, seed: int = 1, shape: str = "nested") -> SynthFile:
    """Write one more memory file (mtime now), as an agent does when it learns something."""
    rng = random.Random(seed * 1_000_003 + index)
    info, text = render_file(rng, index, _pick(rng, TYPES), shape)
    (path / info.filename).write_bytes(text.encode("utf-8"))
    return info


def tree_bytes(path: Path) -> int:
    return sum(e.stat(follow_symlinks=False).st_size for e in os.scandir(path) if e.is_file())
