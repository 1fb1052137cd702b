"""``optimization.profiler``: a profiler whose active steps are exactly
``optimization.profiler_window`` (cpu, cuda: torch.profiler; npu: torch_npu.profiler), written
under ``<run_dir>/profile/`` (:mod:`afbench.switches.step_profiler`); under torchtitan its own
profiler options (``--profiler.*``, torchtitan-npu ``--profiling.*``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from afbench.errors import ConfigError
from afbench.switches import SwitchReport
from afbench.switches.base import SwitchContext, SwitchDefaults, is_on

if TYPE_CHECKING:  # the orchestrator reads switches before pydantic is loaded
    from afbench.config.models import RunConfig
    from afbench.messages import Message


def detail(profiler: str, unit: str, window: Any) -> Message:
    """What the switch recorded it did, the message ``switch_profiler_<unit>`` (English:
    ``CpuBackend profiler, steps 6-10``)."""
    from afbench.messages import say

    return say(
        f"switch_profiler_{unit}", profiler=profiler, first=window.first_step, last=window.last_step
    )


class Profiler(SwitchDefaults):
    name = "profiler"
    stage = "steps"

    def check(self, cfg: RunConfig) -> None:
        """The window inside the run's steps; torchtitan-npu needs one warmup step before it.

        Raises ConfigError naming ``optimization.profiler_window.*``."""
        w = cfg.optimization.profiler_window
        if w.last_step > cfg.scheduler.steps:
            raise ConfigError(
                f"optimization.profiler_window.last_step {w.last_step} is after the last step "
                f"{cfg.scheduler.steps}: raise scheduler.steps (sft) or scheduler.warmup_runs + "
                "measured_runs (infer), or lower the window"
            )
        _check_titan_window(cfg, getattr(cfg.engine, "flavor", None))

    def apply(self, ctx: SwitchContext) -> SwitchReport | None:
        if ctx.rank != 0:  # one profile per run: rank 0's
            return None
        from afbench.switches.step_profiler import StepProfiler  # torch, pandas: worker only

        o = ctx.cfg.optimization
        w = o.profiler_window
        ctx.profiler = StepProfiler(ctx.backend, w, ctx.run_dir / "profile", o.npu_profiler)
        return SwitchReport(self.name, True, detail(type(ctx.backend).__name__, ctx.unit, w))

    def titan_args(self, cfg: RunConfig, flavor: str, run_dir: Path) -> list[str]:
        """The profiler options for ``optimization.profiler_window`` (1-based, inclusive steps).

        torchtitan (``Profiler.Config``): a torch.profiler schedule repeating every
        ``profile_freq`` steps with ``wait = freq - warmup - active``; step ``k`` is profiler
        step ``k - 1``, so ``profile_freq = last``, ``profiler_active = last - first + 1``,
        ``profiler_warmup = warmup_steps`` and ``profiler_repeat = 1`` record exactly
        ``first..last`` once, written to ``<profile>/iteration_<last>/``.

        torchtitan-npu (``ProfilingConfig``, ``torchtitan_npu/tools/profiling.py``): ``active
        = end - start`` (end exclusive), one warmup step, so ``start = first``, ``end = last +
        1`` (window 6..10 -> 6, 11, as the reference). Its warmup is fixed at one step and it
        needs ``start >= 2``.

        Raises:
            ConfigError: see :meth:`check`.
        """
        if not is_on(self, cfg):
            return []
        _check_titan_window(cfg, flavor)
        w = cfg.optimization.profiler_window
        folder = str(Path(run_dir) / "profile")
        if flavor == "torchtitan_npu":
            return [
                "--profiling.enable_profiling",
                "--profiling.profile_step_start",
                str(w.first_step),
                "--profiling.profile_step_end",
                str(w.last_step + 1),
                "--profiling.save_traces_folder",
                folder,
            ]
        return [
            "--profiler.enable_profiling",
            "--profiler.save_traces_folder",
            folder,
            "--profiler.profile_freq",
            str(w.last_step),
            "--profiler.profiler_warmup",
            str(w.warmup_steps),
            "--profiler.profiler_active",
            str(w.last_step - w.first_step + 1),
            "--profiler.profiler_repeat",
            "1",
        ]


def _check_titan_window(cfg: RunConfig, flavor: str | None) -> None:
    w = cfg.optimization.profiler_window
    if flavor == "torchtitan_npu" and w.first_step < 2:
        raise ConfigError(
            "optimization.profiler_window.first_step: torchtitan-npu needs a first step "
            f">= 2 (one warmup step before it), got {w.first_step}"
        )
