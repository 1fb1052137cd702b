"""Backend interface: what a device means to a worker (instances come from
:func:`afbench.backends.resolve.get_backend`)."""

from __future__ import annotations

from typing import Any, Callable

import torch

from afbench.config.models import CompileConfig, NpuProfilerConfig
from afbench.errors import RunSkipped


class Backend:
    """What a device means to a worker. Subclasses: CpuBackend, CudaBackend, NpuBackend."""

    name = "base"

    def device(self) -> torch.device:
        raise NotImplementedError

    def synchronize(self) -> None:
        """Block until queued device work is done, so wall-clock step times are honest."""

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory window (no-op where the device has none)."""

    def memory_stats(self) -> dict[str, float]:
        """Peak memory in GiB since the last reset: keys depend on the device."""
        return {}

    def compile(self, module: torch.nn.Module, cfg: CompileConfig) -> tuple[Any, str]:
        """The ``autofuse`` switch: return (compiled module, what was done)."""
        options = dict(cfg.options) or None
        compiled = torch.compile(module, backend=cfg.backend, mode=cfg.mode,
                                 fullgraph=cfg.fullgraph, dynamic=cfg.dynamic, options=options)
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
