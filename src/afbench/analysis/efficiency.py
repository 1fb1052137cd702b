"""Peak memory, TFLOPs and MFU of a run as read from an engine's own log, and afbench's own
FLOP count of a training window (:func:`training_efficiency`). Pure.

The builtin engine measures these itself (``afbench.engines.efficiency``); torchtitan prints
them on every step line and the command engine reports none. Either way a run's
``result.json`` gets the same field names (GiB = 2**30 bytes):

``peak_memory_allocated_gib``, ``peak_memory_reserved_gib``, ``peak_rss_gib``,
``memory_source`` (how the figures were obtained, or ``"not reported ..."``),
``tflops_per_device``, ``mfu_pct``, ``tflops_source``. Each source is a catalog sentence as
plain data (:func:`afbench.analysis.said`: a labels.yaml key and its values), never English.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from afbench.analysis import flops, said

#: torchtitan's ``memory: X GiB(Y%)`` (``torchtitan/components/metrics.py``,
#: ``DeviceMemoryMonitor.get_peak_stats``): ``reserved_bytes.all.peak`` of the logging rank's
#: device from ``torch.<device>.memory_stats``, reset after every step line
#: (``reset_peak_stats``), so each line is the peak since the previous one.
TITAN_MEMORY_SOURCE = "src_titan_memory"
#: afbench's FLOP count (:mod:`afbench.analysis.flops`) x the measured tokens/s.
TFLOPS_SOURCE = "src_tflops"
#: torchtitan's own ``tflops:`` / ``mfu:`` step-line fields, averaged over the window.
TITAN_TFLOPS_SOURCE = "src_titan_tflops"


def not_reported(engine: str) -> dict[str, Any]:
    """The memory and efficiency fields of an engine that reports none (the command engine:
    afbench cannot see inside the user's process)."""
    return {
        "peak_memory_allocated_gib": None,
        "peak_memory_reserved_gib": None,
        "peak_rss_gib": None,
        "memory_source": said("src_not_reported", engine=engine),
        "tflops_per_device": None,
        "mfu_pct": None,
        "tflops_source": said("src_not_reported", engine=engine),
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def titan_efficiency(
    records: Iterable[Mapping[str, Any]], first_step: int, last_step: int
) -> dict[str, Any]:
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
    where = {"first": first_step, "last": last_step}
    return {
        "peak_memory_allocated_gib": None,
        "peak_memory_reserved_gib": max(memory) if memory else None,
        "peak_memory_reserved_pct": max(pct) if pct else None,
        "peak_rss_gib": None,
        "memory_source": (
            said(TITAN_MEMORY_SOURCE)
            if memory
            else said("src_titan_no_field", field="memory:", **where)
        ),
        "tflops_per_device": _mean(tflops),
        "mfu_pct": _mean(mfu),
        "tflops_source": (
            said(TITAN_TFLOPS_SOURCE)
            if tflops
            else said("src_titan_no_field", field="tflops:", **where)
        ),
    }


def training_efficiency(
    model_config: dict[str, Any],
    seq_len: int,
    tokens: int,
    seconds: float,
    world_size: int,
    *,
    peak_tflops: float | None,
    device_name: str,
    dtype: str,
) -> dict[str, Any]:
    """FLOPs per token, achieved TFLOPs per device and MFU of an SFT run's measured window.

    Args:
        model_config: the model's HF config dict (``model.config.to_dict()``).
        tokens, seconds: tokens trained by the whole job in the window, and its wall seconds.
        peak_tflops: ``backend.peak_tflops`` (None: the published peak of ``device_name``).

    Returns:
        ``flops_per_token`` (FLOPs per trained token), ``flops_params`` (N of 6N),
        ``tflops_per_device`` (TFLOPs/s per device over the window), ``peak_tflops`` and
        ``peak_tflops_source``, ``mfu_pct`` (None when there is no peak), ``tflops_source``.

    A config the count cannot read gives None for every number and the reason in
    ``tflops_source``: a finished run is not failed for its FLOP count.
    """
    try:
        shape = flops.TransformerShape.from_config(model_config, "model config.json")
    except flops.ModelConfigError as exc:
        return {
            key: None
            for key in (
                "flops_per_token",
                "flops_params",
                "tflops_per_device",
                "peak_tflops",
                "peak_tflops_source",
                "mfu_pct",
            )
        } | {"tflops_source": said("na_error", error=str(exc))}
    per_token = flops.training_flops_per_token(shape, seq_len)
    tflops = (
        flops.achieved_tflops(tokens / seconds / world_size, per_token) if seconds > 0 else None
    )
    peak, source = flops.resolve_peak_tflops(peak_tflops, device_name, dtype)
    return {
        "flops_per_token": per_token,
        "flops_params": flops.count_params(shape).flops_params,
        "tflops_per_device": tflops,
        "peak_tflops": peak,
        "peak_tflops_source": source,
        "mfu_pct": flops.mfu_pct(tflops, peak) if peak and tflops is not None else None,
        "tflops_source": _tflops_source(model_config),
    }


def _tflops_source(model_config: dict[str, Any]) -> dict[str, Any]:
    """:data:`TFLOPS_SOURCE`, saying so when the parameters were counted as Qwen3's for
    another architecture."""
    kind = model_config.get("model_type", "qwen3")
    return (
        said(TFLOPS_SOURCE) if kind == "qwen3" else said("src_tflops_other_model", model_type=kind)
    )
