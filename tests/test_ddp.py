"""Data parallel SFT with the builtin engine: torchrun, two processes, gloo on CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from afbench.config import validate_config
from afbench.launch.local import worker_argv
from afbench.plan import make_plan

pytestmark = pytest.mark.e2e


def test_world_size_two_runs_under_torchrun(compose_cfg, tmp_path):
    conf = validate_config(compose_cfg("parallel.world_size=2", "scheduler.micro_batch_size=2"))
    spec = make_plan(conf, tmp_path).runs[0]
    argv = worker_argv(spec, "py", tmp_path)
    assert argv[:5] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    assert argv[-3:-1] == ["-m", "afbench.worker"]


def test_two_ranks_train_and_agree(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "afbench",
            "parallel.world_size=2",
            "scheduler.micro_batch_size=2",
            "scheduler.steps=3",
            "scheduler.measure.first_step=2",
            "scheduler.measure.last_step=3",
            "scheduler.seq_len=64",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = next(tmp_path.glob("outputs/*/*/runs/baseline-run-r1"))
    result = json.loads((run / "result.json").read_text())
    assert result["world_size"] == 2
    assert result["ranks"]["params_identical"] is True
    assert len(set(result["ranks"]["last_step_local_losses"])) == 2  # different shards
    # each rank measures its own process's peak; the result holds both and their max
    per_rank = result["memory"]["per_rank"]
    assert [r["rank"] for r in per_rank] == [0, 1] and all(r["peak_rss_gib"] > 0 for r in per_rank)
    assert result["memory"]["peak_rss_gib"] == max(r["peak_rss_gib"] for r in per_rank)
    rank1 = [json.loads(line) for line in (run / "metrics.rank1.jsonl").read_text().splitlines()]
    assert [r["peak_rss_gib"] for r in rank1 if r["kind"] == "memory"] == [
        per_rank[1]["peak_rss_gib"]
    ]
    # rank 0 owns the step log (each step exactly once); rank 1 logs on its own
    log = (run / "stdout.log").read_text()
    assert log.count("step:  2 ") == 1
    assert "step:  2 " in (run / "rank1.log").read_text()
    report = (run.parents[1] / "report.md").read_text()
    assert "world size 2: ranks agreed" in report
