"""The switches, in the order they apply: the one place that knows which switches exist.

A switch is a :class:`afbench.switches.base.Switch` in its own module plus one entry in
:data:`SWITCHES`, and nothing else (docs/architecture.md, tests/test_switch_registry.py).
Importing this module hands the names to ``afbench.config`` (the leaf layer, which cannot read
the registry), where ``optimization.<name>`` becomes a bool that defaults to false; the CLI
stores the same names in Hydra's ConfigStore (``afbench.cli.recipes.register``).
Everything else reads this registry: plan-time checks (:func:`check_switches`), the builtin
engine (:func:`ready_switches`, :func:`apply_stage`), the command engine's placeholders
(:func:`switch_names`), the torchtitan command line (:func:`titan_switch_args`), compile costs
and recompile caveats (:func:`compiles`) and the report (:func:`requested_not_reported`).
No torch and no pydantic import here: each switch imports its implementation when it
applies, and the CLI reads the names before any config is validated.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from afbench.config import switch_names as _config_switch_names
from afbench.errors import ConfigError
from afbench.switches import SwitchReport
from afbench.switches.add_rmsnorm import AddRmsNorm
from afbench.switches.autofuse import AutoFuse
from afbench.switches.base import STAGES, Stage, Switch, SwitchContext, is_on
from afbench.switches.npugraph_ex import NpuGraphEx
from afbench.switches.profiler import Profiler
from afbench.switches.rmsnorm import RmsNorm

if TYPE_CHECKING:  # the orchestrator reads switches before pydantic is loaded
    from afbench.config.models import RunConfig

#: Every switch. The builtin engine applies them stage by stage (base.STAGES) and, within a
#: stage, in this order (add_rmsnorm before rmsnorm: rmsnorm leaves the norms add_rmsnorm
#: fused); command placeholders and torchtitan options follow this order.
SWITCHES: tuple[Switch, ...] = (AutoFuse(), NpuGraphEx(), AddRmsNorm(), RmsNorm(), Profiler())

#: How a workload is named in messages.
_WORKLOAD_WORDS = {"sft": "training", "infer": "inference"}


def switch_names() -> tuple[str, ...]:
    """The registered switches' names (``optimization.<name>``), in registry order."""
    return tuple(sw.name for sw in SWITCHES)


# optimization.<name> is a bool of the config for every name this function returns, read at
# each validation (so SWITCHES extended later counts too); a name that cannot be one (not an
# identifier, an optimization setting, twice) fails here, at import, naming the switch
_config_switch_names.check_names(switch_names())
_config_switch_names.accept(switch_names)


def enabled(cfg: RunConfig) -> list[Switch]:
    """The switches ``cfg`` turns on, in registry order."""
    return [sw for sw in SWITCHES if is_on(sw, cfg)]


def check_switches(cfg: RunConfig) -> None:
    """Plan-time checks of every switch ``cfg`` turns on: its workload, then its own
    :meth:`~afbench.switches.base.Switch.check`. No torch import.

    Raises:
        ConfigError: naming ``optimization.<name>`` and the fix.
    """
    for sw in enabled(cfg):
        workload = cfg.scheduler.workload
        if workload not in sw.workloads:
            only = "/".join(_WORKLOAD_WORDS.get(w, w) for w in sorted(sw.workloads))
            use = " or ".join(f"scheduler={w}" for w in sorted(sw.workloads))
            raise ConfigError(
                f"optimization.{sw.name} is {only}-only, not for "
                f"scheduler.workload {workload!r}: use it with {use}"
            )
        sw.check(cfg)


def compiles(cfg: RunConfig) -> bool:
    """Whether a run of ``cfg`` compiles the model (a switch on with ``compiles``)."""
    return any(sw.compiles for sw in enabled(cfg))


def ready_switches(ctx: SwitchContext) -> None:
    """Worker, before the model loads: each enabled switch's ``ready`` (RunSkipped early)."""
    for sw in enabled(ctx.cfg):
        sw.ready(ctx)


def apply_stage(stage: Stage, ctx: SwitchContext) -> list[SwitchReport]:
    """Apply the enabled switches of ``stage`` to ``ctx`` in registry order; their reports."""
    assert stage in STAGES, stage
    reports = []
    for sw in enabled(ctx.cfg):
        if sw.stage == stage:
            report = sw.apply(ctx)
            if report is not None:
                reports.append(report)
    return reports


def titan_switch_args(cfg: RunConfig, flavor: str, run_dir: Path) -> list[str]:
    """Every switch's torchtitan options, in registry order (RunSkipped / ConfigError as the
    switches raise them)."""
    return [arg for sw in SWITCHES for arg in sw.titan_args(cfg, flavor, run_dir)]


def titan_reports(cfg: RunConfig, flavor: str, run_dir: Path) -> list[SwitchReport]:
    """What each enabled switch did in a torchtitan run: the options it gave the flavor
    (``<flavor> --compile.enable --compile.backend inductor``, as written: code)."""
    from afbench.messages import as_written  # the torchtitan worker, not the orchestrator

    return [
        SwitchReport(
            sw.name, True, as_written(" ".join([flavor, *sw.titan_args(cfg, flavor, run_dir)]))
        )
        for sw in enabled(cfg)
    ]


def requested_not_reported(cfg: RunConfig, reported: list[str]) -> list[str]:
    """The switches ``cfg`` turns on that the run's engine reported nothing for (the command
    engine cannot see inside the user's program), in registry order."""
    return [sw.name for sw in enabled(cfg) if sw.name not in reported]
