"""Users may point report.template_dir at their own templates; a bad folder names the key."""

from __future__ import annotations

import pytest

from afbench.config.models import ReportConfig
from afbench.errors import ConfigError
from afbench.report.render import render
from afbench.schema import SCHEMA_VERSION
from afbench.store import Summary, read_summary


def test_user_template_dir_overrides_the_shipped_template(tmp_path):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "report.md.j2").write_text(
        "custom {{ s.experiment }} {{ L.verdict }} v{{ s.schema_version }}\n"
    )
    cfg = ReportConfig(template_dir=str(tmp_path / "tpl"), formats=["md"], lang="zh")
    (path,) = render(Summary(experiment="exp1"), tmp_path, cfg)
    assert path.read_text() == f"custom exp1 结论 v{SCHEMA_VERSION}\n"


def test_missing_template_dir_is_rejected_before_anything_runs(compose_cfg, tmp_path):
    from afbench.config import validate_config

    with pytest.raises(ConfigError, match=r"report\.template_dir: .* is not a folder"):
        validate_config(compose_cfg(f"report.template_dir={tmp_path / 'nope'}"))


def test_template_dir_removed_before_rendering_is_a_config_error(tmp_path):
    cfg = ReportConfig.model_construct(
        **{**ReportConfig().model_dump(), "template_dir": str(tmp_path / "gone"), "formats": ["md"]}
    )
    with pytest.raises(ConfigError, match="report.template_dir"):
        render({"experiment": "x"}, tmp_path, cfg)


def test_compiled_templates_are_cached_between_invocations_and_an_edit_recompiles(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("AFBENCH_CACHE_DIR", str(tmp_path / "cache"))
    tpl = tmp_path / "tpl"
    tpl.mkdir()
    (tpl / "report.md.j2").write_text("first {{ s.experiment }}\n")
    cfg = ReportConfig(template_dir=str(tpl), formats=["md"])
    (path,) = render(Summary(experiment="e"), tmp_path, cfg)
    assert path.read_text() == "first e\n"
    # a user's template compiles in the sandbox, to its own cache: code the plain environment
    # compiled (calls unchecked) is never loaded into the sandbox
    assert not list((tmp_path / "cache" / "jinja").glob("*.cache"))
    cached = sorted((tmp_path / "cache" / "jinja-sandbox").glob("*.cache"))
    assert len(cached) == 1  # the user's template, compiled once and stored
    first = cached[0].read_bytes()
    (tpl / "report.md.j2").write_text("second {{ s.experiment }}\n")  # same name, new source
    (path,) = render(Summary(experiment="e"), tmp_path, cfg)
    assert path.read_text() == "second e\n"  # the checksum changed: recompiled, not reused
    assert cached[0].read_bytes() != first  # and the stored code replaced


@pytest.mark.parametrize("cache_dir", ["", "unwritable"])
def test_no_cache_folder_means_compiling_every_time_not_an_error(tmp_path, monkeypatch, cache_dir):
    if cache_dir:
        blocked = tmp_path / "blocked"
        blocked.write_text("a file where the cache folder would go")
        cache_dir = str(blocked / "sub")
    monkeypatch.setenv("AFBENCH_CACHE_DIR", cache_dir)
    (path,) = render(Summary(experiment="e"), tmp_path, ReportConfig(formats=["md"]))
    assert "e" in path.read_text()


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_the_summary_tables_stop_reason_is_worded_in_the_reports_language(tmp_path, fmt):
    from pathlib import Path

    stored = Path(__file__).parent / "fixtures" / "results" / "v1" / "summary.json"
    summary = read_summary(stored)  # a v1 file, read through its upgrades
    summary.comparisons[0].speed.stop_reason = "precision_reached"
    (zh,) = render(summary, tmp_path, ReportConfig(formats=[fmt], lang="zh"))
    assert "达到精度" in zh.read_text() and "precision_reached" not in zh.read_text()


def test_the_uniform_slowdown_note_is_worded_in_the_reports_language(tmp_path):
    from pathlib import Path

    from afbench.messages import say

    stored = Path(__file__).parent / "fixtures" / "results" / "v1" / "summary.json"
    summary = read_summary(stored)  # a v1 file, read through its upgrades
    values = {"ratio": 1.9, "similar": 12, "ops": 14, "side": "fused"}
    note = say("uniform_slowdown_note", **values)
    # a note compare makes now (key and numbers), and one an older summary holds in English
    summary.kernel_notes = {"fused": note, "plain_copy": note.text}
    (tmp_path / "en").mkdir()
    (tmp_path / "zh").mkdir()
    (en,) = render(summary, tmp_path / "en", ReportConfig(formats=["md"]))
    assert en.read_text().count(note.text) == 2
    (zh,) = render(summary, tmp_path / "zh", ReportConfig(formats=["md"], lang="zh"))
    text = zh.read_text()
    assert text.count("在 14 个启动次数未变的算子中，有 12 个一致变慢 x1.90") == 1
    assert text.count(note.text) == 1  # the older summary's English: shown as written


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_a_single_run_report_shows_its_step_time(tmp_path, fmt):
    # one variant, no comparison: the table showed its headers and no row (newcomer trial)
    from afbench.store import RunRow

    runs = [
        RunRow(
            run_id="baseline-run-r1",
            variant="baseline",
            phase="run",
            repeat=1,
            status="OK",
            mean_step_s=0.00116,
            tokens_per_s=880.0,
            first_step_s=0.5,
        ),
        RunRow(
            run_id="baseline-run-r1-old",
            variant="baseline",
            phase="run",
            repeat=1,
            status="OK",
            mean_step_s=0.9,
            replaced_by="baseline-run-r1",
        ),
    ]
    summary = Summary(experiment="single", baseline="baseline", verdict_phase="run", runs=runs)
    (out,) = render(summary, tmp_path, ReportConfig(formats=[fmt]))
    text = out.read_text()
    assert "0.0012" in text and "880.0" in text
    assert "0.9000" not in text  # a replaced (contended) run is not the run's step time


@pytest.mark.parametrize(
    "calibration, says",
    [
        (None, "Without a host calibration, one round gives no verdict"),
        (
            {"kind": "cpu|k", "spread_pct": 3.0, "df": 23, "n_pairs": 24},
            "decided with this host's calibration",
        ),
    ],
)
def test_the_one_round_caveat_says_whether_a_calibration_decided(tmp_path, calibration, says):
    side = {"name": "a", "statuses": ["OK"]}
    speed = {"decision": "INCONCLUSIVE", "design": "one_round", "calibration": calibration}
    summary = Summary.model_validate(
        {
            "experiment": "e",
            "caveat": "one_round",
            "comparisons": [
                {
                    "baseline": side,
                    "variant": {**side, "name": "b"},
                    "phase": "train",
                    "workload": "sft",
                    "verdict": "INCONCLUSIVE",
                    "verdict_line": "x",
                    "speed": speed,
                }
            ],
        }
    )
    (path,) = render(summary, tmp_path, ReportConfig(formats=["md"]))
    text = path.read_text()
    assert says in text
    assert ("Without a host calibration" in text) == (calibration is None)
