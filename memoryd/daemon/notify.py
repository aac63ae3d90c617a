"""systemd's sd_notify protocol: one datagram to $NOTIFY_SOCKET (abstract `@` names too)."""

import os
import socket


def notify(message: str, environ: dict[str, str] | None = None) -> bool:
    """Send e.g. "READY=1"; False (and no error) when not running under systemd."""
    env = os.environ if environ is None else environ
    address = env.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # Linux abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode("utf-8"))
    except OSError:
        return False
    return True


def watchdog_interval(environ: dict[str, str] | None = None) -> float | None:
    """Half of WatchdogSec, when systemd asked this process for keep-alives."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 1e6 / 2
    except ValueError:
        return None
