"""``optimization.npugraph_ex``: graph mode for the inference decode step (npu:
``torch.compile(backend="npugraph_ex")``; cuda: CUDA graphs; cpu: not available, the run is
SKIPPED), per backend in :meth:`afbench.backends.base.Backend.graph_mode`. Inference only:
graph capture has no backward."""

from __future__ import annotations

from afbench.switches import SwitchReport
from afbench.switches.base import BuiltinOnlySwitch, SwitchContext


class NpuGraphEx(BuiltinOnlySwitch):
    name = "npugraph_ex"
    workloads = frozenset({"infer"})
    compiles = True
    stage = "decode"

    def ready(self, ctx: SwitchContext) -> None:
        # fail fast, before loading anything, where graph mode does not exist
        ctx.backend.graph_mode(lambda **kw: None, ctx.cfg.optimization.npugraph_ex_options)

    def apply(self, ctx: SwitchContext) -> SwitchReport:
        ctx.graph_step, detail = ctx.backend.graph_mode(  # RunSkipped on cpu
            ctx.forward, ctx.cfg.optimization.npugraph_ex_options
        )
        from afbench.messages import as_written

        return SwitchReport(self.name, True, as_written(detail))  # the call, as code
