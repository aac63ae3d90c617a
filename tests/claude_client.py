"""Test support: run the real Claude Code binary offline against a fake Messages API.

`FakeAnthropic` is a tiny Anthropic Messages API on 127.0.0.1 (a random port, served from a
thread) that records every request and answers `POST /v1/messages` with a short streamed (SSE)
message, or with the next scripted reply (text or a `tool_use`). Every other endpoint the client
probes gets a harmless answer. `run_claude` runs `claude -p hi` with a private HOME, the API
pointed at the fake, telemetry, auto-update and other non-essential traffic off, and any other
outbound HTTP(S) sent to a dead proxy on 127.0.0.1, so the binary talks to nothing but this
machine. It returns what the binary sent (the `Contents of …MEMORY.md` blocks among it), the
project folders it created under `<config dir>/projects/` and their transcripts.

The binary is `$MEMORYD_CLAUDE_BIN` (install: `npm install --prefix /opt/claude-code
@anthropic-ai/claude-code`, then `MEMORYD_CLAUDE_BIN=/opt/claude-code/node_modules/.bin/claude`);
`claude_bin()` skips the calling test, naming the reason, when it is unset or missing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

BIN_ENV = "MEMORYD_CLAUDE_BIN"

# Environment that keeps the binary quiet and local. The variables are Claude Code's own
# documented switches; the proxy catches anything they miss (NO_PROXY exempts the fake API).
QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
    "CLAUDE_CODE_USE_BEDROCK": "",
    "CLAUDE_CODE_USE_VERTEX": "",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}

# Variables of the caller's environment that would change what the binary does.
_DROPPED_PREFIXES = ("ANTHROPIC_", "CLAUDE", "AWS_", "GOOGLE_", "VERTEX_", "OTEL_")

# `Contents of <path> (<what>):\n\n<text>` up to the end of its system-reminder / text block.
_CONTENTS_RE = re.compile(r"Contents of (?P<path>\S*MEMORY\.md)(?P<label>[^\n]*):\n\n")
_ANY_CONTENTS_RE = re.compile(r"\n\nContents of \S+[^\n]*:\n\n")


def claude_bin() -> Path:
    """The binary named by `$MEMORYD_CLAUDE_BIN`; skips the test when it is unset or missing."""
    value = os.environ.get(BIN_ENV)
    if not value:
        pytest.skip(f"set {BIN_ENV} to a Claude Code binary to run the real-client checks")
    path = Path(value)
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.skip(f"{BIN_ENV}={value} is not an executable file")
    return path


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON body, or the raw text when it is not JSON, or None


@dataclass
class Reply:
    """One scripted answer to `POST /v1/messages`: text, or a single tool call."""

    text: str = "ok"
    tool: str | None = None
    tool_input: dict[str, Any] = field(default_factory=dict)
    tool_id: str = "toolu_01memoryd0000000000000001"
    # Answer only once this holds (polled, 60 s at most), as a model takes its time to think:
    # work the last tool call started in the background (a hook's) has its moment.
    after: Callable[[], bool] | None = None


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _message(reply: Reply, model: str) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """The message skeleton, its content blocks (complete) and its stop reason."""
    msg: dict[str, Any] = {
        "id": "msg_01memoryd000000000000000",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    if reply.tool is not None:
        block = {
            "type": "tool_use",
            "id": reply.tool_id,
            "name": reply.tool,
            "input": reply.tool_input,
        }
        return msg, [block], "tool_use"
    return msg, [{"type": "text", "text": reply.text}], "end_turn"


class FakeAnthropic:
    """A recording Messages API on 127.0.0.1; `replies` answer the main requests in order.

    Requests that carry tools are the agent's turns and take the next scripted reply (the last
    one repeats); any side request (titles, summaries) gets plain text, so a script is not
    consumed by them.
    """

    def __init__(self, replies: Sequence[Reply] = ()) -> None:
        self.requests: list[Recorded] = []
        self._replies = list(replies) or [Reply()]
        self._turn = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _record(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                with fake._lock:
                    fake.requests.append(
                        Recorded(self.command, self.path, dict(self.headers.items()), body)
                    )
                return body

            def _json(self, status: int, data: Any) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._record()
                self._json(200, {"data": [], "has_more": False})

            def do_HEAD(self) -> None:
                self._record()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = self._record()
                route = self.path.split("?", 1)[0]
                if route.endswith("/count_tokens"):
                    self._json(200, {"input_tokens": 10})
                elif route == "/v1/messages" and isinstance(body, dict):
                    self._messages(body)
                else:
                    self._json(200, {})

            def _messages(self, body: dict[str, Any]) -> None:
                reply = fake._next_reply(body)
                msg, blocks, stop = _message(reply, str(body.get("model", "claude")))
                if not body.get("stream"):
                    self._json(200, {**msg, "content": blocks, "stop_reason": stop})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                out = [_sse("message_start", {"type": "message_start", "message": msg})]
                for i, block in enumerate(blocks):
                    if block["type"] == "text":
                        start: dict[str, Any] = {"type": "text", "text": ""}
                        delta = {"type": "text_delta", "text": block["text"]}
                    else:
                        start = {**block, "input": {}}
                        delta = {
                            "type": "input_json_delta",
                            "partial_json": json.dumps(block["input"]),
                        }
                    out.append(
                        _sse(
                            "content_block_start",
                            {"type": "content_block_start", "index": i, "content_block": start},
                        )
                    )
                    out.append(
                        _sse(
                            "content_block_delta",
                            {"type": "content_block_delta", "index": i, "delta": delta},
                        )
                    )
                    out.append(
                        _sse("content_block_stop", {"type": "content_block_stop", "index": i})
                    )
                out.append(
                    _sse(
                        "message_delta",
                        {
                            "type": "message_delta",
                            "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 5},
                        },
                    )
                )
                out.append(_sse("message_stop", {"type": "message_stop"}))
                self.wfile.write(b"".join(out))
                self.wfile.flush()
                self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _next_reply(self, body: Mapping[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply()
        with self._lock:
            reply = self._replies[min(self._turn, len(self._replies) - 1)]
            self._turn += 1
        if reply.after is not None:
            deadline = time.monotonic() + 60
            while not reply.after() and time.monotonic() < deadline:
                time.sleep(0.05)
        return reply

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def message_requests(self) -> list[dict[str, Any]]:
        return [
            r.body
            for r in self.requests
            if r.method == "POST"
            and r.path.split("?", 1)[0] == "/v1/messages"
            and isinstance(r.body, dict)
        ]


def _texts(value: Any) -> Iterator[str]:
    """Every string in a request body's `system` and `messages`, in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, dict):
        for key in ("text", "content"):
            if key in value:
                yield from _texts(value[key])


@dataclass
class MemoryBlock:
    """One `Contents of <path> (<label>):` block as the binary sent it."""

    path: str
    label: str  # what follows the path on the header line, e.g. " (user's auto-memory, …)"
    text: str  # the loaded text, up to the end of the block (the reminder's closing tag excluded)
    where: str  # "system[i]" or "messages[i].content[j]"


def memory_blocks(body: Mapping[str, Any]) -> list[MemoryBlock]:
    """The MEMORY.md blocks of one Messages request, with where each one sits."""
    found: list[MemoryBlock] = []
    places: list[tuple[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str):
        places.append(("system", system))
    elif isinstance(system, list):
        places += [(f"system[{i}]", s) for i, s in enumerate(system)]
    for i, msg in enumerate(body.get("messages") or []):
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, str):
            places.append((f"messages[{i}].content", content))
        elif isinstance(content, list):
            places += [(f"messages[{i}].content[{j}]", c) for j, c in enumerate(content)]
    for where, part in places:
        for text in _texts(part):
            matches = list(_CONTENTS_RE.finditer(text))
            for m in matches:
                found.append(MemoryBlock(m["path"], m["label"], _block_text(text, m.end()), where))
    return found


def _block_text(text: str, start: int) -> str:
    """The loaded text of the block starting at `start`.

    The binary joins its `Contents of` blocks with a blank line and closes the reminder with
    `\n</system-reminder>`; the loaded text itself is trimmed, so it never ends in a newline.
    """
    following = _ANY_CONTENTS_RE.search(text, start)
    end = following.start() if following else len(text)
    chunk = text[start:end]
    if following:
        return chunk.removesuffix("\n\n")
    close = chunk.rfind("\n</system-reminder>")
    return chunk[:close] if close >= 0 else chunk


@dataclass
class Captured:
    returncode: int | None  # None when the run timed out (the process was killed)
    stdout: str
    stderr: str
    requests: list[Recorded]
    messages: list[dict[str, Any]]  # the bodies of POST /v1/messages, in order
    memory: list[MemoryBlock]  # MEMORY.md blocks of the first agent request
    projects: list[str]  # folder names under <config dir>/projects/ (the slugs)
    transcripts: dict[str, list[dict[str, Any]]]  # "<slug>/<file>.jsonl" -> parsed lines
    transcript_text: dict[str, str]  # the same files' exact text
    config_dir: Path

    @property
    def agent_requests(self) -> list[dict[str, Any]]:
        """The agent's turns (requests that offer tools), without side requests."""
        return [m for m in self.messages if m.get("tools")]


def _clean_env(home: Path, url: str, env_extra: Mapping[str, str | None]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    env.update(QUIET_ENV)
    env.update(
        {
            "HOME": str(home),
            "USERPROFILE": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": "sk-ant-api03-memoryd-fake-key-for-a-local-test-server-only",
            "TERM": "dumb",
            "NO_COLOR": "1",
        }
    )
    for key, value in env_extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return {k: v for k, v in env.items() if v != ""}


def run_claude(
    home: Path,
    cwd: Path,
    env_extra: Mapping[str, str | None] | None = None,
    *,
    replies: Sequence[Reply] = (),
    args: Sequence[str] = ("-p", "hi", "--max-turns", "1"),
    timeout: float = 90,
) -> Captured:
    """Run the binary once in `cwd` with HOME=`home`; what it sent and what it left behind.

    `env_extra` adds variables (a None value removes one); CLAUDE_CONFIG_DIR is unset unless it
    is given there. The config dir read back is `$CLAUDE_CONFIG_DIR` if given, else
    `<home>/.claude`.
    """
    binary = claude_bin()
    extra = dict(env_extra or {})
    with FakeAnthropic(replies) as fake:
        env = _clean_env(home, fake.url, extra)
        try:
            proc = subprocess.run(
                [str(binary), *args],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            code: int | None = proc.returncode
            out, err = proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            code = None
            out = _str(exc.stdout)
            err = _str(exc.stderr)
        requests = list(fake.requests)
        messages = fake.message_requests()
    given = extra.get("CLAUDE_CONFIG_DIR")
    config_dir = Path(given) if given else home / ".claude"
    agent = [m for m in messages if m.get("tools")]
    first = agent[0] if agent else (messages[0] if messages else {})
    projects_root = config_dir / "projects"
    projects = sorted(p.name for p in projects_root.iterdir()) if projects_root.is_dir() else []
    transcripts: dict[str, list[dict[str, Any]]] = {}
    texts: dict[str, str] = {}
    for slug in projects:
        for f in sorted((projects_root / slug).glob("*.jsonl")):
            key = f"{slug}/{f.name}"
            texts[key] = f.read_text(encoding="utf-8")
            transcripts[key] = [json.loads(line) for line in texts[key].splitlines() if line]
    return Captured(
        code,
        out,
        err,
        requests,
        messages,
        memory_blocks(first),
        projects,
        transcripts,
        texts,
        config_dir,
    )


def _str(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data
