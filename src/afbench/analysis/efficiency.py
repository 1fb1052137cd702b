"""Peak memory, TFLOPs and MFU of a run as read from an engine's own log (pure).

The builtin engine measures these itself (``afbench.engines.efficiency``); torchtitan prints
them on every step line and the command engine reports none. Either way a run's
``result.json`` gets the same field names (GiB = 2**30 bytes):

``peak_memory_allocated_gib``, ``peak_memory_reserved_gib``, ``peak_rss_gib``,
``memory_source`` (how the figures were obtained, or ``"not reported ..."``),
``tflops_per_device``, ``mfu_pct``, ``tflops_source``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: torchtitan's ``memory: X GiB(Y%)`` (``torchtitan/components/metrics.py``,
#: ``DeviceMemoryMonitor.get_peak_stats``): ``reserved_bytes.all.peak`` of the logging rank's
#: device from ``torch.<device>.memory_stats``, reset after every step line
#: (``reset_peak_stats``), so each line is the peak since the previous one.
TITAN_MEMORY_SOURCE = ("torchtitan step log 'memory: X GiB(Y%)': reserved_bytes.all.peak of "
                       "rank 0's device, reset after each logged step; max over the window")
TITAN_TFLOPS_SOURCE = ("torchtitan step log 'tflops:' / 'mfu:' (its own FLOP count and peak); "
                       "mean over the window")


def not_reported(engine: str) -> dict[str, Any]:
    """The memory and efficiency fields of an engine that reports none (the command engine:
    afbench cannot see inside the user's process)."""
    return {"peak_memory_allocated_gib": None, "peak_memory_reserved_gib": None,
            "peak_rss_gib": None, "memory_source": f"not reported (engine {engine})",
            "tflops_per_device": None, "mfu_pct": None,
            "tflops_source": f"not reported (engine {engine})"}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def titan_efficiency(records: Iterable[Mapping[str, Any]], first_step: int,
                     last_step: int) -> dict[str, Any]:
    """Memory and efficiency fields of a torchtitan run over steps ``first_step..last_step``.

    Args:
        records: step records as ``afbench.engines.torchtitan.parse_titan_log`` (or
            ``step_records``) returns them: ``step``, ``memory_gib``, ``memory_pct``,
            ``tflops``, ``mfu_pct``, each None when the line lacks it.

    Returns:
        The fields of the module docstring plus ``peak_memory_reserved_pct`` (% of device
        memory); ``peak_memory_reserved_gib`` is the largest ``memory`` of the window,
        ``tflops_per_device`` and ``mfu_pct`` the means of the window (``mfu_pct`` None when
        torchtitan printed ``N/A``: it knew no peak for the device). Without memory fields in
        the window the source says ``not reported``.
    """
    window = [r for r in records if first_step <= r["step"] <= last_step]
    memory = [r["memory_gib"] for r in window if r.get("memory_gib") is not None]
    pct = [r["memory_pct"] for r in window if r.get("memory_pct") is not None]
    tflops = [r["tflops"] for r in window if r.get("tflops") is not None]
    mfu = [r["mfu_pct"] for r in window if r.get("mfu_pct") is not None]
    where = f"steps {first_step}-{last_step}"
    return {
        "peak_memory_allocated_gib": None,
        "peak_memory_reserved_gib": max(memory) if memory else None,
        "peak_memory_reserved_pct": max(pct) if pct else None,
        "peak_rss_gib": None,
        "memory_source": (TITAN_MEMORY_SOURCE if memory
                          else f"not reported (no 'memory:' field on torchtitan's {where} lines)"),
        "tflops_per_device": _mean(tflops),
        "mfu_pct": _mean(mfu),
        "tflops_source": (TITAN_TFLOPS_SOURCE if tflops
                          else f"not reported (no 'tflops:' field on torchtitan's {where} lines)"),
    }
