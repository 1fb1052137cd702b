"""One child process of a worker (a user's command, torchtitan under torchrun): start it,
copy its output line by line, drain it, and stop it, the same way for every engine.

The child stays in the worker's process group (no new session), so the launcher's group kill
on timeout or Ctrl-C reaches it too. A SIGTERM sent to the worker alone is passed on to the
child, and the worker waits for it to exit: were the worker to die first, the launcher would
SIGKILL the group at once and cut the child's own grace period. Torch-free.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# After the child exits, keep reading its output for this long (seconds): a grandchild that
# inherited the pipe (a compile worker, a logger) must not keep the worker waiting until the
# launcher's timeout.
DRAIN_S = 2.0
# A "line" this long (bytes) without a newline (a progress bar redrawn with \r) is passed on
# as it is.
MAX_LINE_BYTES = 1 << 20


@dataclass(frozen=True)
class ChildExit:
    """How a child ended. ``code``: its exit status (negative: killed by that signal);
    ``forwarded``: the signal passed on from the worker, if any; ``stopped``: ``on_line`` asked
    for it to be stopped; ``wall_s``: seconds from start to exit, wall clock."""

    code: int
    forwarded: int | None
    stopped: bool
    wall_s: float


def stop(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the child, SIGKILL it after ``grace_s`` seconds; no-op when it has exited."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _emit(line: bytes, copy_to: IO[bytes] | None, on_line: Callable[[str], bool] | None) -> bool:
    if copy_to is not None:
        copy_to.write(line + b"\n")
        copy_to.flush()
    text = line.decode("utf-8", errors="replace")
    # a final line without newline still ends one, so the worker's error line starts a line
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return bool(on_line(text)) if on_line is not None else False


def _stream(
    proc: subprocess.Popen, copy_to: IO[bytes] | None, on_line: Callable[[str], bool] | None
) -> bool:
    """Copy the child's output until EOF, or DRAIN_S after it exited; True when ``on_line``
    asked to stop (the rest is then not read)."""
    fd = proc.stdout.fileno()
    buf = b""
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            if sel.select(timeout=0.2):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                if len(buf) > MAX_LINE_BYTES:
                    lines.append(buf)
                    buf = b""
                for line in lines:
                    if _emit(line, copy_to, on_line):
                        return True
            elif proc.poll() is not None:
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > DRAIN_S:
                    break
    if buf:
        return _emit(buf, copy_to, on_line)
    return False


def run_child(
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str],
    grace_s: float,
    on_line: Callable[[str], bool] | None = None,
    copy_to: IO[bytes] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> ChildExit:
    """Run ``argv`` (a list, never a shell string) to its end, its stdout and stderr merged.

    Every output line goes to this process's stdout (the run's ``stdout.log``), to ``copy_to``
    (a binary file, e.g. torchtitan's console.log) when given, and to ``on_line`` (the line
    without its newline); when ``on_line`` returns True the child is stopped (SIGTERM, SIGKILL
    after ``grace_s`` seconds) and its remaining output is dropped. An exception (Ctrl-C
    included) stops the child the same way before it propagates. ``on_start`` is called with
    the child's pid once it has started (e.g. to sample its CPU time).
    """
    forwarded: list[int] = []
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )

    def forward(signum: int, _frame: Any) -> None:
        forwarded.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, forward) if in_main else None
    try:
        if on_start is not None:
            on_start(proc.pid)
        stopped = _stream(proc, copy_to, on_line)
        if stopped:
            stop(proc, grace_s)
        code = proc.wait()
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:  # an exception escaped the loop: leave no child behind
            stop(proc, grace_s)
        proc.stdout.close()
    return ChildExit(
        code=code,
        forwarded=forwarded[0] if forwarded else None,
        stopped=stopped,
        wall_s=time.perf_counter() - t0,
    )
