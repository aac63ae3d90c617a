"""Which programs hold a file open for writing (Linux `/proc`).

`tool > a.md` writes when the tool is done: a restore that swaps a.md out, or a move into
the trash, would strand those bytes. So those steps look, right after the swap or move, for
another descriptor with write access on that very file (device and inode), and undo
themselves when they find one. Best effort where `/proc` cannot say: what it finds is
certain, what it misses was missed before too.
"""

import os

PROC = "/proc"


def _writable(pid: str, fd: str) -> bool:
    try:
        with open(f"{PROC}/{pid}/fdinfo/{fd}", "rb") as handle:
            info = handle.read(4096)
    except OSError:
        return False
    for line in info.splitlines():
        if line.startswith(b"flags:"):
            try:
                flags = int(line.split()[1], 8)
            except (IndexError, ValueError):
                return False
            return flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
    return False


def _process(pid: str) -> str:
    """`PID 12 (sh)`, or `PID 12` when its command cannot be read."""
    try:
        with open(f"{PROC}/{pid}/comm", "rb") as handle:
            command = handle.read(64).decode("utf-8", "replace").strip()
    except OSError:
        command = ""
    return f"PID {pid} ({command})" if command else f"PID {pid}"


def writers(dir_fd: int, name: str) -> list[str]:
    """The processes (`PID 12 (sh)`, this one included) holding file `name` of folder `dir_fd`
    open for writing: descriptors whose link ends in `name`, then with its device and inode."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        pids = [entry.name for entry in os.scandir(PROC) if entry.name.isdigit()]
    except OSError:
        return []
    tails = ("/" + name, "/" + name + " (deleted)")
    found: list[str] = []
    for pid in pids:
        fd_dir = f"{PROC}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # gone, or not ours to look at
            continue
        for fd in fds:
            try:
                if not os.readlink(f"{fd_dir}/{fd}").endswith(tails):
                    continue
                held = os.stat(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == (st.st_dev, st.st_ino) and _writable(pid, fd):
                found.append(_process(pid))
                break
    return found


def describe(found: list[str]) -> str:
    """`PID 12 (sh)`, `PID 12 (sh) and PID 14 (tee)`."""
    shown = found[:3]
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else shown[0]) + more
