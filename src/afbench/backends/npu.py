"""Ascend NPU backend (torch_npu, torchair). Written against the real APIs of REFERENCE §3-§4;
it cannot run on this project's CPU CI (no NPU there), so tests stop at the device calls."""

from __future__ import annotations

import importlib
from typing import Any, Callable

import torch

from afbench.backends.base import Backend
from afbench.config.models import CompileConfig, NpuProfilerConfig
from afbench.errors import RunSkipped


class NpuBackend(Backend):
    name = "npu"

    def __init__(self) -> None:
        try:
            import torch_npu  # noqa: F401  (registers torch.npu)
        except ImportError as exc:
            raise RunSkipped(f"backend npu needs torch_npu (pip install afbench[npu]): {exc}") from exc
        self.torch_npu = importlib.import_module("torch_npu")

    def device(self) -> torch.device:
        # ASCEND_RT_VISIBLE_DEVICES (set by the launcher from parallel.devices) makes this npu:0.
        torch.npu.set_device(0)
        return torch.device("npu", 0)

    def synchronize(self) -> None:
        torch.npu.synchronize()

    def reset_peak_memory(self) -> None:
        torch.npu.reset_peak_memory_stats()

    def memory_stats(self) -> dict[str, float]:
        return {
            "peak_allocated_gib": torch.npu.max_memory_allocated() / 2**30,
            "peak_reserved_gib": torch.npu.max_memory_reserved() / 2**30,
        }

    def compile(self, module: torch.nn.Module, cfg: CompileConfig) -> tuple[Any, str]:
        """AutoFuse: inductor with ``npu_backend="ascendc"``; needs torchair's inductor_npu_ext."""
        try:
            importlib.import_module("inductor_npu_ext")
        except ImportError as exc:
            raise RunSkipped(
                "autofuse on npu needs the inductor_npu_ext package from torchair: " + str(exc)
            ) from exc
        options = {"npu_backend": "ascendc", **cfg.options}
        compiled = torch.compile(module, backend="inductor", mode=cfg.mode,
                                 fullgraph=cfg.fullgraph, dynamic=cfg.dynamic, options=options)
        return compiled, "torch.compile(backend='inductor', options={'npu_backend': 'ascendc'}) (AutoFuse)"

    def graph_mode(self, fn: Callable, options: dict[str, Any]) -> tuple[Callable, str]:
        compiled = torch.compile(fn, backend="npugraph_ex", fullgraph=True, dynamic=False,
                                 options=dict(options) or None)
        return compiled, f"torch.compile(backend='npugraph_ex', fullgraph=True, options={options})"

    def add_rms_norm(self) -> tuple[Callable | None, str]:
        return self.torch_npu.npu_add_rms_norm, "torch_npu.npu_add_rms_norm"

    def rms_norm(self) -> tuple[Callable | None, str]:
        return self.torch_npu.npu_rms_norm, "torch_npu.npu_rms_norm"

    def profiler_activities(self) -> list[Any]:
        prof = self.torch_npu.profiler
        return [prof.ProfilerActivity.CPU, prof.ProfilerActivity.NPU]

    def npu_profiler_settings(self, cfg: NpuProfilerConfig) -> Any:
        prof = self.torch_npu.profiler
        return prof._ExperimentalConfig(
            profiler_level=getattr(prof.ProfilerLevel, cfg.profiler_level),
            aic_metrics=getattr(prof.AiCMetrics, cfg.aic_metrics),
            export_type=getattr(prof.ExportType, cfg.export_type),
        )

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__, "torch_npu": getattr(self.torch_npu, "__version__", "?")}

    def describe(self) -> str:
        return f"npu ({torch.npu.get_device_name(0)})"
