"""One preflight line (:class:`Check`), shared by the checks of :mod:`afbench.preflight`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    """Outcome of one check: one line of preflight output."""

    item: str
    ok: bool
    current: str = ""
    required: str = ""
    action: str = ""
    #: passes, but the user should know before reading the results (``[WARN]``: never stops a run)
    warn: bool = False

    def line(self) -> str:
        """``[PASS] item: current ...``, ``[WARN] item: current ...; action ...`` for a pass
        to read with care, or for a failure
        ``[FAIL] item: current ...; required ...; action ...``."""
        if self.ok and self.warn:
            return f"[WARN] {self.item}: current {self.current}; action {self.action}"
        if self.ok:
            return f"[PASS] {self.item}: current {self.current}"
        return (
            f"[FAIL] {self.item}: current {self.current}; required {self.required}; "
            f"action {self.action}"
        )
