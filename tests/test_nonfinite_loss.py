"""A NaN or infinite loss fails the run with ``non-finite loss (nan) at step N`` on every
engine (issue 10 item 3): the builtin SFT loop here, on a real CPU run of the shipped tiny
model; the command engine in test_command_engine.py and test_faults.py (the experiment's
verdict is RUN_FAILED there); torchtitan in test_torchtitan_engine.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from afbench.analysis.steplog import non_finite_loss
from afbench.backends import cpu as cpu_backend
from afbench.errors import RunFailed
from test_memory import make_spec


def test_the_wording_names_the_value_and_the_step():
    assert non_finite_loss(float("nan"), 7) == "non-finite loss (nan) at step 7"
    assert non_finite_loss(float("-inf"), 2) == "non-finite loss (-inf) at step 2"
    assert non_finite_loss(2.5, 7) is None


def test_builtin_sft_run_fails_at_the_first_non_finite_loss(tmp_path):
    from afbench.engines.sft import run_sft  # torch + transformers: paid by this test only

    # an absurd learning rate: step 1 trains, its update overflows every weight
    spec = make_spec(
        tmp_path,
        {
            "workload": "sft",
            "steps": 4,
            "seq_len": 32,
            "lr": 1e30,
            "global_batch_size": 2,
            "micro_batch_size": 2,
            "measure": {"first_step": 2, "last_step": 3},
        },
    )
    with pytest.raises(
        RunFailed, match=r"^non-finite loss \((nan|inf|-inf)\) at step (\d)$"
    ) as err:
        run_sft(spec, cpu_backend.CpuBackend(), Path(spec.run_dir))
    steps = [
        json.loads(line)
        for line in (Path(spec.run_dir) / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "step"
    ]
    assert math.isfinite(steps[0]["loss"])
    # the failing step is the first non-finite one, and it was recorded before failing
    assert not math.isfinite(steps[-1]["loss"])
    assert str(err.value).endswith(f"at step {steps[-1]['step']}")
