"""``optimization.autofuse``: ``torch.compile`` of the forward (npu: inductor with
``npu_backend="ascendc"``, AutoFuse; cuda: inductor/Triton; cpu: inductor/C++), per backend in
:meth:`afbench.backends.base.Backend.compile`; under torchtitan ``--compile.enable``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from afbench.switches import SwitchReport
from afbench.switches.base import SwitchContext, SwitchDefaults, is_on

if TYPE_CHECKING:  # the orchestrator reads switches before pydantic is loaded
    from afbench.config.models import RunConfig


class AutoFuse(SwitchDefaults):
    name = "autofuse"
    compiles = True
    stage = "forward"

    def apply(self, ctx: SwitchContext) -> SwitchReport:
        ctx.forward, detail = ctx.backend.compile(ctx.forward, ctx.cfg.optimization.compile)
        from afbench.messages import as_written

        return SwitchReport(self.name, True, as_written(detail))  # the call, as code

    def titan_args(self, cfg: RunConfig, flavor: str, run_dir: Path) -> list[str]:
        # On NPU the AutoFuse codegen is torchtitan-npu's business (torch_npu >= 2.14 ships
        # it; older ones import inductor_npu_ext); afbench only turns compilation on.
        if is_on(self, cfg):
            return ["--compile.enable", "--compile.backend", cfg.optimization.compile.backend]
        return ["--compile.no-enable"]
