"""`memoryd index` is quiet for dirs in sync, and says why a dir is unmanaged once (issue 16)."""

from pathlib import Path

from tests.conftest import Env, write_memory


def _dirs(env: Env) -> list[Path]:
    out = []
    for name in ("shop", "billing", "api"):
        folder = env.claude / "projects" / f"-code-{name}" / "memory"
        write_memory(folder, "a.md", body=f"{name} deploys through the release script.\n")
        out.append(folder)
    return out


def test_index_lists_only_dirs_it_changed_unless_verbose(env: Env, cli) -> None:
    folders = _dirs(env)
    first = cli("index")
    assert first.code == 0 and first.out.count(": updated (added 1)") == 3, first.out
    again = cli("index")
    assert again.code == 0
    assert again.out == "3 dirs in sync (-v lists them).\n"
    verbose = cli("index", "-v")
    assert all(f"({f}): in sync" in verbose.out for f in folders), verbose.out
    write_memory(folders[1], "b.md", body="Invoices go out on the first.\n")
    third = cli("index")
    assert third.out == (
        f"-code-billing ({folders[1]}): updated (added 1)\n2 dirs in sync (-v lists them).\n"
    )


def test_why_a_dir_is_unmanaged_is_said_once(env: Env, cli) -> None:
    folder = env.claude / "projects" / "-code-notes" / "memory"
    for name in ("a.md", "b.md", "c.md"):
        write_memory(folder, name, body=f"{name} is about something else entirely.\n")
    (folder / "MEMORY.md").write_text("# my notes\n\n- [a](a.md) — a\n\nprose of my own\n")
    first = cli("index")
    assert first.code == 0 and f"({folder}): unmanaged — " in first.out, first.out
    again = cli("index")
    assert again.out == (
        "1 unmanaged, nothing changed (-v lists them, and says why a dir is unmanaged).\n"
    )
    assert f"({folder}): unmanaged — " in cli("index", "-v").out
    assert f"({folder}): unmanaged — " in cli("index", "--check").out  # asked: always said
    assert [r["event"] for r in env.audit_rows()].count("index.unmanaged") == 1
