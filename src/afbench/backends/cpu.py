"""CPU backend: torch.compile with inductor's C++ codegen, torch.profiler, peak RSS."""

from __future__ import annotations

import platform
import re
import resource
import sys
from pathlib import Path

import torch

from afbench.backends.base import GIB, Backend, PeakMemory
from afbench.messages import say

#: Linux: writing "5" to clear_refs resets the process's peak RSS (VmHWM) to its current RSS
#: (proc(5), /proc/pid/clear_refs, Linux >= 4.0); VmHWM is read back from status. (getrusage's
#: ru_maxrss of the process follows the same counter on Linux, so it too is reset.)
CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")
VM_HWM = re.compile(r"^VmHWM:\s*(\d+)\s*kB", re.M)
# torch keeps no allocator statistics for CPU tensors (torch.cpu has no memory_stats, checked on torch 2.13),
# so the process's resident set is the only peak there is.
# The catalog keys (labels.yaml) of the two ways the peak RSS is read.
HWM_SOURCE = "src_vmhwm"  # VmHWM after a clear_refs reset: the window's peak
MAXRSS_SOURCE = "src_maxrss"  # ru_maxrss: since the process started, not resettable


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, num_threads: int | None = None) -> None:
        self._hwm_reset = False  # True once clear_refs reset the peak RSS of this process
        if num_threads:
            torch.set_num_threads(num_threads)
        # Name each inductor C++ kernel in the profiler (cpp_fused_*), not only the whole graph.
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True

    def device(self) -> torch.device:
        return torch.device("cpu")

    def reset_peak_memory(self) -> None:
        try:
            CLEAR_REFS.write_text("5")
            self._hwm_reset = VM_HWM.search(STATUS.read_text()) is not None
        except OSError:  # not Linux, or /proc not writable (some sandboxes)
            self._hwm_reset = False

    def peak_memory(self) -> PeakMemory:
        if self._hwm_reset:
            match = VM_HWM.search(STATUS.read_text())
            if match:
                return PeakMemory(say(HWM_SOURCE), peak_rss_gib=int(match.group(1)) * 1024 / GIB)
        # ru_maxrss is KiB on Linux, bytes on macOS
        unit = 1 if sys.platform == "darwin" else 1024
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit / GIB
        return PeakMemory(say(MAXRSS_SOURCE), peak_rss_gib=rss)

    def device_name(self) -> str:
        return platform.processor() or platform.machine()

    def describe(self) -> str:
        return f"cpu ({self.device_name()}, {torch.get_num_threads()} threads)"
