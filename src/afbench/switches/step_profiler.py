"""The profiler behind the ``profiler`` switch (:mod:`afbench.switches.profiler`):
torch.profiler (cpu, cuda) or torch_npu.profiler (npu) whose active steps are exactly
``optimization.profiler_window``.

Outputs under ``<run_dir>/profile/``:
- torch.profiler: ``trace.json`` (chrome trace), ``kernel_table.csv`` (op_type, count,
  total_us, ratio_pct over the active steps; self time) and ``step_trace_time.csv`` in
  torch_npu's column layout (docs/reference.md §4) so that one set of status rules serves every device.
- torch_npu.profiler: its own ``*_ascend_pt/ASCEND_PROFILER_OUTPUT/`` CSVs (NPU only; not run
  on this project's CPU CI).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from afbench.backends.base import Backend
from afbench.config.models import NpuProfilerConfig, ProfilerWindow

STEP_TRACE_COLUMNS = [
    "Device_id",
    "Step",
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
    "Communication(Not Overlapped and Exclude Receive)",
    "Preparing",
]
_COMM = re.compile(
    r"nccl|gloo|hccl|c10d|all_?reduce|all_?gather|reduce_?scatter|broadcast|send|recv",
    re.IGNORECASE,
)
# torch.profiler names step spans "ProfilerStep#N" in traces and "ProfilerStep*" in events().
_STEP = re.compile(r"^ProfilerStep[#*]")


def schedule_args(window: ProfilerWindow) -> dict[str, int]:
    """torch.profiler.schedule arguments whose active steps are window.first..last (1-based).

    prof.step() is called after every training step, so training step k runs while the
    profiler's step counter is k-1: wait + warmup = first_step - 1.
    """
    active = window.last_step - window.first_step + 1
    return {
        "wait": window.first_step - 1 - window.warmup_steps,
        "warmup": window.warmup_steps,
        "active": active,
        "repeat": 1,
    }


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def _intersection(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    total, i, j = 0.0, 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        total += max(0.0, b - a)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


def _on_device(ev: Any) -> bool:
    return str(getattr(ev, "device_type", "")).endswith(("CUDA", "PrivateUse1"))


def step_trace_from_events(
    events: Any, device_id: str, first_step_id: int, device_kernels: bool = False
) -> pd.DataFrame:
    """Per-step phase table (µs) from torch.profiler FunctionEvents, in torch_npu's layout.

    Step spans are numbered in time order from ``first_step_id`` (the profiler's 0-based step
    counter at the first active step: training step k has id k-1, as in torch_npu's
    step_trace_time.csv, docs/reference.md §1).

    Stage = ProfilerStep#N span. Computing = time covered by top-level operators (on cuda:
    device kernels) inside the step; communication = collective ops (c10d/gloo/nccl/hccl);
    Overlapped = their intersection; Free = Stage minus the union of both. Bubble and
    Preparing are 0 (no pipeline stages here).
    """
    # On CUDA every step is also a gpu_user_annotation event of the same name on the device:
    # only the host span is the step, or each step would be counted twice.
    spans = sorted(
        (ev.time_range.start, ev.time_range.end)
        for ev in events
        if _STEP.match(ev.name) and not _on_device(ev)
    )
    rows = []
    for step, (s0, s1) in enumerate(spans, start=first_step_id):
        comp, comm = [], []
        for ev in events:
            if _STEP.match(ev.name):
                continue
            if device_kernels and not _on_device(ev) and not _COMM.search(ev.name):
                continue
            if not device_kernels:
                parent = getattr(ev, "cpu_parent", None)
                if parent is not None and not _STEP.match(parent.name):
                    continue
            a, b = max(ev.time_range.start, s0), min(ev.time_range.end, s1)
            if b <= a:
                continue
            (comm if _COMM.search(ev.name) else comp).append((a, b))
        comp_u, comm_u = _union(comp), _union(comm)
        overlapped = _intersection(comp_u, comm_u)
        busy = _length(_union(comp_u + comm_u))
        stage = s1 - s0
        comm_total = _length(comm_u)
        rows.append(
            {
                "Device_id": device_id,
                "Step": step,
                "Computing": _length(comp_u),
                "Communication(Not Overlapped)": comm_total - overlapped,
                "Overlapped": overlapped,
                "Communication": comm_total,
                "Free": max(0.0, stage - busy),
                "Stage": stage,
                "Bubble": 0.0,
                "Communication(Not Overlapped and Exclude Receive)": comm_total - overlapped,
                "Preparing": 0.0,
            }
        )
    return pd.DataFrame(rows, columns=STEP_TRACE_COLUMNS)


def kernel_table_from_profile(prof: Any, device_kernels: bool = False) -> pd.DataFrame:
    """Op table over the active steps: op_type, count, total_us (self time), ratio_pct."""
    rows = []
    for evt in prof.key_averages():
        if _STEP.match(evt.key):
            continue
        total = evt.self_device_time_total if device_kernels else evt.self_cpu_time_total
        if total <= 0:
            continue
        rows.append({"op_type": evt.key, "count": int(evt.count), "total_us": float(total)})
    df = pd.DataFrame(rows, columns=["op_type", "count", "total_us"])
    df = df.sort_values("total_us", ascending=False, ignore_index=True)
    df["ratio_pct"] = 100.0 * df["total_us"] / df["total_us"].sum() if len(df) else []
    return df


class StepProfiler:
    """Context manager; call :meth:`step` after every training/decode step."""

    def __init__(
        self,
        backend: Backend,
        window: ProfilerWindow,
        out_dir: Path,
        npu: NpuProfilerConfig | None = None,
    ) -> None:
        self.backend = backend
        self.window = window
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.npu = npu or NpuProfilerConfig()
        self.prof: Any = None

    def __enter__(self) -> "StepProfiler":
        args = schedule_args(self.window)
        if self.backend.name == "npu":  # pragma: no cover - needs an Ascend NPU
            import torch_npu  # torch_npu: npu only

            self.prof = torch_npu.profiler.profile(
                activities=self.backend.profiler_activities(),
                schedule=torch_npu.profiler.schedule(skip_first=0, **args),
                on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(str(self.out_dir)),
                record_shapes=self.window.record_shapes,
                with_stack=self.window.with_stack,
                experimental_config=self.backend.npu_profiler_settings(self.npu),
            )
        else:
            self.prof = torch.profiler.profile(
                activities=self.backend.profiler_activities(),
                schedule=torch.profiler.schedule(**args),
                on_trace_ready=self._export,
                record_shapes=self.window.record_shapes,
                with_stack=self.window.with_stack,
            )
        self.prof.__enter__()
        return self

    def step(self) -> None:
        self.prof.step()

    def __exit__(self, *exc: Any) -> None:
        self.prof.__exit__(*exc)

    def _export(self, prof: Any) -> None:
        device_kernels = self.backend.name == "cuda"
        prof.export_chrome_trace(str(self.out_dir / "trace.json"))
        kernel_table_from_profile(prof, device_kernels).to_csv(
            self.out_dir / "kernel_table.csv", index=False
        )
        device_id = "cpu" if self.backend.name == "cpu" else f"{self.backend.name}:0"
        first_id = self.window.first_step - 1
        step_trace_from_events(prof.events(), device_id, first_id, device_kernels).to_csv(
            self.out_dir / "step_trace_time.csv", index=False
        )


class NoProfiler:
    """Stands in for StepProfiler when the switch is off: same interface, does nothing."""

    def __enter__(self) -> "NoProfiler":
        return self

    def step(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        pass
