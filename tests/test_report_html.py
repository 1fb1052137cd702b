"""The HTML report: one self-contained file with the Markdown report's sections plus plots.

Built from a synthetic summary + per-step table (no experiment is run); the browser tests load
the file in headless Chromium and are skipped where /usr/bin/chromium is absent."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from markupsafe import escape

from afbench.config.models import ReportConfig
from afbench.report import plots
from afbench.report.render import labels, render
from afbench.store import Parity, Summary

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)


def synthetic(
    n_variants: int = 3,
    workload: str = "sft",
    ci: bool = False,
    profile: bool = True,
    steps_per_run: int = 8,
) -> tuple[Summary, pd.DataFrame]:
    """A Summary as compare() builds it (n_variants incl. the baseline) and its steps table."""
    base = "baseline"
    names = [base] + [f"v{i:02d}" for i in range(1, n_variants)]
    mean = {name: 0.5 - 0.02 * i for i, name in enumerate(names)}
    phase = "infer" if workload == "infer" else "train"
    comparisons = []
    for name in names[1:]:
        gain = (mean[base] - mean[name]) / mean[base] * 100
        metrics = {
            "tokens_per_s": 1000 / mean[name],
            "ttft_ms": 12.5,
            "tpot_ms_mean": 4.25,
            "tpot_ms_p50": 4.2,
            "tpot_ms_p90": 4.9,
            "generated_tokens": 60.0,
        }
        parity = (
            {
                "status": "MATCH",
                "prompts_compared": 4,
                "max_abs_logit_diff": 2.5e-6,
                "logit_tolerance": 1.6e-2,
            }
            if workload == "infer"
            else {
                "status": "MATCH",
                "steps_compared": 3,
                "max_abs_diff": 7.1e-7,
                "max_rel_diff": 2.0e-7,
                "rtol": 1e-3,
                "curve": [
                    {
                        "step": s,
                        "baseline": 3.5 - 0.1 * s,
                        "variant": 3.5 - 0.1 * s,
                        "abs_diff": 0.0,
                    }
                    for s in (6, 7, 8)
                ],
            }
        )
        comparisons.append(
            {
                "baseline": {
                    "name": base,
                    "mean_step_s": mean[base],
                    "tokens_per_s": 2048.0,
                    "first_step_s": 7.1,
                    "sanity": "ok",
                    "metrics": {**metrics, "tokens_per_s": 1000 / mean[base]},
                },
                "variant": {
                    "name": name,
                    "mean_step_s": mean[name],
                    "first_step_s": 51.0,
                    "tokens_per_s": 2048.0 * mean[base] / mean[name],
                    "sanity": "ok",
                    "metrics": metrics,
                },
                "phase": phase,
                "workload": workload,
                "verdict": f"{name.upper()}_FASTER",
                "verdict_line": f"{name.upper()}_FASTER",
                "speed": {
                    "gain_pct": gain,
                    "ci_low": gain - 1.5 if ci else None,
                    "ci_high": gain + 2.0 if ci else None,
                    "level": 0.95,
                    "kind": "interval" if ci else "quick",
                },
                "compile": {"overhead_s": 51.0 - mean[name], "break_even_steps": 93.5},
                "parity": parity,
                "reasons": [],
                "aa": False,
            }
        )

    def phases(i: int) -> list[dict[str, float]]:
        return [
            {"phase": "Computing", "us": 200_000.0 - 5000 * i},
            {"phase": "Communication(Not Overlapped)", "us": 30_000.0},
            {"phase": "Overlapped", "us": 12_000.0},
            {"phase": "Free", "us": 50_000.0},
            {"phase": "Stage", "us": 280_000.0 - 5000 * i},
        ]

    profiling, kernels = [], {}
    if profile:
        for i, name in enumerate(names[1:], start=1):
            profiling.append(
                {
                    "variant": name,
                    "baseline": base,
                    "phase": "profile",
                    "status": "COMPARABLE",
                    "reason": "both sides hold steps [3, 4, 5] once each on Device_id 0",
                    "phases": [
                        {"phase": b["phase"], "baseline_us": b["us"], "variant_us": v["us"]}
                        for b, v in zip(phases(0), phases(i))
                    ],
                    "device_ids": {"baseline": "0", "variant": "0"},
                    "profiler_steps": [3, 4, 5],
                }
            )
        for i, name in enumerate(names):
            kernels[name] = [
                {
                    "op_type": op,
                    "count": 261 - j,
                    "total_us": 398214.1 / (j + 1) - 100 * i,
                    "ratio_pct": 62.76 / (j + 1),
                }
                for j, op in enumerate(
                    [
                        "aten::mm",
                        "aten::mul",
                        "<lambda>",
                        "aten::_scaled_dot_product_flash_attention_backward",
                        "aten::add",
                    ]
                )
            ]
    runs = [
        {
            "run_id": f"{name}-{phase}-r1",
            "variant": name,
            "phase": phase,
            "repeat": 1,
            "status": "OK",
            "exit_code": 0,
            "reason": None,
            "wall_s": 61.0,
            "mean_step_s": mean[name],
            "log_error": "",
            "first_step_s": 7.1,
            "tokens_per_s": 2048.0,
            "workload": workload,
        }
        for name in names
    ]
    summary = {
        "experiment": "html_synthetic",
        "out_dir": "/tmp/x",
        "generated_at": "2026-11-29T11:00:00+00:00",
        "created_at": "2026-11-29T10:00:00+00:00",
        "baseline": base,
        "verdict_phase": phase,
        "profile_phase": "profile" if profile else None,
        "rounds": 1,
        "skip_policy": "per_variant",
        "variants": {
            name: ({} if name == base else {"optimization.autofuse": True}) for name in names
        },
        "assets": {
            "model": {"path": "/models/qwen3", "sha256": "ab" * 32},
            "data": {"path": "/data/wordle.jsonl", "sha256": "cd" * 32},
        },
        "environment": {
            "python": "3.11.7",
            "platform": "Linux",
            "backend": "npu",
            "device": "Ascend 910B",
            "torch_threads": 8,
            "versions": {"torch": "2.5.1"},
            "params": 3762944,
        },
        "parameters": [
            {
                "phase": phase,
                "workload": workload,
                "model": "qwen3_tiny",
                "dtype": "bfloat16",
                "data": "wordle_sample",
                "world_size": 1,
                "backend": "auto",
                "scheduler": {
                    "steps": steps_per_run,
                    "measure": {"first_step": 4, "last_step": steps_per_run},
                },
                "profiler": None,
            }
        ],
        "runs": runs,
        "switches": {r["run_id"]: [] for r in runs},
        "comparisons": comparisons,
        "profiling": profiling,
        "kernels": kernels,
        "kernel_diffs": {},
        "fused_evidence": {},
        "caveat": "One quick round per variant is directional evidence.",
        "headline": [],
    }
    rows = []
    for name in names:
        for step in range(1, steps_per_run + 1):
            t = 7.1 if step == 1 else mean[name] * (1 + 0.01 * (step % 3))
            row = {
                "run_id": f"{name}-{phase}-r1",
                "variant": name,
                "phase": phase,
                "repeat": 1,
                "step": step,
                "step_time_s": t,
            }
            if workload == "infer":
                row.update(measured=step > 1, tpot_ms_mean=4.0 + 0.1 * step)
            else:
                row.update(loss=3.5 - 0.1 * step)
            rows.append(row)
    return Summary.model_validate(summary), pd.DataFrame(rows)


def write_report(
    tmp_path: Path, summary: Summary, steps: pd.DataFrame | None, lang: str = "en"
) -> str:
    if steps is not None:
        (tmp_path / "results").mkdir(exist_ok=True)
        steps.to_parquet(tmp_path / "results" / "steps.parquet", index=False)
    render(summary, tmp_path, ReportConfig(lang=lang, formats=["md", "html"]))
    return (tmp_path / "report.html").read_text(encoding="utf-8")


def test_html_report_is_self_contained(tmp_path):
    html = write_report(tmp_path, *synthetic())
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert not re.search(r"url\(\s*['\"]?(?:https?:)?//|@import|<script|<link\b", html, re.I)
    assert "<img" not in html or "data:image/" in html


def test_html_report_carries_verdicts_and_key_numbers(tmp_path):
    summary, steps = synthetic()
    html = write_report(tmp_path, summary, steps)
    for c in summary.comparisons:
        assert f"Why: {c.verdict_line}" in html
        assert f"<b>{c.variant.name} vs {c.baseline.name}  " in html  # the headline
        assert f"{c.speed.gain_pct:+.2f}%" in html
        assert f"{c.variant.mean_step_s:.4f}" in html
    assert f"{summary.comparisons[0].baseline.mean_step_s:.4f}" in html
    assert "398214.1" in html  # top op, kernel table
    for section in (
        "Verdict",
        "Result parity (loss per step)",
        "Profiling",
        "Runs",
        "Variants",
        "Run parameters",
        "Inputs and environment",
        "Caveat",
    ):
        assert section in html


def test_html_report_inlines_one_svg_per_plot(tmp_path):
    summary, steps = synthetic(n_variants=3)
    html = write_report(tmp_path, summary, steps)
    # gains, step time, phases, and one top-ops plot per variant with a kernel table
    assert html.count("<svg") == 3 + len(summary.kernels)
    assert html.count('<figure class="plot"') == html.count("<svg")


def test_missing_data_omits_each_plot_with_a_one_line_note(tmp_path):
    summary, _ = synthetic(profile=False)
    for c in summary.comparisons:
        c.speed.gain_pct = None
    html = write_report(tmp_path, summary, None)
    L = labels("en")
    assert "<svg" not in html
    for key in ("no_steps_plot", "no_gain_plot"):
        assert f'<p class="note">{L[key]}</p>' in html
    assert L["no_profile"] in html


def test_gain_plot_has_error_bars_only_when_the_summary_carries_intervals(tmp_path):
    L = labels("en")
    with_ci = write_report(tmp_path, *synthetic(ci=True))
    assert L["gain_ci"] in with_ci
    without = write_report(tmp_path, *synthetic(ci=False))
    assert L["gain_ci"] not in without


def _figure_of(html: str, anchor: str) -> str:
    part = html[html.index(f'id="{anchor}"') :]
    return part[: part.index("</figure>")]


def test_gain_bars_take_the_verdicts_colour_and_a_huge_interval_is_clipped(tmp_path):
    summary, steps = synthetic(n_variants=2, ci=True)
    (c,) = summary.comparisons
    c.verdict = "INCONCLUSIVE"  # a positive gain the interval cannot vouch for
    c.speed.ci_low_pct, c.speed.ci_high_pct = -6.5e10, 100.0  # a first sequential look's
    gains = _figure_of(write_report(tmp_path, summary, steps), "plot-gains")
    assert plots.GAIN_UP.lower() not in gains.lower()  # not green
    assert "#64748b" in gains.lower()  # grey, as in the sweep plots
    limit, low_cut, high_cut = plots.clipped_span(
        [c.speed.gain_pct], [c.speed.ci_low_pct], [c.speed.ci_high_pct]
    )
    assert limit == max(10.0, 3 * abs(c.speed.gain_pct)) and low_cut == [True]
    assert high_cut == [limit < 100.0]
    assert "6.5e" not in gains and "-65000000000" not in gains  # no tick near the far end


def test_phase_bars_stack_only_computing_communication_and_free(tmp_path):
    summary, steps = synthetic(n_variants=2)
    html = write_report(tmp_path, summary, steps)
    figure = html[html.index('id="plot-phases"') :]
    figure = figure[: figure.index("</figure>")]
    us = {ph.phase: ph.baseline_us for ph in summary.profiling[0].phases}
    stacked_ms = (us["Computing"] + us["Communication(Not Overlapped)"] + us["Free"]) / 1e3
    assert f"{stacked_ms:,.1f}" in figure
    assert f"{stacked_ms + us['Overlapped'] / 1e3:,.1f}" not in figure
    assert f"{us['Overlapped'] / 1e3:,.1f}" in figure  # drawn on its own


def test_inference_report_has_metrics_and_a_tpot_panel(tmp_path):
    summary, steps = synthetic(workload="infer")
    html = write_report(tmp_path, summary, steps)
    assert "Inference metrics (measured runs)" in html
    assert "Result parity (greedy tokens and logits)" in html
    assert labels("en")["axis_tpot"] in html


def test_html_report_renders_in_chinese(tmp_path):
    summary, steps = synthetic()
    html = write_report(tmp_path, summary, steps, lang="zh")
    zh = labels("zh")
    assert '<html lang="zh-CN">' in html
    for key in ("verdict", "profiling", "runs", "plot_step_time", "axis_step_time"):
        assert str(escape(zh[key])) in html
    # the caveat names the calibration recipe of the comparison (no switch set: as it is)
    calibrate = zh["v_calibrate_plain"].replace("{recipe}", "calibrate_host")
    assert str(escape(zh["caveat_text"].replace("{calibrate}", calibrate))) in html
    assert f"{summary.comparisons[0].speed.gain_pct:+.2f}%" in html


def test_model_output_and_op_names_are_escaped(tmp_path):
    summary, steps = synthetic(workload="infer")
    summary.comparisons[0].parity = Parity(
        status="DIVERGED",
        first_divergence={
            "prompt_index": 0,
            "position": 3,
            "baseline_text": "<script>alert(1)</script>",
            "variant_text": "a & b",
        },
    )
    html = write_report(tmp_path, summary, steps)
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<code>&lt;lambda&gt;</code>" in html


def test_sixteen_variants_get_one_top_ops_plot_each_and_compact_cards(tmp_path):
    # the speed of this render is bench/report_speed.py's to measure, not a unit test's
    summary, steps = synthetic(n_variants=16, steps_per_run=30)
    html = write_report(tmp_path, summary, steps)
    assert html.count("<svg") == 3 + 16
    assert '<div class="cards many">' in html
    for name in summary.kernels:
        assert f'{name} <span class="method">' in html


# --- in a real browser -----------------------------------------------------------------------


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium); needed to load the page")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def browser_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    summary, steps = synthetic(n_variants=4)
    write_report(out, summary, steps)
    return out, summary


def test_browser_screenshot_is_not_blank(browser_page):
    out, _ = browser_page
    png = out / "report.png"
    proc = _chromium(
        out,
        f"--screenshot={png}",
        "--window-size=1280,2000",
        "--hide-scrollbars",
        (out / "report.html").as_uri(),
    )
    assert png.is_file(), f"no screenshot: {proc.stderr[-2000:]}"
    from matplotlib.image import imread

    img = imread(str(png))[..., :3]
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    pixels = img.reshape(-1, 3)
    non_white = (pixels < 0.97).any(axis=1).mean()
    colours = len({tuple(p) for p in (pixels[::97] * 255).astype(int).tolist()})
    assert colours > 20, f"only {colours} distinct colours: blank page?"
    assert non_white > 0.15, f"only {non_white:.1%} non-white pixels: blank page?"


def test_browser_page_text_carries_the_key_numbers(browser_page):
    out, summary = browser_page
    proc = _chromium(out, "--dump-dom", (out / "report.html").as_uri())
    dom = proc.stdout
    assert "</html>" in dom, proc.stderr[-2000:]
    text = re.sub(r"<[^>]+>", "", dom)
    for c in summary.comparisons:
        assert f"Why: {c.verdict_line}" in text
        assert f"{c.variant.name} vs {c.baseline.name}  " in text
        assert f"{c.speed.gain_pct:+.2f}%" in text
    assert dom.count("<svg") == 3 + len(summary.kernels)


def test_a_failing_plot_becomes_a_note_and_the_report_still_renders(tmp_path, monkeypatch):
    from afbench.report import plots

    def broken(*args, **kwargs):
        raise ValueError("bad data")

    monkeypatch.setattr(plots, "phase_plot", broken)
    monkeypatch.setattr(plots, "kernel_plots", broken)
    summary, steps = synthetic()
    html = write_report(tmp_path, summary, steps)
    assert html.count("Plot failed: ValueError: bad data") == 1 + len(summary.kernels)
    assert 'id="plot-gains"' in html and 'id="plot-step-time"' in html


def test_a_over_a_variant_is_called_the_noise_floor(tmp_path):
    summary, steps = synthetic(ci=True)
    summary.comparisons[0].aa = True
    html = write_report(tmp_path, summary, steps)
    assert html.count("<b>A/A</b>") == 1
    # the sentence comes from labels.yaml and is escaped like any text (' is &#39;)
    import html as html_lib

    assert "is this machine's noise floor" in html_lib.unescape(html)
