"""``optimization.rmsnorm``: every RMSNorm module as one fused op (npu:
``torch_npu.npu_rms_norm``; elsewhere ``afbench::rms_norm``), except the post-attention norms
that ``add_rmsnorm`` already fused; the rewrite is
:func:`afbench.switches.converters.apply_rmsnorm`."""

from __future__ import annotations

from afbench.switches import SwitchReport
from afbench.switches.base import BuiltinOnlySwitch, SwitchContext


class RmsNorm(BuiltinOnlySwitch):
    name = "rmsnorm"
    stage = "model"

    def apply(self, ctx: SwitchContext) -> SwitchReport:
        from afbench.switches.converters import apply_rmsnorm  # torch: worker only

        return apply_rmsnorm(
            ctx.model, ctx.backend, skip_post_attention=ctx.cfg.optimization.add_rmsnorm
        )
