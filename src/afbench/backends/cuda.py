"""CUDA backend: inductor (Triton) for autofuse, CUDA graphs for graph mode, torch.profiler.

Written against the public torch.cuda API; not run on this project's CPU CI (no GPU there).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from afbench.backends.base import Backend, PeakMemory, device_peak_memory


def _local_rank() -> int:
    # under torchrun each rank takes its own device among the visible ones
    return int(os.environ.get("LOCAL_RANK", "0"))


class CudaBackend(Backend):
    name = "cuda"

    def device(self) -> torch.device:
        # CUDA_VISIBLE_DEVICES (set by the launcher, afbench.launch.devices) makes the run's
        # devices cuda:0..world_size-1; rank r of a torchrun job takes cuda:r.
        index = _local_rank()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def reset_peak_memory(self) -> None:
        torch.cuda.reset_peak_memory_stats(_local_rank())

    def peak_memory(self) -> PeakMemory:
        return device_peak_memory(torch.cuda, "cuda", _local_rank())

    def device_name(self) -> str:
        return torch.cuda.get_device_name(_local_rank())

    def graph_mode(self, fn: Callable, options: dict[str, Any]) -> tuple[Callable, str]:
        # CUDA analogue of npugraph_ex: capture once, replay (docs/reference.md §3).
        compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True, dynamic=False)
        return compiled, "torch.compile(mode='reduce-overhead', fullgraph=True): CUDA graphs"

    def profiler_activities(self) -> list[Any]:
        return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    def versions(self) -> dict[str, str]:
        return {
            "torch": torch.__version__,
            "cuda": str(torch.version.cuda),
            "device_name": self.device_name(),
        }

    def describe(self) -> str:
        return f"cuda ({self.device_name()})"
