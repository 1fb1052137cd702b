"""Where afbench's messages go: every module logs through :mod:`logging`; this module holds
the one rich Console of the orchestrator, used by the terminal handler and by the live
progress display (``console.status``), so the two never fight over the terminal.

Hydra's job logging (``conf/hydra/job_logging/afbench.yaml``) puts :class:`ConsoleHandler` on
the root logger for the terminal (stderr, message only) and a file handler for
``<output dir>/cli.log`` (time and level before each message), so the terminal and cli.log
get the same lines: preflight results, each run's status and ETA, the verdict headline.
"""

from __future__ import annotations

import logging
import os

from rich.console import Console
from rich.highlighter import RegexHighlighter
from rich.theme import Theme


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader of our pipe is gone (Ctrl-C through ``afbench ... 2>&1 | tee log``
        stops tee too). rich's own handler exits 1 here, in the middle of the interrupted
        run's report; instead go quiet and let the run finish: cli.log still gets every line
        (the closing one included) and the exit status stays 130."""
        self.quiet = True
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.file.fileno())
        except (OSError, ValueError):  # no file descriptor: quiet is enough
            pass


#: The orchestrator's terminal (stderr), shared by the log handler and the live display.
console = _Console(
    stderr=True,
    highlight=False,
    soft_wrap=True,
    theme=Theme({"afbench.ok": "green", "afbench.skipped": "yellow", "afbench.failed": "red"}),
)


class StatusHighlighter(RegexHighlighter):
    """Colours run states and preflight results (OK / [PASS] green, SKIPPED yellow,
    FAILED / [FAIL] red) on a colour terminal; the text itself is unchanged."""

    base_style = "afbench."
    highlights = [
        r"(?P<ok>\bOK\b|\[PASS\])",
        r"(?P<skipped>\bSKIPPED\b)",
        r"(?P<failed>\bFAILED\b|\[FAIL\])",
    ]


class ConsoleHandler(logging.Handler):
    """A logging handler that prints each formatted record on :data:`console`: one line per
    record (no rich markup is interpreted, so file paths and brackets print as they are)."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.highlighter = StatusHighlighter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            console.print(self.highlighter(self.format(record)), markup=False)
        except Exception:  # logging must never raise into the caller
            self.handleError(record)
