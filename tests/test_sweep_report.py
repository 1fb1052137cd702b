"""The sweep report as a reader sees it: a real 2x2 sweep (command engine, planted step times
of tests/fault_workers/switch_timed.py, 3 repeats) in which one run is a loaded one (x4, with
bursts) and one job stops at its preflight before running; rendered in English and, offline,
in Chinese with the user's own template folder; loaded in headless Chromium where installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from afbench.analysis.factorial import outlier_runs
from afbench.errors import OutputError
from afbench.report.render import labels
from afbench.store import load_sweep_summary, read_summary
from test_report_html import _chromium
from test_sweep import AF, COMMAND, RMS, afbench, combo, sweep_dir

# the loaded run is job 1's own run of round 2 (its job runs the baseline combination beside it,
# experiment.sweep_pairing=beside; the default experiment's one variant is "combination" there)
LOADED_RUN = "combination-run-r2"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Sweep 1: the 2x2 grid, repeat 2 of autofuse=false,add_rmsnorm=true loaded, with a user
    template folder holding only sweep.md.j2. Sweep 2: the job autofuse=true,add_rmsnorm=true
    again, asking its preflight for a million GiB free; its job folder (it never planned)
    replaces the grid's, and the grid's sweep report is built again offline."""
    cwd = tmp_path_factory.mktemp("sweeprep")
    tpl = cwd / "tpl"
    tpl.mkdir()
    (tpl / "sweep.md.j2").write_text(
        "USER TEMPLATE {{ L.sweep_title }}: {{ s.baseline }}\n"
        "{% for c in s.combinations %}{{ c.name }} {{ c.verdict }}\n"
        "{% endfor %}",
        encoding="utf-8",
    )
    first = afbench(
        cwd,
        "-m",
        *COMMAND,
        f"{AF}=false,true",
        f"{RMS}=false,true",
        "verdict.rounds=3",
        f"report.template_dir={tpl}",
        env={"SWITCH_TIMED_LOADED": "autofuse=false,add_rmsnorm=true,repeat=2"},
    )
    assert first.returncode == 0, first.stdout + first.stderr
    grid = sweep_dir(cwd)
    shutil.move(grid, cwd / "grid")
    grid = cwd / "grid"
    second_cwd = cwd / "second"
    second_cwd.mkdir()
    second = afbench(
        second_cwd, "-m", *COMMAND, f"{AF}=true", f"{RMS}=true", "preflight.min_free_gib=1000000"
    )
    assert second.returncode == 1, second.stdout + second.stderr
    failed_job = only_job(grid, combo(True, True))
    shutil.rmtree(failed_job)
    shutil.copytree(sweep_dir(second_cwd) / "0", failed_job)
    proc = subprocess.run(
        [sys.executable, "-m", "afbench.report", str(grid)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return grid


def only_job(grid: Path, name: str) -> Path:
    rows = json.loads((grid / "sweep_summary.json").read_text())["combinations"]
    return grid / next(r["job"] for r in rows if r["name"] == name)


def rows(grid: Path) -> dict:
    s = load_sweep_summary(json.loads((grid / "sweep_summary.json").read_text()))
    return {r.name: r for r in s.combinations}


def test_a_job_stopped_by_its_preflight_is_run_failed_with_its_reason(sweep):
    bad = rows(sweep)[combo(True, True)]
    assert bad.verdict == "RUN_FAILED" and bad.gain_pct is None and not bad.ok
    assert "no plan.json" in bad.reasons[0] and "[FAIL]" in bad.reasons[0], bad.reasons
    assert bad.report is None
    html = (sweep / "sweep_report.html").read_text(encoding="utf-8")
    row = html[html.index(f'id="job-{bad.job}"') :]
    row = row[: row.index("</tr>")]
    assert "RUN_FAILED" in row and "[FAIL] free disk" in row
    assert "BASELINE" not in row and "+0.00%" not in row


def test_the_loaded_run_marks_its_combination_untrusted_and_no_other(sweep):
    r = rows(sweep)
    loaded = r[combo(False, True)]
    assert loaded.untrusted and loaded.outlier_runs == [LOADED_RUN]
    assert loaded.n_bursts >= 1
    # the median of its three run medians stays at the planted 0.12 s
    assert loaded.median_step_s == pytest.approx(0.12, rel=0.05)
    assert [n for n, x in r.items() if x.untrusted] == [combo(False, True)]
    s = json.loads((sweep / "sweep_summary.json").read_text())
    assert s["untrusted"] == [combo(False, True)]


def test_main_effects_are_not_carried_by_the_loaded_run(sweep):
    s = load_sweep_summary(json.loads((sweep / "sweep_summary.json").read_text()))
    effects = {e.key: e for e in s.main_effects}
    assert set(effects) == {AF, RMS}
    # planted: autofuse x0.7 (+30%), add_rmsnorm x1.2 (-20%); the failed job drops one cell each
    assert effects[AF].effect_pct == pytest.approx(30, abs=3) and effects[AF].cells == 1
    assert effects[RMS].effect_pct == pytest.approx(-20, abs=3)
    assert effects[RMS].cells == 1 and effects[RMS].dropped == 1
    assert effects[RMS].reference == "False" and effects[RMS].value == "True"


def test_gains_use_the_paired_statistics_at_the_bonferroni_level(sweep):
    s = load_sweep_summary(json.loads((sweep / "sweep_summary.json").read_text()))
    assert s.comparisons == 3 and s.level == pytest.approx(1 - 0.05 / 3)
    fast = rows(sweep)[combo(True, False)]
    assert fast.verdict == "FASTER" and fast.n_pairs == 3 and 0 < fast.ci_low < fast.ci_high
    assert fast.gain_pct == pytest.approx(30, abs=3) and "paired t" in fast.speed.method
    assert fast.level == pytest.approx(s.level)  # its job decided at the per-comparison level
    assert rows(sweep)[combo(False, False)].verdict == "BASELINE"


def test_no_report_prints_a_percent_sign_after_n_a(sweep):
    for name in ("sweep_report.md", "sweep_report.html"):
        assert "n/a%" not in (sweep / name).read_text()


def test_zh_rerender_uses_the_users_template_folder(sweep, tmp_path):
    copy = shutil.copytree(sweep, tmp_path / "grid")
    from afbench.report.__main__ import main as report_main

    english = (copy / "sweep_report.html").read_text(encoding="utf-8")
    # the user names the template folder again: a stored report.template_dir is never used
    tpl = sweep.parent / "tpl"
    assert report_main([str(copy), "--lang", "zh", "--template-dir", str(tpl)]) == 0
    zh = labels("zh")
    # beside the English page (the jobs ran in English), which stays as it was
    md = (copy / "sweep_report.zh.md").read_text(encoding="utf-8")
    assert md.startswith(f"USER TEMPLATE {zh['sweep_title']}: {combo(False, False)}")
    assert f"{combo(True, True)} RUN_FAILED" in md
    html = (copy / "sweep_report.zh.html").read_text(encoding="utf-8")
    assert (copy / "sweep_report.html").read_text(encoding="utf-8") == english
    assert '<html lang="zh-CN">' in html
    for key in ("ranking", "main_effects", "plot_forest"):
        assert zh[key] in html
    # two of three comparisons paired beside; the job that never planned is named
    some = zh["beside_some"].replace("{n}", "2").replace("{m}", "3")
    assert some + combo(True, True) in html
    # every job's report re-rendered in Chinese and linked; the job stopped before planning
    # says so in Chinese
    links = re.findall(r'href="([^"#]+/report[^"]*\.html)"', html)
    assert links and all(link.endswith("/report.zh.html") for link in links)
    for link in links:
        job_html = (copy / link).read_text(encoding="utf-8")
        assert '<html lang="zh-CN">' in job_html and zh["verdict"] in job_html
        assert (copy / link.replace(".zh.html", ".html")).is_file()  # the English one stays
    assert zh["job_stopped_detail"].split("：")[0] in html


def test_html_carries_plots_links_and_trust_signals(sweep):
    html = (sweep / "sweep_report.html").read_text(encoding="utf-8")
    L = labels("en")
    for plot in ("plot-forest", "plot-grid", "plot-steps"):
        figure = html[html.index(f'id="{plot}"') :]
        assert figure[: figure.index("</figure>")].count("<svg") == 1, plot
    assert 'class="badge bad">RUN_FAILED' in html
    assert f'<span class="flag">{L["untrusted"]}</span>' in html
    assert f"<code>{LOADED_RUN}</code>" in html


def test_in_chromium_every_job_link_resolves_and_the_plots_are_drawn(sweep):
    proc = _chromium(sweep, "--dump-dom", (sweep / "sweep_report.html").as_uri())
    dom = proc.stdout
    assert "</html>" in dom, proc.stderr[-2000:]
    for plot in ("plot-forest", "plot-grid", "plot-steps"):
        assert re.search(rf'<figure class="plot" id="{plot}">.*?<svg', dom, re.S), plot
    links = set(re.findall(r'<a class="job" href="([^"]+)"', dom))
    ran = {r.job for r in rows(sweep).values() if r.ok}
    assert {link.split("/")[0] for link in links} == ran and len(ran) == 3
    for link in links:
        assert (sweep / link).is_file(), link
    text = re.sub(r"<[^>]+>", "", dom)
    assert "n/a%" not in text and "RUN_FAILED" in text


# --- the statistics behind the marks, on their own ------------------------------------------


def test_outlier_runs_flag_a_loaded_repeat_but_not_ordinary_spread():
    assert outlier_runs([0.120, 0.481, 0.121]) == [1]
    assert outlier_runs([0.120, 0.123, 0.118, 0.125]) == []
    assert outlier_runs([0.1, 0.2]) == [0, 1] and outlier_runs([0.1, 0.11]) == []
    assert outlier_runs([0.1]) == []
    with pytest.raises(ValueError, match="finite and > 0"):
        outlier_runs([0.1, 0.0, 0.1])


def test_a_sweep_summary_of_the_flat_rows_before_the_typed_one_still_loads():
    old = {
        "schema_version": 1,
        "sweep_dir": "/x",
        "jobs": 2,
        "swept_keys": [AF],
        "baseline": f"{AF}=False",
        "sweep_baseline": None,
        "confidence": 0.95,
        "combinations": [
            {
                "name": f"{AF}=True",
                "job": "1",
                "variant": "baseline",
                "setting": {AF: "True"},
                "ok": True,
                "statuses": ["OK"],
                "per_repeat_s": [0.07],
                "mean_step_s": 0.07,
                "tokens_per_s": None,
                "reasons": [],
                "is_plan_baseline": True,
                "verdict": "FASTER",
                "gain_pct": 30.0,
                "ci_low": None,
                "ci_high": None,
                "note": " (quick verdict: one round)",
            }
        ],
        "main_effects": [
            {
                "key": AF,
                "value": "True",
                "combinations": 1,
                "mean_gain_pct": 30.0,
                "effect_pct": 15.0,
            }
        ],
        "failed": [],
    }
    s = load_sweep_summary(old)
    assert s.combinations[0].gain_pct == 30.0 and s.combinations[0].median_step_s is None
    # its flat verdict became the row's Speed, its flat numbers the row's Side
    row = s.combinations[0]
    assert (row.verdict, row.speed.decision, row.status) == ("FASTER", "FASTER", None)
    assert row.side.repeats_s == [0.07] and row.mean_step_s == 0.07 and row.ok
    # the untyped summary's "combinations" is the cell count; its mean-based estimate is gone
    assert s.main_effects[0].effect_pct == 15.0 and s.main_effects[0].cells == 1
    assert "mean_gain_pct" not in s.main_effects[0].model_dump()
    # from version 2 on, a key the summary does not name is an error naming it
    with pytest.raises(OutputError, match="gain_pc"):
        load_sweep_summary(
            {
                "schema_version": 2,
                "sweep_dir": "/x",
                "jobs": 1,
                "combinations": [{"name": "a", "job": "0", "gain_pc": 1.0}],
            }
        )
    with pytest.raises(OutputError, match="sweep_summary.json: schema_version 99"):
        load_sweep_summary({**old, "schema_version": 99})


def test_the_one_round_caveat_says_a_short_sweep_needs_its_own_calibration():
    # a host calibrated with the default window still leaves an experiment.steps=6 sweep
    # uncalibrated (the calibration is kept per window): the caveat must say so
    for lang in ("en", "zh"):
        caveat = labels(lang)["one_round_caveat"]
        assert "experiment={recipe}" in caveat and "experiment.steps=N" in caveat


# --- a sweep directory of schema version 3 (tests/fixtures/sweeps/v3) -----------------------

V3 = Path(__file__).parent / "fixtures" / "sweeps" / "v3"


def test_a_version_3_sweep_summary_loads_its_flat_rows_as_speed_and_side():
    raw = json.loads((V3 / "sweep_summary.json").read_text())
    assert raw["schema_version"] == 3
    s = load_sweep_summary(raw)
    for flat, row in zip(raw["combinations"], s.combinations):
        assert row.verdict == flat["verdict"] and row.gain_pct == flat["gain_pct"]
        assert (row.ci_low, row.ci_high) == (flat["ci_low"], flat["ci_high"])
        assert row.side.mean_step_s == flat["mean_step_s"]
        assert row.side.repeats_s == flat["per_repeat_s"]
        source = row.side.memory.source  # a version-3 English text: kept as written
        assert (source.text if source else None) == flat["memory_source"]
    assert s.combinations[1].status == "BASELINE" and s.combinations[1].speed is None
    assert s.main_effects[0].level == raw["main_effects"][0]["coverage"]


def test_a_version_3_sweep_directory_re_renders_with_its_jobs_own_verdicts(tmp_path):
    from afbench.report.__main__ import main as report_main

    sweep = shutil.copytree(V3, tmp_path / "sweep")
    assert report_main([str(sweep)]) == 0
    s = load_sweep_summary(json.loads((sweep / "sweep_summary.json").read_text()))
    assert s.schema_version > 3
    fast = rows(sweep)[f"{AF}=True"]
    job = read_summary(sweep / fast.job / "summary.json")
    assert fast.from_job and fast.speed == job.comparisons[0].speed
    effect = s.main_effects[0]  # one key, one cell: the row's own paired gain and interval
    assert effect.effect_pct == pytest.approx(fast.gain_pct)
    assert (effect.ci_low, effect.ci_high) == pytest.approx((fast.ci_low, fast.ci_high))
    assert "level (Holm)" in (sweep / "sweep_report.md").read_text()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_one_round_caveat_names_the_calibration_recipe_of_the_sweeps_workload(tmp_path, lang):
    """An inference sweep is calibrated with calibrate_host_infer, not the training recipe
    (the recipe its rows' verdicts name, as an experiment's advice does)."""
    from afbench.config.models import ReportConfig
    from afbench.report.render import render_sweep

    stored = Path(__file__).parent / "fixtures" / "sweeps" / "v3" / "sweep_summary.json"
    s = load_sweep_summary(json.loads(stored.read_text()))
    rows = [
        r.model_copy(
            update={
                "run_medians_s": r.run_medians_s[:1],
                "speed": r.speed
                and r.speed.model_copy(update={"calibrate_recipe": "calibrate_host_infer"}),
            }
        )
        for r in s.combinations
    ]
    render_sweep(
        s.model_copy(update={"combinations": rows}),
        tmp_path,
        ReportConfig(formats=["md", "html"], lang=lang),
        run_lang=lang,
    )
    for name in ("sweep_report.md", "sweep_report.html"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert "python -m afbench experiment=calibrate_host_infer" in text, name
        assert "{recipe}" not in text
