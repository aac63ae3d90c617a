"""Reading the audit log as `tail -n N -F` does, without losing or repeating a row.

The writer rotates by renaming the log to `audit.jsonl.1`; the next row makes a new file. The
old descriptor is read to its end before the new file, and a little longer still (a writer that
opened the file by name just before the rename appends to it just after).
"""

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.errors import MemorydError
from memoryd.model import safejson
from memoryd.paths import NotRegularFile, open_regular, read_problem
from memoryd.storage.audit import MAX_LINE_BYTES, iter_lines

Row = dict[str, Any]
# How long a rotated-away file is still read after the switch: a writer opens the log by name
# and appends at once, so a row can land there only within microseconds of the rename.
RETIRE_AFTER = 2.0
CHUNK = 1 << 16


@dataclass
class _Open:
    """One open log file: descriptor, identity, read position, and a line not yet ended."""

    fd: int
    ident: tuple[int, int]
    position: int = 0
    held: bytearray = field(default_factory=bytearray)
    over: bool = False  # the current line is past the bound: dropped up to its newline
    retired_at: float = 0.0


def _parse(raw: bytes) -> Row | None:
    try:
        row = safejson.loads(raw)
    except ValueError:
        return None  # a torn line that a later row was appended to, or none memoryd wrote
    return row if isinstance(row, dict) and "event" in row else None


class Follower:
    """The rows of the audit log at `path`, in order, each once, across rotation and truncation.

    `history()` gives the rows so far, `poll()` those written since. A last line without its
    newline is held until it ends; a line over `max_line` bytes is dropped as it streams past
    (`warn` is told). A path that is no regular file is never opened (`warn` is told once,
    `problem` says it). Reads never block.
    """

    def __init__(
        self,
        path: Path,
        *,
        warn: Callable[[str], None],
        backups: int = 5,
        max_line: int = MAX_LINE_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.warn = warn
        self.max_line = max_line
        self.clock = clock
        self.backups = backups
        self.current: _Open | None = None
        self.retired: list[_Open] = []
        self._said = ""  # the last problem told about the path, so it is said once
        self.problem = ""  # the last file that could not be read at all (not a line skipped)

    def close(self) -> None:
        for handle in [*self.retired, *([self.current] if self.current else [])]:
            with contextlib.suppress(OSError):
                os.close(handle.fd)
        self.retired, self.current = [], None

    def history(self, last: int | None) -> list[Row]:
        """Opens the log and gives its last `last` rows so far (all with None), rotated files
        first and only as far back as needed; following goes on from there."""
        self._reopen()
        ident = self.current.ident if self.current else None
        newest: list[list[Row]] = [self._drain_current()]
        have = len(newest[0])
        for n in range(1, self.backups + 1):
            if last is not None and have >= last:
                break
            older = self.path.with_name(f"{self.path.name}.{n}")
            try:
                st = os.stat(older)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == ident:
                continue  # rotated since it was opened: read through the open descriptor
            try:
                rows = list(iter_lines(older))
            except (MemorydError, OSError) as error:
                self.problem = str(error)
                self.warn(self.problem)
                continue
            newest.append(rows)
            have += len(rows)
        ordered = [row for rows in reversed(newest) for row in rows]
        if last is None:
            return ordered
        return ordered[-last:] if last else []

    def poll(self) -> list[Row]:
        """The rows written since the last poll."""
        rows: list[Row] = []
        for handle in list(self.retired):
            rows.extend(self._drain(handle))
            if self.clock() - handle.retired_at > RETIRE_AFTER:
                self._retire_for_good(handle)
        rows.extend(self._drain_current())
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return rows  # between a rename and the next row: the old file may still grow
        except OSError as error:
            self._say(f"{self.path}: {read_problem(error)}; still looking")
            return rows
        if self.current is None:
            self._reopen()
            rows.extend(self._drain_current())
        elif (st.st_dev, st.st_ino) != self.current.ident:
            # Rotated: what was written to the old file before the rename comes first, then
            # every file rotated since (several, when rows come faster than we look), then
            # the new one.
            old = self.current
            rows.extend(self._drain(old))
            self._retire(old)
            self.current = None
            newer = self._newer_than(old.ident)
            if newer:
                *between, self.current = newer
                for handle in between:
                    rows.extend(self._drain(handle))
                    self._retire(handle)
                rows.extend(self._drain_current())
        return rows

    def _retire(self, handle: _Open) -> None:
        handle.retired_at = self.clock()
        self.retired.append(handle)

    def _newer_than(self, ident: tuple[int, int]) -> list[_Open]:
        """The log and its rotated files newer than the file `ident`, opened, oldest first.
        Opened newest first, so a rotation meanwhile moves each on to a name still to look at."""
        found: list[_Open] = []
        names = [self.path] + [
            self.path.with_name(f"{self.path.name}.{n}") for n in range(1, self.backups + 1)
        ]
        for name in names:
            try:
                fd, st = open_regular(name)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key == ident or any(h.ident == key for h in [*found, *self.retired]):
                os.close(fd)
                if key == ident:
                    break  # it and all behind it were read
                continue
            found.append(_Open(fd, key))
        return found[::-1]

    def _drain_current(self) -> list[Row]:
        return self._drain(self.current) if self.current else []

    def _reopen(self) -> None:
        try:
            fd, st = open_regular(self.path)
        except FileNotFoundError:
            return
        except NotRegularFile as error:
            self._say(
                f"{self.path}: {read_problem(error)}; memoryd reads its audit log only from a "
                "regular file (move it aside: the next row starts a new log); still looking"
            )
            return
        except OSError as error:
            self._say(f"{self.path}: {read_problem(error)}; still looking")
            return
        self._said = ""
        self.current = _Open(fd, (st.st_dev, st.st_ino))

    def _retire_for_good(self, handle: _Open) -> None:
        if handle.held or handle.over:
            self.warn(f"{self.path}: a torn last line in the rotated file was skipped")
        self.retired.remove(handle)
        with contextlib.suppress(OSError):
            os.close(handle.fd)

    def _drain(self, handle: _Open) -> list[Row]:
        try:
            size = os.fstat(handle.fd).st_size
        except OSError:
            return []
        if size < handle.position:  # truncated in place: what is there now is new
            handle.position = 0
            handle.held.clear()
            handle.over = False
        rows = []
        for raw in self._lines(handle):
            row = _parse(raw)
            if row is not None:
                rows.append(row)
        return rows

    def _lines(self, handle: _Open) -> Iterator[bytes]:
        while True:
            try:
                chunk = os.pread(handle.fd, CHUNK, handle.position)
            except OSError:
                return
            if not chunk:
                return
            handle.position += len(chunk)
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                if handle.over or len(handle.held) + end - start > self.max_line:
                    self.warn(
                        f"{self.path}: skipped a line over {self.max_line} bytes (a torn row, or "
                        "none memoryd wrote)"
                    )
                elif handle.held:
                    handle.held += chunk[start:end]
                    yield bytes(handle.held)
                else:
                    yield chunk[start:end]
                handle.held.clear()
                handle.over = False
                start = end + 1
            if not handle.over:
                if len(handle.held) + len(chunk) - start > self.max_line:
                    handle.over = True
                    handle.held.clear()
                else:
                    handle.held += chunk[start:]

    def _say(self, message: str) -> None:
        self.problem = message
        if message != self._said:
            self._said = message
            self.warn(message)
