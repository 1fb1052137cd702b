"""Wait for a quiet machine before a measured run: a run started into other jobs' load is
judged contended (afbench.analysis.contention) and set aside, so it cost its time for
nothing; waiting for the load to pass costs only waiting.

Quiet is decided with the judge the runs themselves get: a CPU-bound probe of
:data:`PROBE_S` seconds in this process, sampled like a run's measured window
(:class:`afbench.analysis.contention.WindowSampler`: its thread's run-queue wait, steal, and
without schedstat CPU pressure and its CPU share), is not judged contended. The probe's
thread stands for a run's step thread: it waits for a CPU exactly when other jobs keep the
CPUs busy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from afbench.analysis.contention import WindowSampler, judge
from afbench.messages import say

log = logging.getLogger(__name__)

#: seconds of one probe: dozens of CFS slices (3-24 ms) and of utime ticks (10 ms)
PROBE_S = 0.5
#: seconds between two probes while the machine is busy
POLL_S = 5.0


@dataclass(frozen=True)
class Quiet:
    """What :func:`wait_for_quiet` found: ``quiet`` (the last probe was not contended),
    ``waited_s`` (seconds from the first probe to the run's start) and ``reasons`` (the last
    busy probe's reasons, the judge's sentences; empty when quiet at once)."""

    quiet: bool
    waited_s: float
    reasons: tuple[str, ...]


def probe(seconds: float = PROBE_S) -> list[str]:
    """Busy-loop this thread for ``seconds`` and judge it as a run's window: the judge's
    reasons in English for the log lines (``["waited for a CPU 62% of the window > 10%"]``),
    empty when quiet.
    Interruptible (Ctrl-C raises KeyboardInterrupt)."""
    sampler = WindowSampler(threads=1, scope="window", source="quiet probe")
    sampler.start()
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for i in range(2000):
            x ^= i
    sampler.end()
    contended, reasons = judge(sampler.record())
    return [say(code, **values).text for code, values in reasons] if contended else []


def wait_for_quiet(
    bound_s: float, what: str, *, probe: Callable[[], list[str]] = probe, poll_s: float = POLL_S
) -> Quiet:
    """Probe until the machine is quiet, for at most ``bound_s`` seconds
    (``experiment.wait_for_quiet_s``; 0: no probe). Logs one line when it starts waiting
    (what was measured), one when the machine became quiet, and one when the bound passed:
    ``the machine was never quiet enough in 120 s (...): running <what> anyway``.

    Args:
        bound_s: the longest wait, seconds.
        what: the run, for the log lines.
        probe: the probe (default :func:`probe`), returning the contended reasons.
        poll_s: seconds between probes.
    """
    if bound_s <= 0:
        return Quiet(True, 0.0, ())
    t0 = time.monotonic()
    reasons = probe()
    if not reasons:
        return Quiet(True, 0.0, ())
    log.warning(
        "afbench: the machine is busy (a probe %s); %s waits for quiet, at most %g s "
        "(experiment.wait_for_quiet_s)",
        "; ".join(reasons),
        what,
        bound_s,
    )
    while (left := bound_s - (time.monotonic() - t0)) > 0:
        time.sleep(min(poll_s, left))
        reasons = probe()
        if not reasons:
            waited = time.monotonic() - t0
            log.info("afbench: quiet after %.0f s; %s starts", waited, what)
            return Quiet(True, waited, ())
    waited = time.monotonic() - t0
    log.warning(
        "afbench: the machine was never quiet enough in %.0f s (last probe: %s; "
        "experiment.wait_for_quiet_s=%g): running %s anyway; its contention is "
        "measured and judged as always",
        waited,
        "; ".join(reasons),
        bound_s,
        what,
    )
    return Quiet(False, waited, tuple(reasons))
