"""End to end: the inference recipes on this CPU (shortened)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from afbench.store import read_summary

pytestmark = pytest.mark.e2e
# experiment.rerun_contended=0: these tests pin run directories (reruns of contended runs:
# tests/test_contention_runs.py)
SHORT = [
    "scheduler.max_new_tokens=8",
    "scheduler.num_prompts=2",
    "scheduler.measured_runs=2",
    "experiment.rerun_contended=0",
]


def run(cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "afbench", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def out_dir(cwd):
    (d,) = [p.parent for p in cwd.glob("outputs/*/*/plan.json")]
    return d


def test_infer_rmsnorm_compare_reports_speed_parity_and_fusion(tmp_path):
    proc = run(tmp_path, "experiment=infer_rmsnorm_compare", *SHORT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = out_dir(tmp_path)
    s = read_summary(out / "summary.json")
    c = s.comparisons[0]
    assert c.variant.name == "add_rmsnorm" and c.workload == "infer"
    # one round: afbench's step-level verdict, the reference's quick verdict beside it
    assert c.verdict in ("ADD_RMSNORM_FASTER", "ADD_RMSNORM_SLOWER", "NO_GAIN", "INCONCLUSIVE")
    assert c.speed.reference_verdict in ("ADD_RMSNORM_FASTER", "NO_GAIN")
    for side in (c.baseline, c.variant):
        m = side.metrics
        assert m.tokens_per_s > 0 and m.ttft_ms > 0 and m.tpot_ms_mean > 0
        assert m.tpot_ms_p50 <= m.tpot_ms_p90
        assert side.sanity in ("ok", "warning")
    assert c.parity.status == "MATCH", c.parity
    assert c.parity.max_abs_logit_diff <= c.parity.logit_tolerance
    ev = s.fused_evidence["add_rmsnorm"]
    assert ev.fusion_evident
    assert ev.fused.baseline == 0 and ev.fused.variant > 0
    for piece in ("pow", "mean", "rsqrt"):
        assert ev.pieces[piece].delta < 0
    report = (out / "report.md").read_text()
    for text in (
        "TTFT (ms)",
        "TPOT p90 (ms)",
        "text sanity",
        "afbench::add_rms_norm",
        "the RMSNorm pieces drop and the fused op appears",
    ):
        assert text in report
    gens = (out / "runs" / "baseline-infer-r1" / "generations.jsonl").read_text().splitlines()
    assert len(gens) == 2 and all(json.loads(g)["text"] for g in gens)


def test_graph_mode_is_skipped_on_cpu_and_the_rest_reports(tmp_path):
    proc = run(tmp_path, "experiment=infer_graph_compare", "~experiment.variants.autofuse", *SHORT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = out_dir(tmp_path)
    status = json.loads((out / "runs" / "npugraph_ex-infer-r1" / "status.json").read_text())
    assert status["status"] == "SKIPPED" and status["exit_code"] == 125
    assert "npugraph_ex (graph mode) is not available on backend cpu" in status["reason"]["text"]
    assert read_summary(out / "summary.json").comparisons[0].verdict == "SKIPPED"
    assert "**npugraph_ex vs eager  SKIPPED" in (out / "report.md").read_text()
    assert (
        json.loads((out / "runs" / "eager-infer-r1" / "status.json").read_text())["status"] == "OK"
    )


def test_npugraph_ex_with_sft_is_a_config_error(tmp_path):
    proc = run(
        tmp_path,
        "experiment=sft_af_compare",
        "+experiment.variants.graph.optimization.npugraph_ex=true",
    )
    assert proc.returncode == 2
    assert "npugraph_ex is inference-only" in proc.stderr
