"""``optimization.add_rmsnorm``: the residual add after attention and the following RMSNorm as
one fused op (npu: ``torch_npu.npu_add_rms_norm``; elsewhere ``afbench::add_rms_norm``);
the rewrite is :func:`afbench.switches.converters.apply_add_rmsnorm`."""

from __future__ import annotations

from afbench.switches import SwitchReport
from afbench.switches.base import BuiltinOnlySwitch, SwitchContext


class AddRmsNorm(BuiltinOnlySwitch):
    name = "add_rmsnorm"
    stage = "model"

    def apply(self, ctx: SwitchContext) -> SwitchReport:
        from afbench.switches.converters import apply_add_rmsnorm  # torch: worker only

        return apply_add_rmsnorm(ctx.model, ctx.backend)
