"""Bounds on afbench's own reading of a finished run's files (issue 33).

Reading a run's log (the strict step parse, recompile warnings, the last error line) happens
after the run's process has ended, outside ``launcher.timeout_s``. A run that printed a GiB
would keep afbench busy for minutes, and its Ctrl-C path would read it again. Two bounds, both
checked by :func:`afbench.analysis.steplog.iter_log` before every line it reads:

- a budget: :class:`ReadBudget` gives the reads inside it ``seconds`` of wall time (the launcher
  and ``collect`` give each run ``launcher.collect_timeout_s``); past it a read raises
  :class:`afbench.analysis.errors.LogNotRead` naming the file, the key and what to do;
- a stop: :func:`stop_reading` (a second Ctrl-C or SIGTERM while afbench stops, or a Ctrl-C
  during the report) makes every read raise at once until :func:`resume_reading`, so the report
  is written from what was read, each run left unread saying so.

State is per thread for budgets (a ``ContextVar``) and process-wide for the stop (a signal
handler runs in the main thread, between two bytecodes of whatever it interrupted).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from pathlib import Path

from afbench.analysis.errors import LogNotRead

#: the config key of the budget, named in messages
COLLECT_TIMEOUT_KEY = "launcher.collect_timeout_s"


class ReadBudget:
    """Reads of logs inside ``with`` blocks of this budget end by ``seconds`` (wall) after the
    budget was made, however many blocks share it; ``key`` is the setting a message tells the
    user to raise. Nested budgets: the inner one applies."""

    def __init__(self, seconds: float, key: str = COLLECT_TIMEOUT_KEY) -> None:
        self.deadline, self.seconds, self.key = time.monotonic() + seconds, seconds, key
        self._tokens: list[Token] = []

    def __enter__(self) -> ReadBudget:
        self._tokens.append(_BUDGET.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _BUDGET.reset(self._tokens.pop())


_BUDGET: ContextVar[ReadBudget | None] = ContextVar("afbench_read_budget", default=None)
_stopped = ""  # why every read stops at once; "" while reads go on


def stop_reading(why: str) -> None:
    """Make every log read raise :class:`LogNotRead` from now on (safe in a signal handler)."""
    global _stopped
    _stopped = why


def resume_reading() -> None:
    """Undo :func:`stop_reading`."""
    global _stopped
    _stopped = ""


@contextmanager
def reads_resumed_after() -> Iterator[None]:
    """Reads stopped inside the block go on again after it (:func:`resume_reading`), for
    whatever the process does next: a sweep's next job, the next test."""
    try:
        yield
    finally:
        resume_reading()


def check_reading(path: Path | str) -> None:
    """Raise :class:`LogNotRead` for ``path`` when reads were stopped or the current budget is
    spent; return at once otherwise (a monotonic clock read)."""
    if _stopped:
        raise LogNotRead(
            f"{path}: not read: {_stopped}; re-render the report to read it "
            "(python -m afbench.report <output dir>)"
        )
    budget = _BUDGET.get()
    if budget is not None and time.monotonic() > budget.deadline:
        size = Path(path).stat().st_size / 2**20 if Path(path).is_file() else 0.0
        raise LogNotRead(
            f"{path}: not read within {budget.seconds:g} s ({budget.key}; {size:.0f} MiB): "
            f"raise {budget.key} or make the run print less (the log is kept)"
        )
