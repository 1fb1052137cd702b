"""Recompiles of a compiled run inside its measured window (a caveat on the verdict).

A ``torch.compile`` run that recompiles while its measured steps run times compilation, not
the steady state. Two sources say so:

- the log, for every engine: torch._dynamo's warnings, in glog form behind an optional
  torchrun ``[rankN]:`` prefix, e.g.::

      V1201 12:00:07.123000 4242 torch/_dynamo/guards.py:2997] [0/1] [__recompiles] Recompiling function forward in /work/model.py:120
      W1201 12:00:07.123000 4242 torch/_dynamo/convert_frame.py:964] [0/8] torch._dynamo hit config.recompile_limit (8)

  (``Recompiling function`` is printed with ``TORCH_LOGS=recompiles``; the limit warning is
  printed by default, named ``cache_size_limit`` before torch 2.6), and the error
  ``recompile_limit reached`` with ``fullgraph=True``;
- the builtin engine's step records: ``dynamo_unique_graphs``, the cumulative
  ``torch._dynamo.utils.counters["stats"]["unique_graphs"]`` after each step.

A step line is printed when its step ends, so a warning printed after the line of step N
happened while step N + 1 ran: it is "after step N".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from afbench.analysis.steplog import DEFAULT_STEP_PATTERN, compile_step_pattern, log_lines

_RECOMPILE_RE = re.compile(
    r"\bRecompiling function\b"
    r"|\bhit config\.(?:recompile_limit|cache_size_limit)\b"
    r"|\b(?:recompile_limit|cache_size_limit) reached\b"
)


@dataclass(frozen=True)
class Recompile:
    """One recompile seen in a run.

    Attributes:
        after_step: the last training step that had ended before it (0: before the first
            step); the recompile happened during step ``after_step + 1``.
        line: 1-based line number in the log (``None`` when found in step records).
        text: the log line, stripped (or a description of the counter change).
    """

    after_step: int
    line: int | None
    text: str


def find_recompiles(
    text: str | Iterable[str], pattern: str = DEFAULT_STEP_PATTERN
) -> list[Recompile]:
    """Every recompile warning of a log, in log order, with the step it came after.

    Args:
        text: the whole log, or its lines (steplog.iter_log); ANSI escapes are stripped.
        pattern: the engine's step-line regex (named group ``step``), used to know which
            step had ended when each warning was printed.

    Raises:
        ValueError: ``pattern`` lacks the named groups ``step`` and ``value``.
    """
    step_re = compile_step_pattern(pattern)
    last_step = 0
    found: list[Recompile] = []
    for lineno, line in log_lines(text):
        if _RECOMPILE_RE.search(line):
            found.append(Recompile(last_step, lineno, line.strip()))
            continue
        match = step_re.search(line)
        if match is not None and match.group("step") is not None:
            try:
                last_step = int(match.group("step"))
            except ValueError:
                continue  # the strict step parse reports it
    return found


def _in_window(recompiles: Iterable[Recompile], first: int, last: int) -> Recompile | None:
    return next((r for r in recompiles if first <= r.after_step + 1 <= last), None)


def recompile_in_window(
    text: str | Iterable[str], first: int, last: int, pattern: str = DEFAULT_STEP_PATTERN
) -> Recompile | None:
    """The first recompile of a log that happened during a step of ``first..last``
    (inclusive, 1-based training steps), or ``None``.

    Raises:
        ValueError: see :func:`find_recompiles`.
    """
    return _in_window(find_recompiles(text, pattern), first, last)


def recompile_in_records(
    records: Iterable[Mapping[str, Any]], first: int, last: int
) -> Recompile | None:
    """The first step of ``first..last`` during which the builtin engine's dynamo graph
    count grew, from its step records (``step`` and ``dynamo_unique_graphs``, cumulative), or
    ``None``. Records without ``dynamo_unique_graphs`` (eager runs, other engines) are
    ignored.
    """
    previous: int | None = None
    for rec in sorted(
        (r for r in records if r.get("dynamo_unique_graphs") is not None),
        key=lambda r: r["step"],
    ):
        graphs = int(rec["dynamo_unique_graphs"])
        step = int(rec["step"])
        if previous is not None and graphs > previous and first <= step <= last:
            return Recompile(
                step - 1, None, f"torch._dynamo unique_graphs {previous} -> {graphs} in step {step}"
            )
        previous = graphs
    return None


def recompile_caveat(recompile: Recompile) -> str:
    """The line the summary, the report and the verdict carry for a flagged run."""
    return f"recompiled inside the measured window, after step {recompile.after_step}"
