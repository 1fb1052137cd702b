"""What a switch is: the :class:`Switch` protocol, the :class:`SwitchContext` a switch applies
itself to, and :class:`BuiltinOnlySwitch`'s defaults.

Imports neither torch nor a backend: the orchestrator reads switches at plan time (checks,
command placeholders, the report) without paying for torch. A switch's implementation
(converters, profiler, backend calls) is imported inside its :meth:`Switch.apply`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

from afbench.errors import RunSkipped
from afbench.switches import SwitchReport

if TYPE_CHECKING:  # the orchestrator reads switches before pydantic is loaded
    from afbench.config.models import RunConfig

#: Where in the builtin engine a switch applies itself, in this order:
#: ``model``: rewrite the loaded model (before DDP wraps it); ``forward``: wrap the forward
#: (after DDP: torch.compile); ``decode``: the inference decode step (graph mode); ``steps``:
#: around the step loop (the profiler).
Stage = Literal["model", "forward", "decode", "steps"]
STAGES: tuple[Stage, ...] = ("model", "forward", "decode", "steps")


@dataclass
class SwitchContext:
    """What a switch applies itself to in a builtin-engine worker; switches set the fields
    of their stage.

    Attributes:
        cfg: the run's config; backend: the worker's :class:`afbench.backends.base.Backend`;
        run_dir: the run directory; rank: this process's rank (the profiler records rank 0);
        unit: what one logged step is (``steps`` for SFT, ``runs`` for inference);
        model: the loaded model (stage ``model`` rewrites it in place); forward: what the
        loop calls (stage ``forward`` may replace it); graph_step: the decode step in graph
        mode (stage ``decode``), or None; profiler: a context manager with ``step()``
        (stage ``steps``), or None.
    """

    cfg: RunConfig
    backend: Any
    run_dir: Path | None = None
    rank: int = 0
    unit: str = "steps"
    model: Any = None
    forward: Any = None
    graph_step: Any = None
    profiler: Any = None


@runtime_checkable
class Switch(Protocol):
    """One optimization switch: ``optimization.<name>`` (a bool) turns it on.

    Attributes:
        name: the key under ``optimization`` and the name in reports and command placeholders.
        workloads: the ``scheduler.workload`` values it applies to (``sft``, ``infer``).
        compiles: True when it compiles the model (compile cost and recompile caveats apply).
        stage: where the builtin engine applies it (:data:`STAGES`).
    """

    name: str
    workloads: frozenset[str]
    compiles: bool
    stage: Stage

    def check(self, cfg: RunConfig) -> None:
        """Plan-time checks of a run with the switch on, beyond the workload (which the
        registry checks); no torch import. Raises ConfigError naming the key and the fix."""

    def ready(self, ctx: SwitchContext) -> None:
        """In the worker, before the model loads: raise RunSkipped where ``ctx.backend``
        cannot honour the switch, so that nothing is loaded for a run that will be skipped."""

    def apply(self, ctx: SwitchContext) -> SwitchReport | None:
        """Apply the switch at its stage (it is on); returns what it did, or None when this
        process has nothing to do (the profiler on ranks > 0). Raises RunSkipped where the
        backend cannot honour it, ConfigError where the model has nothing to rewrite."""

    def titan_args(self, cfg: RunConfig, flavor: str, run_dir: Path) -> list[str]:
        """torchtitan options for this switch (called on or off: an off switch may still
        need a flag, e.g. ``--compile.no-enable``); ``flavor`` is ``torchtitan`` or
        ``torchtitan_npu``. Raises RunSkipped when torchtitan cannot honour it from its
        command line, ConfigError for a setting the flavor rejects."""


class SwitchDefaults:
    """Defaults of a switch: every workload, compiles nothing, no plan-time checks beyond the
    workload, nothing to prepare before the model loads."""

    workloads: ClassVar[frozenset[str]] = frozenset({"sft", "infer"})
    compiles: ClassVar[bool] = False
    name: str

    def check(self, cfg: RunConfig) -> None:
        return None

    def ready(self, ctx: SwitchContext) -> None:
        return None


class BuiltinOnlySwitch(SwitchDefaults):
    """A switch that afbench's builtin engine applies and torchtitan cannot take from its
    command line (a model rewrite): RunSkipped under torchtitan when on."""

    def titan_args(self, cfg: RunConfig, flavor: str, run_dir: Path) -> list[str]:
        if is_on(self, cfg):
            raise RunSkipped(
                f"optimization.{self.name} is applied by afbench's builtin engine; torchtitan "
                "takes model rewrites from its config function (model converters such as "
                "npu_rms_norm): name a config that has them (engine.config) instead"
            )
        return []


def is_on(switch: Any, cfg: RunConfig) -> bool:
    """Whether ``optimization.<switch.name>`` is true in ``cfg``."""
    return bool(getattr(cfg.optimization, switch.name))
