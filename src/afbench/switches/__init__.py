"""Optimization switches: each applies itself to a model on a backend and reports what it did.

One module per switch (``autofuse``, ``npugraph_ex``, ``add_rmsnorm``, ``rmsnorm``,
``profiler``), each a :class:`afbench.switches.base.Switch`, listed once in
:data:`afbench.switches.registry.SWITCHES`; their implementations are ``converters``,
``fused_ops`` and ``step_profiler``. A switch the backend cannot honour raises RunSkipped (the
run is SKIPPED with the reason); a switch never silently does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the orchestrator reads switches before pydantic is loaded
    from afbench.messages import Message


@dataclass
class SwitchReport:
    """What one switch did in one run (shown in the report): ``detail`` a catalog message
    (``switch_rmsnorm``: "4 sites: RMSNorm -> ..."; code it ran, as written: ``as_written``)."""

    name: str
    applied: bool
    detail: Message
    evidence: dict = field(default_factory=dict)
