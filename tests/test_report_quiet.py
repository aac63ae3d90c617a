"""The dream report counts the dirs with nothing to say in one line, so the few that matter
stay in view."""

import json
from pathlib import Path

from memoryd.discover.slugs import slugify
from tests.conftest import Env, write_memory


def test_dirs_with_nothing_to_move_are_one_line_and_a_lone_one_is_shown(
    env: Env, cli, tmp_path: Path
) -> None:
    folders = []
    for name in ("alpha", "beta", "gamma"):
        repo = tmp_path / "code" / name
        repo.mkdir(parents=True)
        project = env.claude / "projects" / slugify(str(repo))
        write_memory(project / "memory", "user_role.md", type_="user", description=f"{name} role")
        (project / "s.jsonl").write_text(json.dumps({"cwd": str(repo)}) + "\n")
        folders.append(project / "memory")
    report = cli("dream", "--dry-run")
    assert report.code == 0, report.err
    assert "Nothing to move in 3 more dirs (--json lists every dir)." in report.out
    assert ": nothing to move" not in report.out
    assert report.out.rstrip().splitlines()[-1].strip().startswith("promotion candidates")
    alone = cli("dream", "--dry-run", str(folders[1]))
    assert ": nothing to move" in alone.out and "Nothing to move in" not in alone.out
