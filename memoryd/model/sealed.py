"""memoryd's own cache files: marshal behind a CRC-32 and a header naming the format.

marshal is the fastest loader the stdlib has, but it trusts the lengths it reads: one flipped
byte can make it allocate gigabytes. The CRC keeps a damaged file from it, and the header makes
a file written by another version (or for another purpose) read as no cache at all.
"""

import marshal
import zlib
from collections.abc import Iterator
from typing import Any


def seal(header: tuple[Any, ...], payload: Any) -> bytes:
    body = marshal.dumps((header, payload))
    return zlib.crc32(body).to_bytes(4, "little") + body


def unseal(header: tuple[Any, ...], data: bytes) -> Any | None:
    """The payload sealed under `header`; None for a damaged file or another format."""
    if len(data) < 4:
        return None
    body = memoryview(data)[4:]
    if zlib.crc32(body) != int.from_bytes(data[:4], "little"):
        return None
    try:
        found, payload = marshal.loads(body)  # noqa: S302 - our own file in a 0700 state dir
    except (ValueError, TypeError, EOFError):
        return None
    return payload if found == header else None


# A file of frames, for payloads too big to build in one piece: each frame is its body's length
# (8 bytes) and CRC-32 (4 bytes), then the body, so a writer makes and a reader takes one frame
# at a time. A damaged frame ends the file: the frames before it stand on their own.
_FRAME_HEAD = 12


def frame(payload: Any) -> bytes:
    body = marshal.dumps(payload)
    return len(body).to_bytes(8, "little") + zlib.crc32(body).to_bytes(4, "little") + body


def frames(data: bytes) -> Iterator[Any]:
    """The payloads of the frames in `data`, up to the first damaged one."""
    view = memoryview(data)
    at = 0
    while at + _FRAME_HEAD <= len(data):
        size = int.from_bytes(view[at : at + 8], "little")
        crc = int.from_bytes(view[at + 8 : at + 12], "little")
        body = view[at + _FRAME_HEAD : at + _FRAME_HEAD + size]
        if len(body) != size or zlib.crc32(body) != crc:
            return
        try:
            yield marshal.loads(body)  # noqa: S302 - our own file in a 0700 state dir
        except (ValueError, TypeError, EOFError):
            return
        at += _FRAME_HEAD + size
