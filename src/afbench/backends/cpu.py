"""CPU backend: torch.compile with inductor's C++ codegen, torch.profiler, peak RSS."""

from __future__ import annotations

import platform
import resource

import torch

from afbench.backends.base import Backend


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, num_threads: int | None = None) -> None:
        if num_threads:
            torch.set_num_threads(num_threads)
        # Name each inductor C++ kernel in the profiler (cpp_fused_*), not only the whole graph.
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True

    def device(self) -> torch.device:
        return torch.device("cpu")

    def memory_stats(self) -> dict[str, float]:
        # ru_maxrss is KiB on Linux: the peak resident set of this process since it started.
        return {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}

    def describe(self) -> str:
        return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
