"""Whole-process work of the commands a person or an agent hook runs, as step counts and the
modules they load (never timings): what each command skips must stay skipped."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import Env, write_memory
from tests.helpers import saved_blobs, state_rows


def _probe(words: list[str], watched: tuple[str, ...]) -> tuple[list[str], str, int]:
    """Run `memoryd WORDS` in a fresh interpreter: which of `watched` it imported, its output
    and its exit code."""
    probe = ("import io, json, sys\nfrom memoryd.cli import main\n"
             "out = io.StringIO()\n"
             f"code = main({words!r}, out=out)\n"
             f"print(json.dumps([sorted(m for m in {watched!r} if m in sys.modules), "
             "out.getvalue(), code]))")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False, env=os.environ.copy())  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded, out, code = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded, out, code


def test_status_of_a_stopped_daemon_counts_files_without_the_scan_machinery(env: Env, cli) -> None:
    """`status` with no daemon gives each dir's memory count from its parse cache without
    importing the scanner (and with it YAML and the parsers) or making an entry per file.
    The old one loaded the whole cache through memoryd.indexing.scan just to count it."""
    folder = env.claude / "agent-memory" / "reviewer"
    for name in ("a.md", "b.md", "c.md"):
        write_memory(folder, name)
    (folder / "notes.txt").write_text("not a memory\n")
    assert cli("index", folder).code == 0
    loaded, out, code = _probe(
        ["status", "--json"], ("memoryd.indexing.scan", "memoryd.model.memfile", "yaml")
    )
    assert code == 1 and loaded == []
    (row,) = json.loads(out)["dirs"]
    assert row["path"] == str(folder) and row["files"] == 3


def test_status_counts_nothing_from_a_damaged_cache(env: Env, cli) -> None:
    """A damaged cache is no count (as scanned.load_cache takes it as no cache), not an error."""
    folder = env.claude / "agent-memory" / "reviewer"
    write_memory(folder, "a.md")
    assert cli("index", folder).code == 0
    (cache,) = saved_blobs(Path(env.state), "scan")
    cache.write_bytes(cache.read_bytes()[:-3])
    (row,) = json.loads(cli("status", "--json").out)["dirs"]
    assert row["files"] is None


def test_status_shows_alarms_without_the_version_store(env: Env) -> None:
    """`status` reads the version store's alarms itself: it shows a mass change of the last
    day without importing the version store (and through it the index machinery). The old
    one went through cmd_versions, which imports both."""
    import time

    from memoryd.versions import kept

    store = kept.for_runtime(env.runtime())
    store._keep_alarm(Path("/x/old"), time.time() - 2 * 86400, 9, 0)
    store._keep_alarm(Path("/x/new"), time.time() - 60, 5, 1)
    watched = ("memoryd.versions.kept", "memoryd.commands.versions", "memoryd.model.index", "yaml")
    loaded, out, _ = _probe(["status"], watched)
    assert loaded == []
    assert "ALARM /x/new: 5 memory files deleted and 1 rewritten" in out
    assert "/x/old" not in out


def test_held_archive_split_is_the_line_split() -> None:
    """index_held's split is the lookbehind split it replaced (after each "\\n", no empty
    chunk) on every mix of endings: CR alone, CRLF, a missing final newline, blank lines,
    nothing at all."""
    import itertools
    import re

    from memoryd.model.index_held import split_after_newlines

    old = re.compile(rb"(?<=\n)")
    pieces = (b"", b"a", b"\n", b"\r", b"\r\n", b"\n\n", b"- [x](x.md) \xe2\x80\x94 d")
    for combo in itertools.product(pieces, repeat=4):
        data = b"".join(combo)
        assert split_after_newlines(data) == [c for c in old.split(data) if c], data


MANY = 400  # enough for an archive of several hundred lines under the default budget


def _settled_dir(env: Env, cli, name: str) -> Path:
    folder = env.claude / "agent-memory" / name
    for i in range(MANY):
        write_memory(folder, f"m{i:04}.md", description=f"memory number {i}")
    assert cli("index", folder).code == 0
    assert (folder / "MEMORY-ARCHIVE.md").stat().st_size > 0
    return folder


def test_index_with_nothing_changed_parses_no_archive_line_again(
    env: Env, cli, monkeypatch
) -> None:
    """The held view keeps what it found in the archive under the digest of its bytes: the
    next `memoryd index` of the same archive splits its lines but parses only the few at its
    end the edit looks at. The old one parsed every archive line on every run (216 here)."""
    from memoryd.model import index_held

    folder = _settled_dir(env, cli, "reviewer")
    assert cli("index", folder).code == 0  # the first held view saves what it found
    before = (folder / "MEMORY-ARCHIVE.md").read_bytes()
    calls = 0
    from memoryd.model.index import parse_line as real  # what index_held calls

    def counting(text: str):
        nonlocal calls
        calls += 1
        return real(text)

    monkeypatch.setattr(index_held, "parse_line", counting)
    assert cli("index", folder).code == 0
    assert calls < 10, calls
    assert (folder / "MEMORY-ARCHIVE.md").read_bytes() == before


def test_an_archive_rewritten_in_place_with_its_stat_kept_is_parsed_again(env: Env, cli) -> None:
    """The saved positions are keyed by the archive's bytes, not its stat: an archive whose
    pointer was rewritten in place (same size, mtime put back) is indexed as it is now, the
    same as by a run with no saved positions at all."""
    results = []
    for name, keep_saved in (("alpha", True), ("beta", False)):
        folder = _settled_dir(env, cli, name)
        assert cli("index", folder).code == 0
        archive = folder / "MEMORY-ARCHIVE.md"
        st = archive.stat()
        data = archive.read_bytes()
        assert b"(m0100.md)" in data
        archive.write_bytes(data.replace(b"(m0100.md)", b"(m9100.md)", 1))  # a dead pointer
        os.utime(archive, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert (archive.stat().st_size, archive.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        if not keep_saved:
            state_rows(env.state, "SELECT 1")  # (the store exists: the index made it)
            conn = sqlite3.connect(env.state / "state.sqlite")
            with conn:
                conn.execute("DELETE FROM cache_blob WHERE kind = 'held'")
            conn.close()
        assert cli("index", folder).code == 0
        results.append(
            tuple(  # the dir's name is in its heading
                (folder / f).read_bytes().replace(name.encode(), b"NAME")
                for f in ("MEMORY.md", "MEMORY-ARCHIVE.md")
            )
        )
    assert results[0] == results[1]
    # A pointer to a file memoryd never saw is left as it is; m0100 gets its pointer back.
    assert results[0][1].count(b"(m9100.md)") == 1 and results[0][1].count(b"(m0100.md)") == 1


def test_the_secret_patterns_compile_at_their_first_use() -> None:
    """Importing memoryd.model.secrets compiles none of its patterns (~5 ms of every start-up
    that reads no memory); the first search compiles what it uses and finds the same secrets. The
    old module compiled all of them at import."""
    probe = (
        "import re, json, sys\n"
        "compiled = []\n"
        "real = re.compile\n"
        "def counting(*a, **k):\n"
        "    caller = sys._getframe(1).f_globals.get('__name__')\n"
        "    if caller in ('memoryd.model.secrets', 'memoryd.model.lazyre'):\n"
        "        compiled.append(a[0])\n"
        "    return real(*a, **k)\n"
        "re.compile = counting\n"
        "from memoryd.model import secrets\n"
        "at_import = len(compiled)\n"
        "key = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'\n"
        "found = secrets.find('x\\naws_secret_access_key = ' + key)\n"
        "print(json.dumps([at_import, [f.kind for f in found], len(compiled) > 0]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    at_import, kinds, compiled_later = json.loads(proc.stdout.strip().splitlines()[-1])
    assert at_import == 0
    assert kinds == ["AWS secret access key"] and compiled_later


def test_a_first_index_reads_each_file_once(env: Env, cli, monkeypatch) -> None:
    """The first `memoryd index` of a dir: the settled view does not apply (nothing was
    settled yet), and the full pass takes the scan it made. The old one scanned again and
    read every memory twice."""
    from memoryd.indexing import scan
    from memoryd.model.scanned import Scanned

    folder = env.claude / "agent-memory" / "reviewer"
    for i in range(MANY):
        write_memory(folder, f"m{i:04}.md", description=f"memory number {i}")
    reads: list[str] = []
    real = scan.read_one

    def counting(dir_fd: int, name: str, *args: object) -> Scanned:
        reads.append(name)
        return real(dir_fd, name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(scan, "read_one", counting)
    assert cli("index", folder).code == 0
    assert len(reads) == len(set(reads)) == MANY
    assert (folder / "MEMORY-ARCHIVE.md").stat().st_size > 0  # the full pass wrote both


def test_a_settled_index_scans_the_dir_once_per_pass(env: Env, cli, monkeypatch) -> None:
    """A settled dir's `memoryd index` after a memory changed stats each file once: the held
    edit takes the changed files from the pass's own scan. The old one stat'ed them and
    MEMORY.md's targets again (a second scan_dir over them)."""
    from memoryd.indexing.scan import scan_dir as real

    folder = _settled_dir(env, cli, "reviewer")
    assert cli("index", folder).code == 0
    scans = 0

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal scans
        scans += 1
        return real(*args, **kwargs)

    monkeypatch.setattr("memoryd.indexing.read.scan_dir", counting)
    write_memory(folder, "m0003.md", description="a new description")
    assert cli("index", folder).code == 0
    assert (
        "a new description"
        in (folder / "MEMORY.md").read_text() + (folder / "MEMORY-ARCHIVE.md").read_text()
    )
    assert scans == 1


def test_index_with_nothing_changed_imports_no_yaml_or_toml(env: Env, cli) -> None:
    """Flat frontmatter is read without PyYAML, and a pass that reads nothing new does not
    import it (~8 ms of start-up); the old memfile imported it at its own import. Nor is the
    TOML parser imported where there is no config file (the old config.py did, ~5 ms)."""
    folder = env.claude / "agent-memory" / "reviewer"
    for name in ("a.md", "b.md"):
        write_memory(folder, name)
    assert cli("index", folder).code == 0
    watched = ("yaml", "memoryd.model.yamlstrings", "tomllib")  # no config file either: no TOML
    loaded, _, code = _probe(["index", str(folder)], watched)
    assert code == 0 and loaded == []


def test_index_without_a_journal_imports_no_recovery(env: Env, cli) -> None:
    """With no pass journal left in the state dir there is nothing to recover: `index` does
    not import the recovery, the journal or the trash (~18 ms of start-up). The old one
    imported them to find the journal folder empty."""
    from memoryd.commands import common
    from memoryd.trash import journal

    assert common.JOURNALS == journal.TABLE
    folder = env.claude / "agent-memory" / "reviewer"
    write_memory(folder, "a.md")
    assert cli("index", folder).code == 0
    watched = ("memoryd.trash.recovery", "memoryd.trash.journal", "memoryd.trash")
    loaded, _, code = _probe(["index", str(folder)], watched)
    assert code == 0 and loaded == []


def test_index_keeping_versions_imports_no_prune_or_listing(env: Env, cli) -> None:
    """A command that keeps versions imports the store alone, not the daemon's prune nor
    `history`'s listing (~4 ms of start-up, five dataclasses), a deletion by others
    included. The old keeping() lived in commands.versions, beside everything `history`
    and `trash list` use."""
    folder = env.claude / "agent-memory" / "reviewer"
    write_memory(folder, "a.md")
    assert cli("index", folder).code == 0
    watched = (
        "memoryd.versions.kept",
        "memoryd.versions.prune",
        "memoryd.versions.listing",
        "memoryd.commands.versions",
    )
    write_memory(folder, "b.md")
    (folder / "a.md").unlink()  # a deletion by others, told to the store
    loaded, _, code = _probe(["index", str(folder)], watched)
    assert code == 0 and loaded == ["memoryd.versions.kept"]
    assert "a.md" in cli("trash", "list", folder).out  # the store took the deletion


def test_index_imports_no_diff_subprocess_or_secret_patterns_it_does_not_use(env: Env, cli) -> None:
    """The index pass loads no difflib (only a check that finds a change shows a diff), no
    subprocess (fsops found renameat2 through ctypes.util.find_library, which imports it and
    may run ldconfig), and with nothing changed neither the parser nor the secret patterns
    (only a read parses, only a parse masks). The old code imported all of them at the start
    (~10 ms of start-up). `--check`: the pass
    without the version store, which imports its own."""
    folder = env.claude / "agent-memory" / "reviewer"
    for name in ("a.md", "b.md"):
        write_memory(folder, name)
    assert cli("index", folder).code == 0
    watched = (
        "difflib",
        "subprocess",
        "ctypes.util",
        "memoryd.model.secrets",
        "memoryd.model.memfile",
    )
    loaded, _, code = _probe(["index", "--check", str(folder)], watched)
    assert code == 0 and loaded == []
    write_memory(folder, "c.md")  # parsed: its name and description are masked
    loaded, out, code = _probe(["index", "--check", str(folder)], watched)
    assert code == 1 and "+- [" in out and "c.md" in out
    assert loaded == ["difflib", "memoryd.model.memfile", "memoryd.model.secrets"]


def test_the_scans_limits_are_the_parsers() -> None:
    """scan spells out memfile's limits (it imports the parser at its first read)."""
    from memoryd.indexing import scan
    from memoryd.model import memfile

    assert scan.MAX_FILE_BYTES == memfile.MAX_FILE_BYTES
    assert scan.MAX_FRONTMATTER_BYTES == memfile.MAX_FRONTMATTER_BYTES


def test_a_command_leaves_what_it_built_to_the_process_end(env: Env, cli) -> None:
    """The console script's exit does not walk and free the pass's objects one by one (the
    collector's last pass at exit, ~15 ms at 10,000 memories): they are frozen out of it.
    The old `entry` left all of them to that walk."""
    folder = env.claude / "agent-memory" / "reviewer"
    for name in ("a.md", "b.md", "c.md"):
        write_memory(folder, name)
    assert cli("index", folder).code == 0
    probe = ("import atexit, gc, sys\nfrom memoryd.cli import entry\n"
             "atexit.register(lambda: print('frozen', gc.get_freeze_count(), flush=True))\n"
             f"sys.argv = ['memoryd', 'index', {str(folder)!r}]\nentry()")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False, env=os.environ.copy())  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "in sync" in proc.stdout  # its output is flushed as before
    frozen = int(proc.stdout.split("frozen ")[1])
    assert frozen > 1000  # the modules' objects and the pass's, out of the collector's reach


def test_index_of_a_plain_index_compiles_none_of_the_block_lexers_patterns(env: Env, cli) -> None:
    """The agent's view of a MEMORY.md without a comment is measured by string calls: an
    `index` compiles none of the block lexer's patterns (HTML blocks, list items...; ~2 ms of
    start-up). The old agentview compiled every pattern at import. (What they find, once
    compiled at their first use, is tests/test_agentview.py's.)"""
    folder = env.claude / "agent-memory" / "reviewer"
    for name in ("a.md", "b.md"):
        write_memory(folder, name)
    assert cli("index", folder).code == 0
    probe = (
        "import io, json, re, sys\n"
        "compiled = []\n"
        "real = re.compile\n"
        "def counting(pattern, *a, **k):\n"
        "    compiled.append(str(pattern))\n"
        "    return real(pattern, *a, **k)\n"
        "re.compile = counting\n"
        "from memoryd.cli import main\n"
        f"code = main(['index', {str(folder)!r}], out=io.StringIO())\n"
        "block = [p for p in compiled if 'blockquote' in p or 'script|pre' in p]\n"
        "print(json.dumps([code, len(block)]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False, env=os.environ.copy())  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, 0]


def test_index_keeping_versions_imports_no_subprocess(env: Env, cli) -> None:
    """A writing `index` keeps versions; the store looks libc's syncfs up only when it syncs
    a batch. The old store imported ctypes.util (and with it subprocess) at its import, ~4 ms
    of every writing command's start-up."""
    folder = env.claude / "agent-memory" / "reviewer"
    for name in ("a.md", "b.md"):
        write_memory(folder, name)
    assert cli("index", folder).code == 0
    loaded, _, code = _probe(["index", str(folder)], ("subprocess", "ctypes.util", "difflib"))
    assert code == 0 and loaded == []
    assert "memoryd.versions" in _probe(["index", str(folder)], ("memoryd.versions",))[0]
