"""The builtin engine's per-step dynamo graph count sees a real recompile (issue 10, item 4)."""

from __future__ import annotations

import torch

from afbench.analysis.recompiles import recompile_in_records
from afbench.engines.sft import dynamo_unique_graphs


def test_shape_change_in_step_8_is_a_recompile_after_step_7_in_the_records():
    torch._dynamo.reset()
    # backend="eager": dynamo traces and guards as under inductor, without compiling kernels
    fn = torch.compile(lambda x: x * 2 + 1, backend="eager", dynamic=False)
    records = []
    for step in range(1, 11):
        fn(torch.ones(4 if step < 8 else 5))
        records.append({"step": step, "dynamo_unique_graphs": dynamo_unique_graphs()})
    rec = recompile_in_records(records, 6, 10)
    assert rec is not None and rec.after_step == 7
