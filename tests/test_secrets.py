"""Secrets in memories: found by kind and line, masked, reported once, never shown or moved."""

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.model import secrets
from tests.conftest import Env, Result, write_memory
from tests.helpers import saved_blobs
from tests.secret_samples import NEGATIVES, POSITIVES, planted_text

FRONTMATTER_LINES = 6  # write_memory: ---, name, description, type, ---, a blank line


def test_every_planted_kind_is_found_on_its_line_by_kind_and_none_of_the_look_alikes() -> None:
    """Each planted secret is one finding of its kind on its line; the bait lines give none."""
    text = planted_text()
    found = secrets.find(text)
    expected = []
    line = 1
    for kind, value, template in POSITIVES:
        at = template.index("{}")
        expected.append(secrets.Finding(line + template[:at].count("\n"), kind))
        line += template.format(value).count("\n") + 1
    assert found == expected
    for bait in NEGATIVES:
        assert secrets.find(bait) == [], bait


def test_a_finding_holds_no_value_and_mask_removes_every_one() -> None:
    """A Finding is a line and a kind only; masked text keeps the rest and holds no value."""
    assert set(secrets.Finding.__dataclass_fields__) == {"line", "kind"}
    text = planted_text()
    masked = secrets.mask(text)
    for kind, value, _ in POSITIVES:
        assert value not in masked
        for piece in value.splitlines():  # a key block's rows too
            if len(piece) >= 12:
                assert piece not in masked
        assert f"[secret: {kind}]" in masked
    for bait in NEGATIVES:
        assert bait in masked
        assert secrets.mask(bait) is bait  # untouched text is returned as it is


def test_an_unterminated_key_block_is_masked_to_the_end() -> None:
    """A private key block cut short (no END line) still hides everything after BEGIN."""
    _, value, _ = POSITIVES[0]
    cut = value.rsplit("\n", 1)[0]
    text = f"intro\n{cut}\n"
    assert secrets.find(text) == [secrets.Finding(2, "private key")]
    assert secrets.mask(text) == "intro\n[secret: private key]"


@pytest.mark.timeout(30)
def test_scanning_is_linear_at_the_size_limit() -> None:
    """1 MiB of text dense in every hint (sk-, eyJ, key:, token=, ://) scans in well under a
    second here; a pattern with nested quantifiers would take minutes (the timeout)."""
    unit = "api_key: short sk-abc eyJ.eyJ. token= AKIA ghp_ xox- http://a:@ password:x " * 4
    text = (unit + "\n") * ((1 << 20) // (len(unit) + 1))
    started = time.perf_counter()
    assert secrets.find(text) == []
    assert secrets.mask(text) is text
    assert time.perf_counter() - started < 20


def _plant(folder: Path) -> dict[str, tuple[str, str, int]]:
    """One user memory per planted secret (user memories are never moved); file -> (kind,
    value, line)."""
    planted = {}
    for n, (kind, value, template) in enumerate(POSITIVES):
        name = f"user_secret_{n:02d}.md"
        body = (
            f"Topic{n} words{n} unique{n} about item{n}.\n"
            + template.format(value)
            + f"\nclosing{n} remark{n}.\n"
        )
        write_memory(folder, name, type_="user", description=f"note {n}", body=body)
        at = template.index("{}")
        planted[name] = (kind, value, FRONTMATTER_LINES + 2 + template[:at].count("\n"))
    return planted


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.glob("*.md"))
        if p.name != "MEMORY.md"
    }


def _every_file_under(*roots: Path) -> bytes:
    """Every file memoryd wrote under `roots`, but the version store's objects: those are the
    memory files' own bytes, kept byte-exact so a deleted or rewritten memory comes back whole
    (in state.sqlite, 0600 in a 0700 folder, like the trash beside the memory). Every other
    row of state.sqlite is checked (its rows as SQL text, not its pages, which hold objects)."""
    import contextlib
    import sqlite3

    out = b""
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = Path(dirpath) / name
                if name == "state.sqlite":
                    with contextlib.closing(sqlite3.connect(path)) as conn:
                        dump = conn.iterdump()
                        out += "\n".join(
                            line for line in dump if '"versions_objects"' not in line
                        ).encode()
                elif name.startswith("state.sqlite"):
                    continue  # its WAL and shared memory: their rows are in the dump above
                elif path.is_file() and not path.is_symlink():
                    out += path.read_bytes()
    return out


def test_secrets_are_reported_everywhere_by_line_and_kind_never_by_value(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    """dirs, dirs --secrets, explain, dream (text, JSON, dry run) and the audit log name each
    planted secret's file, line and kind; no output, log row or file memoryd wrote holds a
    value; no memory is moved or changed."""
    folder = repo / ".claude" / "memory"
    planted = _plant(folder)
    before = _digest(folder)
    outputs: list[Result] = []

    dirs = cli("dirs", repo)
    outputs.append(dirs)
    assert f"secrets: {len(planted)} in {len(planted)} file(s)" in dirs.out
    listed = cli("dirs", repo, "--secrets")
    outputs.append(listed)
    for name, (kind, _, line) in planted.items():
        assert f"{name}:{line}: {kind}" in listed.out
    as_json = cli("dirs", repo, "--json")
    outputs.append(as_json)
    rows = json.loads(as_json.out)["dirs"][0]["secrets"]
    assert {(r["file"], r["line"], r["kind"]) for r in rows} == {
        (n, line, kind) for n, (kind, _, line) in planted.items()
    }
    name, (kind, _, line) = next(iter(planted.items()))
    explained = cli("explain", folder / name)
    outputs.append(explained)
    assert f"secret: line {line}: {kind}" in explained.out
    outputs.append(cli("dream", repo, "--dry-run"))
    dream = cli("dream", repo)
    outputs.append(dream)
    assert dream.code == 0, dream.err
    for name, (kind, _, line) in planted.items():
        assert f"{name}: line {line}: {kind}" in dream.out
    outputs.append(cli("dream", repo, "--json"))
    outputs.append(cli("log"))
    outputs.append(cli("log", "--json"))

    rows = [r for r in env.audit_rows() if r["event"] == "memory.secret_found"]
    assert sorted((r["file"], r["line"], r["kind"]) for r in rows) == sorted(
        (n, line, kind) for n, (kind, _, line) in planted.items()
    )  # once per file version: the second pass said nothing again
    assert _digest(folder) == before  # nothing moved, nothing changed
    written = _every_file_under(env.state, env.logs)  # facts cache, parse cache, state, log
    for _, value, _ in POSITIVES:
        for result in outputs:
            assert value not in result.out and value not in result.err
        assert value.encode() not in written


def test_a_changed_file_is_said_again_and_a_cleaned_one_is_forgotten(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    """`memory.secret_found` is said once per file version: again when the bytes change and
    still hold a secret; a file cleaned, then given a secret again, is said again."""
    folder = repo / ".claude" / "memory"
    kind, value, template = POSITIVES[2]
    path = write_memory(folder, "user_a.md", type_="user", body=template.format(value) + "\n")

    def said() -> int:
        return sum(1 for r in env.audit_rows() if r["event"] == "memory.secret_found")

    assert cli("dream", repo).code == 0
    assert cli("dream", repo).code == 0
    assert said() == 1
    path.write_text(path.read_text() + "more text\n")
    assert cli("dream", repo).code == 0
    assert said() == 2
    write_memory(folder, "user_a.md", type_="user", body="nothing secret here\n")
    assert cli("dream", repo).code == 0
    write_memory(folder, "user_a.md", type_="user", body=template.format(value) + "\n")
    assert cli("dream", repo).code == 0
    assert said() == 3
    assert all(r["kind"] == kind for r in env.audit_rows() if r["event"] == "memory.secret_found")


def test_the_separator_search_finds_what_the_plain_pattern_finds() -> None:
    """`_assignments` (searched near separators only) gives exactly the matches of the
    assignment pattern run over the whole text, on mixes of every sample."""
    import random

    rng = random.Random(5)
    pieces = [tpl.format(value) for _, value, tpl in POSITIVES] + NEGATIVES
    pieces += ["key: value", "a:b:c=d", "token=" + "x" * 400, "pass ::= == :"]
    for _ in range(300):
        text = "\n".join(rng.choices(pieces, k=8))
        plain = [m.span() for m in secrets._ASSIGNMENT.finditer(text)]
        assert [m.span() for m in secrets._assignments(text)] == plain


def test_an_unchanged_memory_is_not_scanned_again_by_the_next_pass(
    env: Env, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's second pass over the same bytes reuses the findings (by content hash) and
    still reports them; a changed file is scanned again."""
    from memoryd.discover.finder import discover
    from memoryd.dream import inventory, run
    from memoryd.dream.repocache import RepoCache

    folder = repo / ".claude" / "memory"
    _plant(folder)
    scanned: list[int] = []

    def counted(data: bytes) -> list[secrets.Finding]:
        scanned.append(1)
        return secrets.find_bytes(data)

    monkeypatch.setattr(inventory, "find_bytes", counted)
    rt = env.runtime()
    (md,) = discover(rt.config, [repo])
    first = run.dream_dir(rt, md, repos=RepoCache.of(rt), dry_run=True)
    assert len(scanned) == len(POSITIVES) and len(first.secrets) == len(POSITIVES)
    second = run.dream_dir(rt, md, repos=RepoCache.of(rt), dry_run=True)
    assert len(scanned) == len(POSITIVES) and second.secrets == first.secrets
    (folder / "user_secret_00.md").write_text((folder / "user_secret_00.md").read_text() + "x\n")
    run.dream_dir(rt, md, repos=RepoCache.of(rt), dry_run=True)
    assert len(scanned) == len(POSITIVES) + 1


def test_the_dirs_table_counts_secrets_and_lists_them_with_secrets(
    env: Env, cli: Callable[..., Result]
) -> None:
    """Without DIR, `dirs` is a table: its summary counts the secrets found and points at
    `--secrets`, which lists each one's full path, line and kind after the table (no value)."""
    folder = env.claude / "projects" / "-p" / "memory"
    planted = _plant(folder)
    table = cli("dirs")
    assert table.code == 0, table.err
    summary = f"{len(planted)} secrets in {len(planted)} memories (memoryd dirs --secrets)"
    assert summary in table.out
    listed = cli("dirs", "--secrets")
    for name, (kind, value, line) in planted.items():
        assert f"{folder / name}:{line}: {kind}" in listed.out
        assert value not in listed.out and value not in table.out


def test_a_secret_in_a_description_stays_out_of_the_index_and_the_caches(
    env: Env, cli: Callable[..., Result]
) -> None:
    """A description is copied into MEMORY.md's pointer line, the parse cache and search
    results: each holds it masked, and a second pass changes nothing (the masked line is
    memoryd's own)."""
    folder = env.claude / "projects" / "-p" / "memory"
    value = next(v for _, v, _ in POSITIVES if "\n" not in v and '"' not in v)
    write_memory(folder, "creds.md", description=f"deploy key {value}", body="Body.\n")
    assert cli("index").code == 0
    index = (folder / "MEMORY.md").read_text()
    assert "(creds.md)" in index and value not in index and "[secret:" in index
    assert cli("index").code == 0
    assert (folder / "MEMORY.md").read_text() == index
    found = cli("search", "deploy", "--json")
    assert "creds.md" in found.out and value not in found.out
    assert value.encode() not in _every_file_under(env.state, env.logs)


def test_the_precheck_tries_one_alternative_per_first_character() -> None:
    """The "could it hold a secret" precheck runs on every description of a cold scan: as a
    trie, the regex engine tries at most one alternative per first character at each position
    (the flat alternation of every hint tried each in turn, ~30 % slower). The old pattern
    had 29 top-level alternatives, 5 of them beginning with `A`."""
    pattern = secrets._trie(secrets._HINTS)
    assert pattern.startswith("(?:") and pattern.endswith(")")
    top, depth, part = [], 0, ""
    for ch in pattern[3:-1]:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "|" and depth == 0:
            top.append(part)
            part = ""
        else:
            part += ch
    top.append(part)
    firsts = [p.removeprefix("\\")[0] for p in top]
    assert len(firsts) == len(set(firsts))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([*secrets._HINTS, "a", "k", "g", "s", "P", "A", " ", "\n", "_", ":"]),
        max_size=12,
    ).map("".join)
)
def test_the_precheck_finds_a_hint_exactly_where_the_plain_alternation_does(text: str) -> None:
    import re

    plain = re.compile("|".join(map(re.escape, secrets._HINTS)))
    trie = re.compile(secrets._trie(secrets._HINTS))
    assert (trie.search(text) is None) == (plain.search(text) is None)


def test_a_text_with_no_token_hint_runs_no_token_search(monkeypatch) -> None:
    """Past the any-hint precheck, most descriptions hold only a word such as "through" or
    "secret": one search for any token kind's hint then skips the 13 per kind. The old scan
    ran all 13 on such a text. What is found is the same (the planted tests above)."""

    class Counting:
        def __init__(self) -> None:
            self.calls = 0

        def search(self, text: str) -> None:
            self.calls += 1

    counters = [Counting() for _ in secrets._TOKEN_HINTS]
    monkeypatch.setattr(
        secrets,
        "_TOKEN_HINTS",
        tuple((k, c, p) for (k, _, p), c in zip(secrets._TOKEN_HINTS, counters, strict=True)),
    )
    assert secrets.mask("walked through the secret garden of caches") == (
        "walked through the secret garden of caches"
    )
    assert sum(c.calls for c in counters) == 0
    secrets.mask("a token ghp_ here")  # a token hint: each kind is looked for
    assert all(c.calls == 1 for c in counters)


_ASSIGNED_NAMES = (
    "password", "passwd", "pwd", "pass", "secret", "secret_key", "api-key", "apikey",
    "access_key", "access_token", "auth_token", "refresh_token", "bearer", "token",
    "client_secret", "private_key", "credential", "credentials",
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(_ASSIGNED_NAMES),
    st.lists(st.booleans(), min_size=20, max_size=20),
    st.sampled_from(["=", ": ", " = ", " := ", " => "]),
)
def test_an_assigned_secret_is_found_whatever_the_case_of_its_name(
    name: str, upper: list[bool], sep: str
) -> None:
    """`_ASSIGNMENT` reads a name in any case (`PWD=`, `Bearer:`, `Credentials:`), so the
    precheck before it must too: its hints were written in three cases for some names and in
    lower case only for others, and `PWD=<value>` was found only when the text happened to
    hold another hint (`gh` in "through")."""
    cased = "".join(c.upper() if up else c for c, up in zip(name, upper, strict=False))
    text = f"deploy notes\n{cased}{sep}Zq8vN3LpX2mWr7T9\n"
    assert secrets.find(text) == [secrets.Finding(2, secrets.Kind.ASSIGNMENT)], text


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(_ASSIGNED_NAMES),
    st.text(st.sampled_from("İıſKaé 中"), max_size=60),
    st.booleans(),
)
def test_an_assigned_secret_is_found_after_any_letters_and_in_their_folded_forms(
    name: str, before: str, fold: bool
) -> None:
    """The assignment pattern reads names case-insensitively, so `paſſword` and `credentıal`
    are names too; and `str.lower` makes `İ` two characters, which put every keyword after
    one out of place, so `password = <value>` after enough of them was not masked."""
    if fold:
        name = name.replace("s", "\u017f").replace("i", "\u0131")
    text = f"{before} {name} = Zq8vN3LpX2mWr7T9\n"
    assert secrets.find(text) == [secrets.Finding(1, secrets.Kind.ASSIGNMENT)], text
    assert "Zq8vN3LpX2mWr7T9" not in secrets.mask(text)


def test_the_names_precheck_covers_every_name_the_assignment_pattern_reads() -> None:
    """Each name the assignment pattern lists holds one of the any-case hints."""
    for name in _ASSIGNED_NAMES:
        assert any(hint in name for hint in secrets._NAME_HINTS), name


def test_a_name_and_description_with_no_hint_are_looked_at_once_and_every_secret_is_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A memory's name and description are prechecked together (one search over both): 200
    memories with no hint of a secret call `mask` not at all; the old parse called it twice a
    memory. Each planted secret, in the name or the description, is masked as before."""
    from memoryd.model import memfile

    calls: list[str] = []

    def counting(text: str) -> str:
        calls.append(text)
        return secrets.mask(text)

    monkeypatch.setattr(memfile, "_mask", counting)
    for i in range(200):
        data = f"---\nname: plain {i}\ndescription: nothing to hide here {i}\n---\nBody.\n"
        parsed = memfile.parse_summary(f"m{i}.md", data.encode())
        assert isinstance(parsed, memfile.Summary) and parsed.name == f"plain {i}"
    assert calls == []
    planted = 0
    for _, value, template in POSITIVES:
        line = template.format(value)
        if "\n" in line or any(c in line for c in "\"'#`") or ": " in line or line[0] in "-[{":
            continue  # not a one-line plain YAML value
        planted += 1
        for field in ("name", "description"):
            other = "description" if field == "name" else "name"
            text = f"---\n{field}: {line}\n{other}: plain\n---\nBody.\n"
            parsed = memfile.parse_summary("s.md", text.encode())
            assert isinstance(parsed, memfile.Summary)
            got = parsed.name if field == "name" else parsed.description
            assert got == secrets.mask(line) != line and value not in got
    assert planted >= 5 and calls


def test_words_that_hold_gh_are_no_hint_of_a_github_token() -> None:
    """Words such as "through", "high" and "night" hold `gh` but no GitHub token prefix: the
    precheck passes them without a search per kind (in the bench's synthetic memories they
    were 4 in 5 of the descriptions it stopped); every token prefix is still a hint."""
    assert secrets.holds_no_hint("walked through the high night")
    for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"):
        assert not secrets.holds_no_hint(f"x {prefix} y"), prefix
    for _, value, template in POSITIVES:
        assert not secrets.holds_no_hint(template.format(value)), value


def test_a_masked_text_holds_no_secret_and_masks_to_itself() -> None:
    """MEMORY.md's pointer lines carry masked descriptions and are scanned too: a mask is
    never a finding, and masking again changes nothing."""
    masked = secrets.mask(planted_text())
    assert secrets.find(masked) == []
    assert secrets.mask(masked) == masked
    for kind in secrets.Kind:
        line = f"- [creds](creds.md) — secret: {secrets.MASK.format(kind=kind)}"
        assert secrets.find(line) == [], kind


def test_memory_md_and_notes_in_a_memory_dir_are_scanned_for_secrets(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    """MEMORY.md (loaded into every session) and a note without frontmatter are flagged by
    `dirs --secrets` and the dream pass (report and audit row) like a memory; neither is
    moved or changed."""
    folder = repo / ".claude" / "memory"
    write_memory(folder, "plain.md", body="Nothing to see.\n")
    (kind, value, template), (kind2, value2, template2) = POSITIVES[5], POSITIVES[12]
    (folder / "MEMORY.md").write_text(
        "# Memory\n\n- [plain](plain.md) — a memory\n" + template.format(value) + "\n"
    )
    (folder / "scratch-notes.md").write_text("todo\n" + template2.format(value2) + "\n")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    listed = cli("dirs", repo, "--secrets")
    assert f"MEMORY.md:4: {kind}" in listed.out, listed.out
    assert f"scratch-notes.md:2: {kind2}" in listed.out
    dream = cli("dream", repo)
    assert dream.code == 0, dream.err
    assert f"MEMORY.md: line 4: {kind}" in dream.out, dream.out
    assert f"scratch-notes.md: line 2: {kind2}" in dream.out
    rows = [r for r in env.audit_rows() if r["event"] == "memory.secret_found"]
    assert {(r["file"], r["line"], r["kind"]) for r in rows} == {
        ("MEMORY.md", 4, kind),
        ("scratch-notes.md", 2, kind2),
    }
    for result in (listed, dream):
        assert value not in result.out and value2 not in result.out
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_twilio_auth_token_stays_out_of_the_dream_facts_cache(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    """The facts a dream pass derives and saves are taken from the masked body: a Twilio
    auth token (32 hex digits, no prefix) is found, so masked, and never saved."""
    folder = repo / ".claude" / "memory"
    kind, value, template = next(p for p in POSITIVES if p[0] == "Twilio auth token")
    write_memory(folder, "sms.md", type_="user", body=f"SMS alerts.\n{template.format(value)}\n")
    dream = cli("dream", repo)
    assert dream.code == 0, dream.err
    assert f"sms.md: line {FRONTMATTER_LINES + 2}: {kind}" in dream.out
    facts = saved_blobs(env.state, "facts")
    assert facts and all(f.read_bytes() for f in facts)
    assert value.encode() not in _every_file_under(env.state, env.logs)
