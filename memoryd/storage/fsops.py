"""The filesystem primitives memoryd writes memory dirs with: check-and-swap replaces,
no-replace moves, private temp files, and the crash points the crash-loop tests kill at.

Every write of an index file goes through `replace_file`, every move of a memory file through
`rename_no_replace` (or `rename_to_free`, which picks a free name with it); both work relative
to an open directory descriptor and never follow symlinks. Not every write of memoryd's is
here: the state store is SQLite's, the heartbeat is written with `write_private`, the trash
manifest and the audit log append on their own, and `service` and `demo` write outside
memory dirs.
"""

import contextlib
import errno
import functools
import hashlib
import itertools
import os
import stat
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypedDict, Unpack

from memoryd.errors import MemorydError, UnsafeFilesystemOperation, WriteConflict
from memoryd.paths import ensure_private_dir

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
TEMP_MARK = ".memoryd-"  # every temp file memoryd creates has this in its name

# Told (folder, name, (inode, size, mtime_ns)) the identity a file will have once a swap lands
# (a rename keeps all three), after the temp file is complete and just before the swap: the
# daemon records it so that the event the swap causes is known as its own. (Tests write the
# index from it, as a writer slipping in between memoryd's read and its swap.)
OwnWrite = Callable[[Path, str, tuple[int, int, int]], None]


class OwnContent(Protocol):
    """The version store (memoryd.versions) as `replace_file` sees it (its `versions`): told
    the sha256 of what memoryd is about to write, just before the swap (for every memoryd
    process to know it as memoryd's), and what it wrote, once it is in place."""

    def own_intent(self, dir_path: Path, name: str, sha: str) -> None: ...

    def own_content(
        self,
        dir_path: Path,
        name: str,
        data: "Content",
        sha: str = "",
        ident: tuple[int, int, int] | None = None,
    ) -> None: ...


def libc_function(name: str) -> Any:
    """A C library function by name from the process's own symbols (libc's among them), or
    None where there is none: no ctypes.util.find_library, which imports subprocess and may
    run ldconfig (~3 ms of every command's start-up). ctypes itself is imported here, at the
    first such lookup: its import is ~2.5 ms of every command's start-up, and most commands
    write nothing."""
    import ctypes

    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None


@functools.cache
def _renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    """libc's renameat2 with its argument types, looked up at its first use (None where libc
    lacks it: the portable fallback runs)."""
    import ctypes

    func = libc_function("renameat2")
    if func is None:
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func  # type: ignore[no-any-return,unused-ignore]


def renameat2_available() -> bool:
    """Whether libc has renameat2 (a kernel or filesystem without it is found out per call)."""
    return _renameat2() is not None


# Whether to use renameat2 where libc has it; the tests turn it off to run the fallback.
use_renameat2 = True


def renameat2(src_fd: int, src: str, dst_fd: int, dst: str, flags: int) -> None:
    """Raise NotImplementedError where the kernel, libc or filesystem cannot do it."""
    func = _renameat2() if use_renameat2 else None
    if func is None:
        raise NotImplementedError
    result = func(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), flags)
    if result != 0:
        import ctypes  # loaded by _renameat2 already

        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise NotImplementedError
        raise OSError(err, os.strerror(err), dst)


@dataclass(frozen=True, slots=True)
class FileIdentity:
    ino: int
    size: int
    mtime_ns: int
    sha256: str


@contextlib.contextmanager
def open_dir(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


class ChangedWhileReading(Exception):
    """The file's size or mtime moved between the first and the last look: a writer is mid-write."""

    def __init__(self, name: str, st: os.stat_result) -> None:
        super().__init__(name)
        self.st = st  # the first look


def read_regular(
    dir_fd: int, name: str, limit: int, *, stable: bool = False
) -> tuple[bytes, os.stat_result]:
    """Read a regular file without following a symlink or blocking on a FIFO.

    Raises OSError (ELOOP for a symlink, EFTYPE-like EINVAL for a non-regular file) and
    ValueError when the file is over `limit` bytes. With `stable`, the open file is looked at
    again after reading, and ChangedWhileReading is raised when its size or mtime moved: the
    bytes may be half of an in-place write. (A file renamed over this one meanwhile does not
    count: what was read is the whole of the file that was opened.)
    """
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", name)
        if st.st_size > limit:
            raise ValueError(st.st_size)
        # A short read of a regular file is its end: the first read, one byte more than fstat
        # said, nearly always is one. Only a file that grew since goes round the loop.
        step = max(st.st_size + 1, 1 << 16)
        want = min(limit + 1, step)
        data = os.read(fd, want)
        if len(data) == want:
            chunks = [data]
            remaining = limit + 1 - want
            while remaining > 0:
                want = min(remaining, step)
                chunk = os.read(fd, want)
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
                if len(chunk) < want:
                    break
            data = b"".join(chunks)
            if len(data) > limit:
                raise ValueError(len(data))
        if stable:
            after = os.fstat(fd)
            if after.st_size != st.st_size or after.st_mtime_ns != st.st_mtime_ns:
                raise ChangedWhileReading(name, st)
        return data, st
    finally:
        os.close(fd)


def identity_of(dir_fd: int, name: str, limit: int = 64 << 20) -> tuple[bytes, FileIdentity] | None:
    """Current bytes and identity of a file in the dir, or None when it does not exist."""
    try:
        data, st = read_regular(dir_fd, name, limit)
    except FileNotFoundError:
        return None
    sha = hashlib.sha256(data).hexdigest()
    return data, FileIdentity(st.st_ino, st.st_size, st.st_mtime_ns, sha)


def stat_id(dir_fd: int, name: str) -> list[int] | None:
    """`name`'s [inode, size, mtime_ns] (a link not followed); None when it is missing."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def written_since(found: Sequence[int] | None, was: Sequence[int]) -> bool:
    """Whether a file memoryd recorded as `was` ([inode, size, mtime_ns]) is still that inode
    with other contents: written in place since. Another inode is another file, not this."""
    return found is not None and found[0] == was[0] and list(found) != list(was)


def fsync_dir(dir_fd: int) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on a directory
        os.fsync(dir_fd)


NAME_MAX_BYTES = 255  # a file name's limit on the filesystems memoryd runs on


def fit_name(stem: str, tail: str) -> str:
    """`<stem><tail>`, the stem cut (at a character's start) so that the name fits in
    NAME_MAX_BYTES: a memory name near the limit still gets a stored, restored or temp name."""
    raw, end = os.fsencode(stem), os.fsencode(tail)
    if len(raw) + len(end) <= NAME_MAX_BYTES:
        return stem + tail
    cut = raw[: max(1, NAME_MAX_BYTES - len(end))]
    while len(cut) > 1 and (cut[-1] & 0xC0) == 0x80:  # inside a UTF-8 sequence
        cut = cut[:-1]
    if len(cut) > 1 and cut[-1] >= 0xC0:  # a sequence's first byte without the rest
        cut = cut[:-1]
    return os.fsdecode(cut) + tail


def temp_name(name: str) -> str:
    """`.<name>.memoryd-<pid>-<hex>.tmp`, `name` cut to fit (fit_name): a memory named near
    the limit (a restore writes one back) had no temp name that could exist. A temp is never
    looked up by its target's name (an object's sha256, which its temp's name carries, is
    never cut)."""
    return fit_name(f".{name}", f"{TEMP_MARK}{os.getpid()}-{os.urandom(4).hex()}.tmp")


# What a file is written from: its bytes, or pieces (the daemon's held archive lines) whose
# concatenation they are. Pieces are written with writev and compared a block at a time: a
# block is below the daemon's mmap threshold (daemon.process.tune_malloc), so its buffer comes from
# the heap and is reused, where one 2 MB buffer would be mapped, and page-faulted, each pass.
Content = bytes | Sequence[bytes]
_BLOCK = 1 << 16
_IOV_MAX = 1024  # pieces per writev (POSIX guarantees 16; Linux and the BSDs take 1024)


def _blocks(pieces: Sequence[bytes], ends: Sequence[int]) -> Iterator[bytes]:
    """The concatenation of `pieces`, in blocks of about _BLOCK bytes (whole pieces each);
    `ends`: where each piece ends in it (the running sum of their lengths)."""
    start = 0
    while start < len(pieces):
        done = ends[start - 1] if start else 0
        stop = bisect_left(ends, done + _BLOCK) + 1
        yield b"".join(pieces[start:stop])
        start = stop


def _write_all(fd: int, data: Content | Iterable[bytes]) -> None:
    if isinstance(data, bytes):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    elif isinstance(data, list | tuple):
        _writev_all(fd, data)
    else:  # made as it is written (see write_private)
        for piece in data:
            _write_all(fd, piece)


def _writev_all(fd: int, pieces: Sequence[bytes]) -> None:
    for start in range(0, len(pieces), _IOV_MAX):
        batch = pieces[start : start + _IOV_MAX]
        written = os.writev(fd, batch)
        if written < sum(map(len, batch)):  # a short write: finish the batch plainly
            _write_all(fd, b"".join(batch)[written:])


def _write_temp(
    dir_fd: int, name: str, data: Content | Iterable[bytes], mode: int, *, sync: bool = True
) -> str:
    tmp = temp_name(name)
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        _write_all(fd, data)
        if mode != 0o600:
            os.fchmod(fd, mode)
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.close(fd)
    return tmp


def _digest(data: Content) -> str:
    if isinstance(data, bytes):
        return hashlib.sha256(data).hexdigest()
    h = hashlib.sha256()
    for piece in data:
        h.update(piece)
    return h.hexdigest()


def holds(dir_fd: int, name: str, ino: int, pieces: Content) -> bool:
    """Whether `name` is the regular file `ino` and holds exactly the concatenation of
    `pieces` (compared a block at a time)."""
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    try:
        st = os.fstat(fd)
        if isinstance(pieces, bytes):
            blocks: Iterable[bytes] = (pieces,)
            size = len(pieces)
        else:
            ends = list(itertools.accumulate(map(len, pieces)))
            blocks = _blocks(pieces, ends)
            size = ends[-1] if ends else 0
        if not stat.S_ISREG(st.st_mode) or st.st_ino != ino or st.st_size != size:
            return False
        for want in blocks:
            got = os.read(fd, len(want))
            while len(got) < len(want):
                more = os.read(fd, len(want) - len(got))
                if not more:
                    return False
                got += more
            if got != want:
                return False
        return os.read(fd, 1) == b""
    finally:
        os.close(fd)


class ReplaceOptions(TypedDict, total=False):
    """replace_file's keywords (see its docstring)."""

    keep_prev: str | None
    prev_was: Sequence[int] | None
    expected_data: Content | None
    leftovers: list[str] | None
    on_own_write: OwnWrite | None
    versions: OwnContent | None
    refuse_held: bool


@dataclass(frozen=True, slots=True)
class _At:
    """The file a replace writes: its open dir, the dir's path (for messages), its name."""

    dir_fd: int
    dir_path: Path
    name: str

    @property
    def path(self) -> Path:
        return self.dir_path / self.name


def replace_file(
    dir_path: Path,
    name: str,
    data: Content,
    expected: FileIdentity | None,
    **options: Unpack[ReplaceOptions],
) -> FileIdentity:
    """Atomically replace `name` with `data` if it is still `expected` (None: must not exist).

    Raises WriteConflict when someone else wrote it meanwhile (nothing of theirs is lost),
    MemorydError for a write failure such as a full disk (the old file is untouched).
    `expected_data`: the expected file's bytes, from a caller that holds them (the daemon):
    they are compared as they are instead of by sha256, and the returned identity carries no
    sha256 (such a caller compares bytes next time too). Hashing a 2 MB archive twice costs
    more than the rest of a daemon's pass. Either may be pieces (see `Content`).
    `leftovers`: where to put the name the old file has after the swap, for a caller that
    removes it later (`remove_leftovers`) instead of now, before its next write.
    `prev_was`: the [inode, size, mtime_ns] `keep_prev` had when memoryd put it there. If it
    is still that inode but its size or mtime changed, a program that had the old file open
    (`slow_tool > MEMORY.md`) wrote to it since: it is never replaced (WriteConflict; the
    caller brings those bytes back, see indexing.write.late_write).
    `on_own_write`: see OwnWrite. `versions`: the version store, told what was written.
    `refuse_held`: a file another program holds open for writing (`tool > a.md` not done
    yet) is not swapped out, whose later bytes would land in an unlinked file: WriteConflict
    naming the program, nothing written (see `openfiles`). MEMORY.md has its own way back
    (`keep_prev`); a memory file written back by a restore has none.
    """
    with open_dir(dir_path) as dir_fd:
        at = _At(dir_fd, dir_path, name)
        tmp = _write_new(at, data, expected)
        try:
            st, own_sha = _announce(at, tmp, data, options)
            crash_point("index.before_swap")
            _swap_in(at, tmp, expected, options)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        fsync_dir(dir_fd)
        ident = (st.st_ino, st.st_size, st.st_mtime_ns)
        digest = (own_sha or _digest(data)) if options.get("expected_data") is None else ""
        versions = options.get("versions")
        if versions is not None:  # with the sha256: not hashed twice
            versions.own_content(dir_path, name, data, own_sha, ident)
        return FileIdentity(*ident, digest)


def _write_new(at: _At, data: Content, expected: FileIdentity | None) -> str:
    """The new bytes in a temp file beside the old one, with its mode (0600 for a new file)."""
    mode = 0o600
    if expected is not None:
        with contextlib.suppress(OSError):
            mode = stat.S_IMODE(os.stat(at.name, dir_fd=at.dir_fd, follow_symlinks=False).st_mode)
    try:
        return _write_temp(at.dir_fd, at.name, data, mode)
    except OSError as error:
        raise MemorydError(
            f"{at.path}: could not write the new version ({error.strerror}); "
            "the old file is untouched. Free disk space or fix permissions, then rerun."
        ) from error


def _announce(
    at: _At, tmp: str, data: Content, options: ReplaceOptions
) -> tuple[os.stat_result, str]:
    """Tell the version store and the caller what is about to be written, before the swap;
    the temp file's stat (the identity it will have under its name: a rename keeps inode and
    mtime, and a stat by name after the swap could already see another writer's) and the
    sha256, when one was taken."""
    st = os.stat(tmp, dir_fd=at.dir_fd, follow_symlinks=False)
    own_sha = ""
    versions = options.get("versions")
    if versions is not None:  # hashed once: the flush takes this sha256 too
        own_sha = _digest(data)
        versions.own_intent(at.dir_path, at.name, own_sha)
    on_own_write = options.get("on_own_write")
    if on_own_write is not None:
        on_own_write(at.dir_path, at.name, (st.st_ino, st.st_size, st.st_mtime_ns))
    return st, own_sha


def _swap_in(at: _At, tmp: str, expected: FileIdentity | None, options: ReplaceOptions) -> None:
    """Put the temp file under the name, if the old file is still the one expected."""
    # By stat only: the exchange below checks the bytes of what it took out (and the
    # fallback without it checks them in full before renaming).
    _check_unchanged(at.dir_fd, at.name, expected, at.dir_path)
    keep_prev, prev_was = options.get("keep_prev"), options.get("prev_was")
    if keep_prev is not None and prev_was is not None:
        _check_prev_unwritten(at.dir_fd, keep_prev, prev_was, at.dir_path)
    try:
        if expected is None:
            _create_no_replace(at.dir_fd, tmp, at.name, at.dir_path)
        else:
            swap = _Swap(tmp, (expected, options.get("expected_data")), keep_prev,
                         options.get("leftovers"), options.get("refuse_held", False))  # fmt: skip
            _swap(at, swap)
    except OSError as error:  # EPERM (an immutable file), EROFS, EACCES...
        raise MemorydError(
            f"{at.path}: could not be replaced ({error.strerror}); it is "
            "untouched. Check the file's and the folder's permissions (or `chattr -i`), "
            "then rerun."
        ) from error


Expected = tuple[FileIdentity, Content | None]  # the identity, and the bytes when they are held


def _is_expected(dir_fd: int, name: str, expected: Expected) -> bool:
    identity, data = expected
    if data is not None:
        return holds(dir_fd, name, identity.ino, data)
    found = identity_of(dir_fd, name)
    return found is not None and found[1].ino == identity.ino and found[1].sha256 == identity.sha256


def _looks_expected(dir_fd: int, name: str, expected: Expected) -> bool:
    """`_is_expected`, where a file that cannot even be looked at (a symlink, a FIFO, one
    over the read limit) is simply not the expected one."""
    try:
        return _is_expected(dir_fd, name, expected)
    except (OSError, ValueError):
        return False


def _check_unchanged(dir_fd: int, name: str, expected: FileIdentity | None, dir_path: Path) -> None:
    """A look by stat before the swap, which then checks the bytes of what it took out."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        same = expected is None
    else:
        same = expected is not None and (st.st_ino, st.st_size, st.st_mtime_ns) == (
            expected.ino,
            expected.size,
            expected.mtime_ns,
        )
    if not same:
        raise WriteConflict(f"{dir_path / name} changed while memoryd was editing it")


def _check_prev_unwritten(dir_fd: int, prev: str, was: Sequence[int], dir_path: Path) -> None:
    if written_since(stat_id(dir_fd, prev), was):
        raise WriteConflict(f"{dir_path / prev} was written to after memoryd's last swap")


def _create_no_replace(dir_fd: int, tmp: str, name: str, dir_path: Path) -> None:
    try:
        renameat2(dir_fd, tmp, dir_fd, name, RENAME_NOREPLACE)
    except NotImplementedError:
        pass
    except FileExistsError as error:
        raise WriteConflict(f"{dir_path / name} appeared while memoryd was creating it") from error
    else:
        return
    try:
        os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError as error:
        raise WriteConflict(f"{dir_path / name} appeared while memoryd was creating it") from error
    os.unlink(tmp, dir_fd=dir_fd)


@dataclass(frozen=True, slots=True)
class _Swap:
    """What an exchange puts in (`tmp`), what it must take out, and what becomes of that."""

    tmp: str
    expected: Expected
    keep_prev: str | None  # the old file's name after the swap (MEMORY.md's way back)
    leftovers: list[str] | None  # else: its temp name, for the caller to remove later
    refuse_held: bool


def _swap(at: _At, swap: _Swap) -> None:
    dir_fd, tmp, name, dir_path = at.dir_fd, swap.tmp, at.name, at.dir_path
    expected, keep_prev, leftovers = swap.expected, swap.keep_prev, swap.leftovers
    try:
        # Exchange, then look at what came out: if it is not what we read, someone slipped a
        # write in after our check, so exchange back and let the caller retry from theirs.
        renameat2(dir_fd, tmp, dir_fd, name, RENAME_EXCHANGE)
    except NotImplementedError:
        if not _looks_expected(dir_fd, name, expected):
            raise WriteConflict(f"{dir_path / name} changed while memoryd was editing it") from None
        if swap.refuse_held:
            _refuse_held(dir_fd, name, name, dir_path)
        if keep_prev is not None:
            previous = identity_of(dir_fd, name)
            if previous is not None:
                prev_tmp = _write_temp(dir_fd, keep_prev, previous[0], 0o600)
                os.rename(prev_tmp, keep_prev, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    # `tmp` now names what was under `name`: if looking at it fails, it is someone else's
    # file (a symlink swapped in, say) and must go back, never be unlinked as our temp.
    if not _looks_expected(dir_fd, tmp, expected):
        renameat2(dir_fd, tmp, dir_fd, name, RENAME_EXCHANGE)
        raise WriteConflict(f"{dir_path / name} changed during the swap")
    if swap.refuse_held:  # after the exchange: no new open by name reaches the old file now
        try:
            _refuse_held(dir_fd, tmp, name, dir_path)
        except WriteConflict:
            renameat2(dir_fd, tmp, dir_fd, name, RENAME_EXCHANGE)
            raise
    crash_point("index.after_swap")
    if keep_prev is not None:
        os.rename(tmp, keep_prev, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        # A program that opened the old file before the exchange (`tool > MEMORY.md`) may
        # have written to it since the look above: then its file goes back under the name.
        if not _looks_expected(dir_fd, keep_prev, expected):
            renameat2(dir_fd, keep_prev, dir_fd, name, RENAME_EXCHANGE)
            raise WriteConflict(f"{dir_path / name} was written to during the swap")
    elif leftovers is not None:
        leftovers.append(tmp)  # one of our temp names: swept after a crash (remove_stray_temps)
    else:
        os.unlink(tmp, dir_fd=dir_fd)


def _refuse_held(dir_fd: int, now_as: str, name: str, dir_path: Path) -> None:
    """WriteConflict when another program holds the file now under `now_as` (was `name`)
    open for writing: its later bytes would land in a file memoryd is about to drop."""
    from memoryd.storage import openfiles

    held = openfiles.writers(dir_fd, now_as)
    if held:
        raise WriteConflict(
            f"{dir_path / name} is open for writing by {openfiles.describe(held)}, whose "
            "later bytes would be lost: memoryd wrote nothing. Rerun once that program is done"
        )


def put_back_late(
    dir_fd: int, prev: str, name: str, wrote: Sequence[int], late: str, dir_path: Path
) -> str:
    """Give `prev`'s file (a writer's bytes that landed in the old file after a swap) the
    name `name` again if `name` is still the file memoryd wrote (`wrote`: its [inode, size,
    mtime_ns]), by an exchange, so that memoryd's version is what `prev` holds; else, or if
    `name` changed during the exchange (then it goes back), the first free `late`,
    `late-1`, ... Never replaces a file. Returns the name the bytes got."""
    if stat_id(dir_fd, name) == list(wrote):
        try:
            renameat2(dir_fd, prev, dir_fd, name, RENAME_EXCHANGE)
        except NotImplementedError:
            pass
        else:
            if stat_id(dir_fd, prev) == list(wrote):
                return name
            renameat2(dir_fd, prev, dir_fd, name, RENAME_EXCHANGE)
    return rename_to_free(dir_fd, prev, dir_fd, late, "-", where=(dir_path, dir_path))


def remove_leftovers(dir_path: Path, names: list[str]) -> None:
    """Remove the old files `replace_file` left under temp names (see its `leftovers`)."""
    if not names:
        return
    with open_dir(dir_path) as dir_fd:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)


def check_same_filesystem(src_fd: int, src_dir: Path, dst_fd: int, dst_dir: Path) -> None:
    if os.fstat(src_fd).st_dev != os.fstat(dst_fd).st_dev:
        raise UnsafeFilesystemOperation(
            f"{dst_dir} is on another filesystem than {src_dir}: memoryd moves files only "
            "by rename, never by copy. Keep the trash inside the memory dir."
        )


def rename_no_replace(
    src_fd: int, src: str, dst_fd: int, dst: str, *, where: tuple[Path, Path]
) -> None:
    """Rename a file between two open folders of one filesystem; never overwrite, never copy
    (FileExistsError when `dst` exists, UnsafeFilesystemOperation across filesystems). No
    fsync: a caller moves many files and syncs both folders once at the end."""
    try:
        try:
            renameat2(src_fd, src, dst_fd, dst, RENAME_NOREPLACE)
        except NotImplementedError:
            # link + unlink never overwrites either; a crash in between leaves two names
            # for one inode, which recovery resolves (journal.settle). A file renamed onto
            # `src` after the link is someone else's new one, not what was moved: it stays.
            os.link(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
            moved = os.stat(dst, dir_fd=dst_fd, follow_symlinks=False).st_ino
            with contextlib.suppress(FileNotFoundError):  # gone meanwhile: nothing to unlink
                if os.stat(src, dir_fd=src_fd, follow_symlinks=False).st_ino == moved:
                    os.unlink(src, dir_fd=src_fd)
    except OSError as error:
        if error.errno == errno.EXDEV:
            raise UnsafeFilesystemOperation(
                f"{where[1]} is on another filesystem than {where[0]}"
            ) from error
        raise


def rename_to_free(
    src_fd: int, src: str, dst_fd: int, name: str, variant: str, *, where: tuple[Path, Path]
) -> str:
    """`rename_no_replace` to `name`, or else to the first free `<stem><variant><n>.md`
    (n = 1, 2, ...): never overwriting, and with no look before the rename that another
    process could outrun. Returns the name the file got."""
    stem, suffix = (name[:-3], ".md") if name.endswith(".md") else (name, "")
    for n in itertools.count():
        candidate = f"{stem}{variant}{n}{suffix}" if n else name
        try:
            rename_no_replace(src_fd, src, dst_fd, candidate, where=where)
        except FileExistsError:
            continue
        return candidate
    raise AssertionError("unreachable")  # itertools.count() never ends


def write_private(path: Path, data: bytes) -> None:
    """Atomically write one of memoryd's own files (the heartbeat) as 0600, without fsyncs: it
    is rewritten every few seconds, and after a power cut the one before is as good."""
    ensure_private_dir(path.parent)
    with open_dir(path.parent) as dir_fd:
        try:
            tmp = _write_temp(dir_fd, path.name, data, 0o600, sync=False)
        except OSError as error:
            if error.filename is not None:
                raise
            # A failed write names no file (ENOSPC, EFBIG): say which one.
            raise OSError(error.errno, error.strerror, str(path)) from error
        try:
            os.rename(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise


def is_own_temp(name: str) -> bool:
    return TEMP_MARK in name and name.endswith(".tmp")


STRAY_TEMP_AGE = 3600.0  # seconds: no write of memoryd's lasts this long


def temp_owner(name: str) -> int | None:
    """The pid in one of memoryd's temp names (see temp_name), or None (also for a number no
    process can have: `os.kill` raised OverflowError on a planted 20-digit one, at every
    start)."""
    if not is_own_temp(name):
        return None
    pid, dash, _ = name.rpartition(TEMP_MARK)[2].partition("-")
    if not (dash and pid.isascii() and pid.isdigit() and len(pid) <= 10):
        return None
    return int(pid) if 0 < int(pid) < 1 << 31 else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def remove_stray_temps(dir_path: Path, names: Iterable[str], now: float) -> list[str]:
    """Remove temp files of memoryd's own that a killed memoryd left behind (a crash between
    writing a temp and swapping it in): those whose writer is gone and that are over an hour
    old. Anything else (a live writer's, a symlink, a folder) stays. The names removed."""
    removed: list[str] = []
    with open_dir(dir_path) as dir_fd:
        for name in names:
            pid = temp_owner(name)
            if pid is None or pid == os.getpid() or _alive(pid):
                continue
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < STRAY_TEMP_AGE:
                    continue
                os.unlink(name, dir_fd=dir_fd)
            except OSError:
                continue
            removed.append(name)
    return removed


# --- crash points (test instrumentation, kept in the product on purpose) --------------------------
# The crash-loop tests (tests/test_crash.py, the daemon's) run memoryd as a real process and
# kill it at every step in turn: `MEMORYD_CRASH_AT=k` makes the k-th crash point the process
# passes SIGKILL it (`MEMORYD_CRASH_TRACE=file` also names the point). It has to live in the
# product, read from the environment, because the process under test is a child the test
# cannot reach otherwise. Unset, a crash point costs one dict lookup.
_crash_points_passed = [0]


def crash_point(label: str) -> None:
    """A step a crash-loop test may kill this process at (see above); otherwise nothing."""
    target = os.environ.get("MEMORYD_CRASH_AT")
    if not target:
        return
    only = os.environ.get("MEMORYD_CRASH_ONLY")  # label prefixes that count, comma-separated
    if only and not label.startswith(tuple(only.split(","))):
        return
    _crash_points_passed[0] += 1
    if _crash_points_passed[0] == int(target):
        trace = os.environ.get("MEMORYD_CRASH_TRACE")
        if trace:
            with open(trace, "a", encoding="utf-8") as handle:
                handle.write(f"{_crash_points_passed[0]} {label}\n")
        import signal  # here: only a crash-loop test's child gets this far

        os.kill(os.getpid(), signal.SIGKILL)
