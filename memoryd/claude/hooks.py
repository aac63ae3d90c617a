"""`memoryd hook EVENT`: the Claude Code hooks `memoryd claude install` registers.

Claude Code (checked against 2.1.332) starts each with a JSON object on stdin and shows the
model `hookSpecificOutput.additionalContext` of a JSON object on stdout:
- `post-tool-use`: a memory file written has its dir indexed by a process not waited for
  (hook_index);
- `pre-tool-use`: the memories citing the file (hook_recall);
- `session-start`: one line when something is wrong for this project (hook_start).

A hook always exits 0 and logs its own failure to `<log dir>/hooks.log`. Start-up is its
whole cost, so this module imports only what every hook needs.
"""

import json
import sys
from typing import Any, TextIO

from memoryd.claude.hookio import log_failure, state_dir
from memoryd.model import safejson

INPUT_MAX_BYTES = 4 * 1024 * 1024  # a Write's tool_input holds the file's whole content
# Not Claude Code's events: run by the hooks themselves, in the background (in_background).
REFRESH = "refresh-search"
INDEX_WRITTEN = "index-written"
BACKGROUND = (REFRESH, INDEX_WRITTEN)
# Each event: Claude Code's name for it, and the tools it is registered for (its matcher).
EVENTS = {
    "pre-tool-use": ("PreToolUse", "Read|Edit|Write|MultiEdit"),
    "post-tool-use": ("PostToolUse", "Write|Edit|MultiEdit"),
    "session-start": ("SessionStart", ""),
}


def read_input(stream: Any) -> dict[str, Any]:
    """The hook's JSON object from stdin ({} when there is none or it is not an object)."""
    raw = stream.buffer.read(INPUT_MAX_BYTES + 1) if hasattr(stream, "buffer") else stream.read()
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not raw.strip() or len(raw) > INPUT_MAX_BYTES:
        return {}
    data = safejson.loads(raw, max_bytes=INPUT_MAX_BYTES)
    return data if isinstance(data, dict) else {}


def context_output(event: str, text: str) -> str:
    """What a hook prints for the model: `additionalContext` for this event ("" for none)."""
    if not text:
        return ""
    payload = {"hookSpecificOutput": {"hookEventName": EVENTS[event][0], "additionalContext": text}}
    return json.dumps(payload, ensure_ascii=False)


def handle(event: str, data: dict[str, Any]) -> str:
    """The text a hook prints for this input ("" for nothing)."""
    if event == "pre-tool-use":
        from memoryd.claude.hook_recall import recall_context

        return context_output(event, recall_context(data, state_dir()))
    if event == "post-tool-use":
        from memoryd.claude.hook_index import written_memory_dir

        if written_memory_dir(data) is not None:
            in_background(INDEX_WRITTEN, data)
        return ""
    if event == "session-start":
        from memoryd.claude.hook_start import start_context

        in_background(REFRESH, {k: data[k] for k in REFRESH_KEYS if k in data})
        return context_output(event, start_context(data, state_dir()))
    if event == REFRESH:
        from memoryd.claude.hook_start import refresh_search

        refresh_search(data)
    if event == INDEX_WRITTEN:
        from memoryd.claude.hook_index import index_after_write

        index_after_write(data)
    return ""


REFRESH_KEYS = ("cwd", "transcript_path", "session_id")


def in_background(event: str, data: dict[str, Any]) -> None:
    """Start `memoryd hook EVENT` with `data` on stdin, not waited for: work longer than a hook
    may take goes on after it answered."""
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "hook", event],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives the hook, and Claude Code's wait on it
        close_fds=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(data, ensure_ascii=False).encode())
    proc.stdin.close()


def main(argv: list[str], stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    """`memoryd hook EVENT`: always 0; a failure is logged, never shown to the model."""
    event = argv[0] if argv else ""
    if event not in (*EVENTS, *BACKGROUND):
        log_failure(event or "?", ValueError(f"unknown hook event (one of {', '.join(EVENTS)})"))
        return 0
    try:
        text = handle(event, read_input(stdin or sys.stdin))
        if text:
            (out or sys.stdout).write(text + "\n")
    except Exception as error:
        log_failure(event or "?", error)
    return 0
