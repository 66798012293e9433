"""The systemd notification protocol (``sd_notify``), without libsystemd.

``notify("READY=1")`` once state is loaded, ``notify("WATCHDOG=1")`` every
``watchdog_interval()`` seconds from the engine loop, ``notify("STOPPING=1")`` on shutdown.
Outside systemd (no ``$NOTIFY_SOCKET``) every call is a cheap no-op that returns False.
"""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    """Send ``message`` to ``$NOTIFY_SOCKET``; True if sent, False if unset or it failed.

    Never raises: a lost notification must not take the daemon down (systemd then acts on its
    own timeouts, which is the behaviour we want from a daemon that cannot reach it).
    """
    address = os.environ.get("NOTIFY_SOCKET", "")
    if address.startswith("@"):
        address = "\0" + address[1:]  # a leading "@" names a socket in the abstract namespace
    elif not address.startswith("/"):
        return False  # unset, or a transport we do not speak (e.g. systemd's "vsock:")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode("utf-8"))
    except (OSError, ValueError):
        # OSError: socket gone, refused or of the wrong type; ValueError: a message that is not
        # encodable (UnicodeEncodeError from a lone surrogate).
        return False
    return True


def watchdog_interval() -> float | None:
    """Seconds between ``WATCHDOG=1`` pings: half of ``$WATCHDOG_USEC``, or None if no watchdog.

    Half the timeout, as sd_watchdog_enabled(3) recommends, so one late ping is not a restart.
    ``$WATCHDOG_PID``, when set, must be this process: the variables are not meant for children.
    """
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    if value <= 0:
        return None
    return value / 2_000_000
