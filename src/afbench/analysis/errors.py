"""Exception types of :mod:`afbench.analysis`.

Each is raised where the problem is found, with a message that names the file, step or
column and what is wrong; the entry point turns it into one line and an exit code.
"""

from __future__ import annotations


class InvalidLog(ValueError):
    """A training log does not satisfy the strict step-window rules.

    Raised by :func:`afbench.analysis.steplog.parse_step_times` for a missing or duplicated
    step, or a step time that is non-numeric, NaN/inf, zero or negative. The verdict of a
    comparison with an invalid log is ``RUN_FAILED``.
    """


class ProfileUnavailable(Exception):
    """No usable profile for one side: its run failed, or ``step_trace_time.csv`` is missing,
    duplicated or unreadable. Maps to profiling status ``UNAVAILABLE``."""


class ProfileIncomparable(Exception):
    """A profile exists but cannot be compared: wrong rows/steps, mixed or differing
    ``Device_id``, a missing column, or a non-finite or negative phase value. Maps to
    profiling status ``INCOMPARABLE``."""


class LogNotRead(InvalidLog):
    """A run's log was left unread: reading it took longer than its budget
    (``launcher.collect_timeout_s``) or afbench was told to stop (a second Ctrl-C while it
    stops). Raised by :func:`afbench.analysis.reading.check_reading`; the message names the
    file, why, and what to do. An :class:`InvalidLog`: the run gives no statistics."""
