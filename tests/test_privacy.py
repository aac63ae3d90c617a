"""DESIGN §2.8: the audit log and command output carry names, hashes and reasons, never memory
text (paths from a body, frontmatter quoted by a YAML error, descriptions)."""

import os
import time
from pathlib import Path

from tests.conftest import Env

MARK = "PRIVATEFM"
DAY = 86400


def _plant(repo: Path) -> Path:
    folder = repo / ".claude" / "memory"
    folder.mkdir(parents=True)
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("x = 1\n")
    old = time.time() - 40 * DAY
    files = {
        # Fully stale and kept by a guard (type: user): its missing paths were logged.
        "stale_user.md": f"---\nname: stale user\ndescription: {MARK}-desc-hunter2\ntype: user\n"
        f"---\nSee src/{MARK}_secret.py and src/{MARK}_other.py\n",
        # Fully stale, no guard: its plan detail named the paths.
        "stale_a.md": f"---\nname: a\ndescription: d\ntype: project\n---\nsrc/{MARK}_a.py\n",
        "stale_b.md": f"---\nname: b\ndescription: d\ntype: project\n---\nsrc/{MARK}_b.py\n",
        "stale_c.md": f"---\nname: c\ndescription: d\ntype: project\n---\nsrc/{MARK}_c.py\n",
        "stale_d.md": f"---\nname: d\ndescription: d\ntype: project\n---\nsrc/{MARK}_d.py\n",
        # A YAML error that quotes the tag.
        "bad_tag.md": f"---\nname: bad\ndescription: !{MARK}-hunter2 x\n---\nbody\n",
    }
    for name, text in files.items():
        path = folder / name
        path.write_text(text)
        os.utime(path, (old, old))
    (folder / "MEMORY.md").write_text("<!-- memoryd: manage -->\n# Memory\n")
    return folder


def test_no_memory_text_in_the_audit_log_or_command_output(env: Env, cli, tmp_path: Path) -> None:
    """Index, dream (with a circuit-breaker refusal and a guard), dirs and log: the marker
    planted in body paths, a YAML tag and a description appears in no audit row and no
    stderr, the tag and the description in no stdout either. The dream report on the
    terminal lists missing references (DESIGN §4.11), and so does `explain`."""
    folder = _plant(tmp_path / "app")
    outputs = [
        cli("index", folder),
        cli("dream", folder),
        cli("dream", "--json", folder),
        cli("dirs", folder),
        cli("log", "--json"),
    ]
    rows = env.audit_rows()
    assert {"dream.kept", "dream.refused", "file.unparseable"} <= {r["event"] for r in rows}
    leaks = [r for r in rows if MARK in str(r)]
    assert leaks == []
    for result in outputs:
        assert MARK not in result.err
        assert f"{MARK}-hunter2" not in result.out and f"{MARK}-desc" not in result.out
    explained = cli("explain", folder / "stale_user.md")
    assert f"{MARK}_secret.py" in explained.out  # the person's own terminal may show it
