"""Backend interface: what a device means to a worker (instances come from
:func:`afbench.backends.resolve.get_backend`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

from afbench.config.models import CompileConfig, NpuProfilerConfig
from afbench.errors import RunSkipped
from afbench.messages import Message, say

GIB = 2**30


@dataclass(frozen=True)
class PeakMemory:
    """Peak memory of one process over a window, in GiB (2**30 bytes); None = not measured.

    ``allocated``: the most bytes held by live tensors at once (``max_memory_allocated``);
    ``reserved``: the most the caching allocator held from the device (``max_memory_reserved``,
    what decides an out-of-memory); ``rss``: peak resident set of the process (CPU); ``source``:
    how the figures were obtained, a catalog message (``src_device_memory``: "torch.cuda.
    max_memory_allocated / max_memory_reserved of cuda:0 after ...").
    """

    source: Message
    peak_memory_allocated_gib: float | None = None
    peak_memory_reserved_gib: float | None = None
    peak_rss_gib: float | None = None

    def fields(self) -> dict[str, Any]:
        """The result.json / metrics.jsonl fields: the three peaks and ``memory_source`` (the
        message as JSON data)."""
        out = {k: v for k, v in asdict(self).items() if k != "source"}
        out["memory_source"] = self.source.model_dump()
        return out


def device_peak_memory(device_module: Any, kind: str, index: int) -> PeakMemory:
    """Peak allocated / reserved bytes of ``torch.cuda`` or ``torch.npu`` (``device_module``,
    whose memory functions share one API) for device ``kind:index``, in GiB."""
    return PeakMemory(
        source=say("src_device_memory", kind=kind, device=f"{kind}:{index}"),
        peak_memory_allocated_gib=device_module.max_memory_allocated(index) / GIB,
        peak_memory_reserved_gib=device_module.max_memory_reserved(index) / GIB,
    )


class Backend:
    """What a device means to a worker. Subclasses: CpuBackend, CudaBackend, NpuBackend."""

    name = "base"

    def device(self) -> torch.device:
        raise NotImplementedError

    def synchronize(self) -> None:
        """Block until queued device work is done, so wall-clock step times are honest."""

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory window: called after the warm-up steps, so that
        :meth:`peak_memory` covers the measured steps only."""

    def peak_memory(self) -> PeakMemory:
        """Peak memory since :meth:`reset_peak_memory` (or since start, as ``source`` says)."""
        return PeakMemory(source=say("src_not_measured", backend=self.name))

    def device_name(self) -> str:
        """The device's own name (e.g. ``NVIDIA H100 80GB HBM3``), for the published-peak table."""
        return self.name

    def compile(self, module: torch.nn.Module, cfg: CompileConfig) -> tuple[Any, str]:
        """The ``autofuse`` switch: return (compiled module, what was done)."""
        options = dict(cfg.options) or None
        compiled = torch.compile(
            module,
            backend=cfg.backend,
            mode=cfg.mode,
            fullgraph=cfg.fullgraph,
            dynamic=cfg.dynamic,
            options=options,
        )
        return compiled, f"torch.compile(backend={cfg.backend!r}, mode={cfg.mode!r})"

    def graph_mode(self, fn: Callable, options: dict[str, Any]) -> tuple[Callable, str]:
        """The ``npugraph_ex`` switch (inference decode step). Raises RunSkipped if unsupported."""
        raise RunSkipped(f"npugraph_ex (graph mode) is not available on backend {self.name}")

    def add_rms_norm(self) -> tuple[Callable | None, str]:
        """A device-native fused (residual add + RMSNorm) op, or None to use afbench's own."""
        return None, ""

    def rms_norm(self) -> tuple[Callable | None, str]:
        """A device-native fused RMSNorm op, or None to use afbench's own."""
        return None, ""

    def profiler_activities(self) -> list[Any]:
        return [torch.profiler.ProfilerActivity.CPU]

    def npu_profiler_settings(self, cfg: NpuProfilerConfig) -> Any:  # pragma: no cover - NPU only
        raise NotImplementedError

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__}

    def describe(self) -> str:
        return self.name
