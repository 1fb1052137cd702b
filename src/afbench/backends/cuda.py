"""CUDA backend: inductor (Triton) for autofuse, CUDA graphs for graph mode, torch.profiler.

Written against the public torch.cuda API; not run on this project's CPU CI (no GPU there).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from afbench.backends.base import Backend


class CudaBackend(Backend):
    name = "cuda"

    def device(self) -> torch.device:
        # CUDA_VISIBLE_DEVICES (set by the launcher from parallel.devices) makes this device 0.
        torch.cuda.set_device(0)
        return torch.device("cuda", 0)

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def reset_peak_memory(self) -> None:
        torch.cuda.reset_peak_memory_stats()

    def memory_stats(self) -> dict[str, float]:
        return {
            "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
            "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
        }

    def graph_mode(self, fn: Callable, options: dict[str, Any]) -> tuple[Callable, str]:
        # CUDA analogue of npugraph_ex: capture once, replay (REFERENCE §3).
        compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True, dynamic=False)
        return compiled, "torch.compile(mode='reduce-overhead', fullgraph=True): CUDA graphs"

    def profiler_activities(self) -> list[Any]:
        return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__, "cuda": str(torch.version.cuda),
                "device_name": torch.cuda.get_device_name(0)}

    def describe(self) -> str:
        return f"cuda ({torch.cuda.get_device_name(0)})"
