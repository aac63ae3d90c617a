"""memoryd's own cache files: marshal behind a CRC-32 and a header naming the format.

marshal is the fastest loader the stdlib has, but it trusts the lengths it reads: one flipped
byte can make it allocate gigabytes. The CRC keeps a damaged file from it, and the header makes
a file written by another version (or for another purpose) read as no cache at all.
"""

import marshal
import zlib
from typing import Any


def seal(header: tuple[Any, ...], payload: Any) -> bytes:
    return b"".join(seal_pieces(header, payload))


def seal_pieces(header: tuple[Any, ...], payload: Any) -> list[bytes]:
    """`seal` as two pieces to write one after the other: for a file of tens of MB, one
    copy fewer than joining them."""
    body = marshal.dumps((header, payload))
    return [zlib.crc32(body).to_bytes(4, "little"), body]


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
