"""Memory, efficiency and caveats in the summary and the report (issue 14 items 2-5, issue 10
items 2 and 4, kernel_details per step), on copies of the stored fixture directory
(tests/fixtures/results/v1: command-engine runs, nothing timed) with planted result fields."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from afbench.compare import PLACEHOLDER_LOSS_REASON, loss_parity, memory_change
from afbench.config.models import ReportConfig
from afbench.report.render import build_report, render
from afbench.store import Memory, Side

STORED = Path(__file__).parent / "fixtures" / "results" / "v1"
NPU = Path(__file__).parent / "fixtures" / "npu"
# GiB; binary-exact so that 1.375 is exactly 10% above 1.25 (the caveat boundary)
PEAKS = {"plain": (1.0, 1.25), "fused": (1.25, 1.376), "plain_copy": (1.375, 1.0)}


def planted(tmp_path: Path, **extra) -> Path:
    """A copy of the v1 directory whose train runs' result.json carry CPU-shaped memory and
    efficiency fields: r1/r2 peak RSS from PEAKS (max over repeats is what counts), TFLOPs,
    no peak known; ``extra`` fields are added to every train run."""
    out = tmp_path / "v1"
    shutil.copytree(STORED, out)
    for variant, peaks in PEAKS.items():
        for repeat, peak in enumerate(peaks, start=1):
            path = out / "runs" / f"{variant}-train-r{repeat}" / "result.json"
            result = json.loads(path.read_text())
            result.update(
                {
                    "peak_rss_gib": peak,
                    "peak_memory_allocated_gib": None,
                    "memory_source": "getrusage peak RSS",
                    "memory_window": "steps 3-6",
                    "tflops_per_device": 0.002 * repeat,
                    "mfu_pct": None,
                    "peak_tflops": None,
                    "peak_tflops_source": "n/a: no published peak",
                    "tflops_source": "afbench: 6N + 12LHQT",
                    "flops_per_token": 1.5e7,
                    **extra,
                }
            )
            path.write_text(json.dumps(result))
    return out


def rebuild(out: Path, **report) -> tuple:
    summary = build_report(out, ReportConfig(formats=["md"], **report))
    return summary, (out / "report.md").read_text(encoding="utf-8")


def comparison(summary, variant: str):
    return next(c for c in summary.comparisons if c.variant.name == variant)


def test_memory_per_variant_and_its_change_against_the_baseline(tmp_path):
    summary, report = rebuild(planted(tmp_path))
    fused = comparison(summary, "fused")
    assert fused.baseline.memory.peak_gib == 1.25 and fused.baseline.memory.measure == "rss"
    assert fused.variant.memory.peak_gib == 1.376
    assert fused.memory.delta_gib == pytest.approx(0.126)
    assert fused.memory.delta_pct == pytest.approx(10.08)
    assert fused.variant.memory.source.text == "getrusage peak RSS"  # v1: as written
    # TFLOPs: mean over the repeats; MFU n/a without a peak
    assert fused.variant.efficiency.tflops_per_device == pytest.approx(0.003)
    assert fused.variant.efficiency.mfu_pct is None
    assert "| plain (baseline) | 1.250 (rss) |  |  | 0.003 | n/a |" in report
    assert "| fused | 1.376 (rss) | +0.126 | +10.1% ⚠ | 0.003 | n/a |" in report
    assert "- memory source: getrusage peak RSS; steps 3-6" in report
    assert "- peak TFLOPs: n/a: no published peak" in report
    # a failed variant has no figure: n/a, not 0
    assert "| broken | n/a | n/a | n/a | n/a | n/a |" in report


def test_memory_caveat_only_above_memory_warn_pct(tmp_path):
    summary, report = rebuild(planted(tmp_path))
    fused, copy = comparison(summary, "fused"), comparison(summary, "plain_copy")
    assert copy.memory.delta_pct == 10.0 and not copy.memory.warn and copy.caveats == []
    assert fused.memory.warn
    assert fused.verdict_line.endswith(
        "; caveat: peak memory (rss) +10.1% (+0.126 GiB) over plain, above "
        "report.memory_warn_pct 10%"
    )
    assert f"- Why: {fused.verdict_line}" in report
    assert "**fused vs plain  " in report and "memory +10% ⚠**" in report  # the headline's flag
    assert "caveat" not in copy.verdict_line
    raised, _ = rebuild(planted(tmp_path / "raised"), memory_warn_pct=12.5)
    assert not comparison(raised, "fused").memory.warn
    assert "caveat" not in comparison(raised, "fused").verdict_line


def test_memory_change_uses_the_kind_both_sides_measured():
    b = Side(name="b", memory=Memory(peak_reserved_gib=4.0, peak_rss_gib=2.0))
    v = Side(name="v", memory=Memory(peak_rss_gib=3.0))
    change = memory_change(b, v, 10.0)
    assert (change.measure, change.delta_gib, change.delta_pct) == ("rss", 1.0, 50.0)
    assert change.warn
    assert memory_change(b, Side(name="v"), 10.0).delta_gib is None


def test_engine_and_afbench_tflops_are_both_shown_where_both_exist(tmp_path):
    summary, report = rebuild(
        planted(
            tmp_path,
            afbench_tflops_per_device=0.0025,
            afbench_mfu_pct=None,
            afbench_tflops_source="afbench count",
        )
    )
    side = comparison(summary, "fused").variant
    assert side.efficiency.afbench_tflops_per_device == pytest.approx(0.0025)
    assert "| 0.003 / 0.0025 (afbench) | n/a |" in report
    assert "- afbench's FLOP count: afbench count" in report


def test_command_engine_runs_say_memory_is_not_reported(tmp_path):
    summary, report = rebuild(
        planted(tmp_path, memory_source="not reported (engine command)", peak_rss_gib=None)
    )
    assert comparison(summary, "fused").variant.memory.peak_gib is None
    assert "- memory source: not reported (engine command); steps 3-6" in report


def test_inference_report_shows_kv_cache_and_peak_memory(tmp_path):
    out = planted(
        tmp_path,
        kv_cache_gib=0.0625,
        kv_cache_tokens=320,
        kv_cache_batch=4,
        kv_cache_source="2 x layers x kv_heads x head_dim x tokens x batch x bytes",
    )
    summary = build_report(out, ReportConfig(formats=["md"]))
    infer = summary.model_copy(
        update={
            "comparisons": [c.model_copy(update={"workload": "infer"}) for c in summary.comparisons]
        }
    )
    for lang in ("en", "zh"):
        (tmp_path / lang).mkdir()
        render(infer, tmp_path / lang, ReportConfig(formats=["md"], lang=lang))
    en, zh = ((tmp_path / lang / "report.md").read_text(encoding="utf-8") for lang in ("en", "zh"))
    section = en.split("## Memory and efficiency")[1].split("\n## ")[0]
    assert "| KV cache (GiB) |" in section and "TFLOPs" not in section
    assert "| fused | 1.376 (rss) | +0.126 | +10.1% ⚠ | 0.0625 (4 × 320 positions) |" in section
    assert "- KV-cache size: 2 x layers" in section
    assert (
        "峰值内存 (GiB)" in zh
        and "| fused | 1.376 (rss) | +0.126 | +10.1% ⚠ | 0.0625 (4 × 320 个位置) |" in zh
    )


def test_a_recompile_inside_the_window_flags_the_run_and_the_verdict_line(tmp_path):
    out = planted(tmp_path)
    plan = json.loads((out / "plan.json").read_text())
    for run in plan["runs"]:
        if run["run_id"] == "fused-train-r2":
            run["config"]["optimization"]["autofuse"] = True
    (out / "plan.json").write_text(json.dumps(plan))
    log = out / "runs" / "fused-train-r2" / "stdout.log"
    lines = log.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("step:  4"))
    lines.insert(
        at + 1,
        "[rank0]:W1201 12:00:07.123000 4242 torch/_dynamo/convert_frame.py:964] "
        "[0/8] torch._dynamo hit config.recompile_limit (8)",
    )
    log.write_text("\n".join(lines) + "\n")
    summary, report = rebuild(out)
    caveat = "recompiled inside the measured window, after step 4"
    run = next(r for r in summary.runs if r.run_id == "fused-train-r2")
    assert run.recompile == caveat
    assert not next(r for r in summary.runs if r.run_id == "fused-train-r1").recompile
    fused = comparison(summary, "fused")
    assert fused.variant.recompile == caveat
    assert f"; caveat: fused {caveat}" in fused.verdict_line
    assert "| `fused-train-r2` | fused | train | OK | 0 |" in report
    assert next(line for line in report.splitlines() if "`fused-train-r2`" in line).endswith(
        f"| {caveat} |"
    )


def test_profiling_shows_device_time_per_step_or_says_it_is_unavailable(tmp_path):
    out = planted(tmp_path)
    target = (
        out / "runs" / "plain-profile-r1" / "profile" / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    )
    target.mkdir(parents=True)
    shutil.copy(NPU / "kernel_details.csv", target / "kernel_details.csv")
    summary, report = rebuild(out)
    plain = summary.step_device_time["plain"]
    assert plain.rows and plain.note == ""
    assert {r.step for r in plain.rows} == set(pd.read_csv(NPU / "kernel_details.csv")["Step Id"])
    assert "fused" not in summary.step_device_time  # its profile has no kernel_details.csv
    assert "Device time per profiled step (kernel_details.csv), plain:" in report
    assert (
        "| profiler step | device | kernels | kernel time (µs) | first to last kernel (µs) |"
        in report
    )
    # a kernel_details.csv without the Step Id column (no profiler schedule) says so
    details = pd.read_csv(NPU / "kernel_details.csv").drop(columns="Step Id")
    details.to_csv(target / "kernel_details.csv", index=False)
    summary, report = rebuild(out)
    note = summary.step_device_time["plain"].note
    assert note == (
        "per-step breakdown unavailable: no 'Step Id' column in runs/plain-profile-r1/"
        "profile/x_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    )
    assert f"Device time per profiled step (kernel_details.csv), plain: {note}" in report
    # none at all: one note for the profile phase
    shutil.rmtree(target)
    summary, report = rebuild(out)
    assert summary.step_device_time == {}
    assert (
        "Device time per profiled step (kernel_details.csv): per-step breakdown unavailable "
        "(no profile run wrote torch_npu's kernel_details.csv)."
    ) in report


def steps_table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def test_placeholder_loss_is_unavailable_parity_never_a_match():
    rows = [
        {"run_id": rid, "step": s, "loss": None, "loss_placeholder": True}
        for rid in ("a", "b")
        for s in (1, 2, 3)
    ]
    parity = loss_parity(steps_table(rows), ["a"], ["b"], 1e-5)
    assert (parity.status, parity.reason) == ("N/A", PLACEHOLDER_LOSS_REASON)
    assert parity.curve is None
    real = [{"run_id": rid, "step": s, "loss": 2.0 / s} for rid in ("a", "b") for s in (1, 2)]
    assert loss_parity(steps_table(real), ["a"], ["b"], 1e-5).status == "MATCH"
    # one side with placeholders is not comparable either
    mixed = real[:2] + [
        {"run_id": "b", "step": s, "loss": None, "loss_placeholder": True} for s in (1, 2)
    ]
    assert loss_parity(steps_table(mixed), ["a"], ["b"], 1e-5).reason == PLACEHOLDER_LOSS_REASON


def test_html_report_draws_a_memory_bar_per_variant_or_says_why_not(tmp_path):
    from afbench.report.plots import memory_plot
    from afbench.report.render import labels

    summary = build_report(planted(tmp_path), ReportConfig(formats=["md"]))
    render(summary, tmp_path / "v1", ReportConfig(formats=["html"], lang="zh"))
    html = (tmp_path / "v1" / "report.html").read_text(encoding="utf-8")
    figure = html.split('id="plot-memory"')[1].split("</figure>")[0]
    assert "<svg" in figure and "各变体的峰值内存" in html
    for text in ("1.250 GiB", "1.376 GiB (+10.1% ⚠)", "1.375 GiB (+10.0%)", "n/a"):
        assert text in figure, text
    none = summary.model_copy(
        update={
            "comparisons": [
                c.model_copy(
                    update={
                        "baseline": Side(name=c.baseline.name),
                        "variant": Side(name=c.variant.name),
                    }
                )
                for c in summary.comparisons
            ]
        }
    )
    L = labels("en")
    assert memory_plot(none, L).svg is None
    assert memory_plot(none, L).note == L["no_memory_plot"]
