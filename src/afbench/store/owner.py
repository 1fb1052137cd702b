"""One owner per output directory: an exclusive ``fcntl.flock`` on ``<out>/.afbench.lock``,
taken before afbench writes anything there and held until the process ends (the kernel
drops it when the process dies, ``kill -9`` included). A second afbench given the same
directory is refused with the owner's pid and host."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

from afbench.errors import ConfigError

OWNER_LOCK = ".afbench.lock"
_held: dict[Path, int] = {}


class OutputBusy(ConfigError):
    """Another process owns the output directory (exit 2)."""


def claim(out_dir: Path) -> None:
    """Make this process the owner of ``out_dir`` (created if missing) until it ends, and
    write who owns it (pid, host, since) into the lock file; a no-op when it already is.

    Raises:
        OutputBusy: another process holds it; the message names that process (pid, host,
            since when) and the folder.
    """
    out_dir = Path(out_dir).resolve()
    if out_dir in _held:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir / OWNER_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = ""
        for _ in range(20):  # the owner writes its note right after it got the lock
            owner = os.pread(fd, 512, 0).decode(errors="replace").strip()
            if owner:
                break
            time.sleep(0.05)
        os.close(fd)
        raise OutputBusy(
            f"{out_dir} is in use by {owner or 'another process'}; wait for it "
            "to end or give hydra.run.dir= another folder"
        ) from None
    _held[out_dir] = fd
    text = (
        f"pid {os.getpid()} on {socket.gethostname()} since "
        f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}\n"
    )
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)
    except OSError:
        pass  # the lock is what matters; the note is for the refused process's line
