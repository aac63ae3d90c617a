"""`memoryd demo` for a new user (issue 16): step 1 says what started, the log rows fit one
line of a 100-column terminal, the restore shows the pointer coming back, and `--keep` says how
to run commands in the sandbox."""

import re
import shutil
import subprocess
from pathlib import Path

from tests.conftest import Env


def _section(text: str, number: int) -> list[str]:
    start = text.index(f"== {number}.")
    end = text.find(f"== {number + 1}.", start)
    return text[start : end if end >= 0 else None].splitlines()[1:]


def test_demo_speaks_at_each_step_and_keep_says_how_to_use_the_sandbox(env: Env, cli) -> None:
    result = cli("demo", "--keep")
    assert result.code == 0, result.err
    found = re.search(r"The sandbox is kept at (\S+)\.\n", result.out)
    assert found, result.out
    root = Path(found.group(1))
    try:
        step1 = [line for line in _section(result.out, 1) if line.strip()]
        assert step1 and "pid" in step1[0] and any("audit.jsonl" in line for line in step1)
        log = [line for line in _section(result.out, 4) if line.strip()]
        assert any(" trash.moved " in line for line in log)
        assert all(len(line) <= 100 for line in log), [line for line in log if len(line) > 100]
        assert not [line for line in log if re.search(r"[0-9a-f]{64}", line)]
        restore = _section(result.out, 5)
        [back] = [line for line in restore if line.lstrip().startswith("+- [")]
        assert "(deploy_steps.md)" in back or "(legacy_cart.md)" in back
        assert back.lstrip()[1:] in (
            root.glob("home/.claude/projects/*/memory/MEMORY.md")
            .__next__()
            .read_text()
            .splitlines()
        )
        # The commands it prints run memoryd in the sandbox, on the sandbox's files.
        tail = result.out[found.start() :]
        assert "XDG_STATE_HOME=" in tail and "--config" in tail
        shell_lines = tail.split("start a shell with its environment:\n")[1]
        env_cmd = shell_lines.split('"$SHELL"')[0].replace("\\\n", " ").split()
        run = next(line for line in tail.splitlines() if line.rstrip().endswith(" dirs"))
        listed = subprocess.run(
            [*env_cmd, "sh", "-c", run.strip()],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        assert "shop" in listed.stdout and "managed" in listed.stdout
    finally:
        shutil.rmtree(root, ignore_errors=True)
