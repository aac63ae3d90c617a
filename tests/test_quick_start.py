"""The README's quick start, run as written in a fresh clone and a fresh HOME: the first
command installs memoryd as a command on PATH and runs the daemon; `memoryd claude install`
then works from that command.

Opt-in: it installs from PyPI (the one test that leaves this machine), so it runs only when
`MEMORYD_QUICK_START=1` and `uv` is on PATH; set `MEMORYD_QUICK_START_PYTHON` to the
interpreter a fresh machine has (Debian's `/usr/bin/python3`, externally managed).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import git

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(600)


def readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text[text.index("## Quick start") : text.index("\n## ", text.index("## Quick start"))]
    return re.findall(r"```sh\n(.*?)```", quick, re.DOTALL)


@pytest.fixture
def fresh(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    if os.environ.get("MEMORYD_QUICK_START") != "1":
        pytest.skip("set MEMORYD_QUICK_START=1 (it installs from PyPI) to run the quick start")
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (`pip install uv` in a scratch venv)")
    clone = tmp_path / "memoryd"
    branch = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--abbrev-ref", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    git(tmp_path, "clone", "-q", "--branch", branch, str(ROOT), str(clone))
    home = tmp_path / "home"
    home.mkdir()
    keep = ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "LANG", "TERM")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(HOME=str(home), PATH=f"{Path(uv).parent}{os.pathsep}/usr/bin{os.pathsep}/bin")
    python = os.environ.get("MEMORYD_QUICK_START_PYTHON")
    if python:
        env["UV_PYTHON"] = python
    return clone, env


def test_the_first_command_installs_memoryd_on_path_and_runs_it(
    fresh: tuple[Path, dict[str, str]],
) -> None:
    clone, env = fresh
    first = readme_blocks()[0].strip()
    assert first.startswith("uv tool install '.[mcp]'") and first.endswith("memoryd run")
    log = clone.parent / "quick-start.log"
    with open(log, "wb") as said:
        proc = subprocess.Popen(
            ["bash", "-c", first], cwd=clone, env=env, start_new_session=True,
            stdout=said, stderr=subprocess.STDOUT,
        )  # fmt: skip
    memoryd = Path(env["HOME"]) / ".local" / "bin" / "memoryd"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if memoryd.exists():
                status = subprocess.run(
                    [str(memoryd), "status"], env=env, capture_output=True, text=True
                )
                if status.returncode == 0:
                    break
            time.sleep(0.5)
        assert proc.poll() is None, log.read_text()
        assert status.returncode == 0, status.stdout + status.stderr
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    # The next block's first line, from the command on PATH.
    path_env = {**env, "PATH": f"{memoryd.parent}{os.pathsep}{env['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", "memoryd claude install"], cwd=clone, env=path_env,
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    settings = (Path(env["HOME"]) / ".claude" / "settings.json").read_text()
    assert f"{memoryd} hook pre-tool-use" in settings
