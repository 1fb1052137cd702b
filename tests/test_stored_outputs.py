"""Stored output directories of every summary schema version (tests/fixtures/results, see its
README) still load and re-render to the report they were stored with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from afbench.config.models import ReportConfig
from afbench.errors import OutputError
from afbench.report.render import build_report, labels, render
from afbench.store import SCHEMA_VERSION, OutDir, load_result, read_summary

STORED = Path(__file__).parent / "fixtures" / "results"
VERSIONS = ["v0", "v1", "v2"]


def rebuild(out_dir: Path):
    """build_report with the directory's own report settings, Markdown only (the HTML's
    plots are tested in test_report_html.py and cost seconds here)."""
    stored = OutDir(out_dir).experiment().report  # experiment.json read through its upgrades
    return build_report(out_dir, stored.model_copy(update={"formats": ["md"]}))


def report_text(path: Path) -> list[str]:
    """report.md without its "Generated <time> ..., directory <dir>" line."""
    generated = labels("en")["generated"]
    return [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if not line.startswith(generated)
    ]


@pytest.fixture(params=VERSIONS)
def stored_copy(request, tmp_path) -> tuple[str, Path]:
    copy = tmp_path / request.param
    shutil.copytree(STORED / request.param, copy)
    return request.param, copy


def rebuilt_report(version: str) -> Path:
    """The report a re-render from the run directories gives (today's statistics:
    afbench.verdict): ``report.rebuilt.md``; ``report.md`` is what the stored summary itself
    renders to (the verdicts as they were decided then)."""
    rebuilt = STORED / version / "report.rebuilt.md"
    return rebuilt if rebuilt.is_file() else STORED / version / "report.md"


def test_rerendering_a_stored_directory_reproduces_its_report(stored_copy):
    version, copy = stored_copy
    summary = rebuild(copy)
    assert report_text(copy / "report.md") == report_text(rebuilt_report(version))
    # the fixture holds a failed variant with no numbers: its percentages read "n/a"
    assert "n/a%" not in (copy / "report.md").read_text(encoding="utf-8")
    assert summary.schema_version == SCHEMA_VERSION
    # strict JSON: the failed variant's missing numbers are null, never a bare NaN
    text = (copy / "summary.json").read_text()
    assert (
        json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in summary.json"))[
            "schema_version"
        ]
        == SCHEMA_VERSION
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_stored_experiments_verdict_settings_move_to_the_verdict_section(version):
    # before schema 5 they were experiment.repeats / min_repeats / max_repeats and
    # report.confidence / min_gain_pct / contention; read, they are the verdict section's
    raw = json.loads((STORED / version / "experiment.json").read_text())["config"]
    exp = OutDir(STORED / version).experiment()
    assert "verdict" not in raw and "repeats" in raw["experiment"]
    assert exp.verdict.rounds == raw["experiment"]["repeats"] == 2
    assert exp.verdict.confidence == raw["report"]["confidence"]
    assert exp.verdict.min_rounds == raw["experiment"].get("min_repeats", 3)
    assert exp.verdict.contention == raw["report"].get("contention", "set_aside")
    assert OutDir(STORED / version).plan().rounds == 2  # plan.json's repeats


@pytest.mark.parametrize("version", VERSIONS)
def test_a_stored_summary_renders_its_report_without_the_run_directories(version, tmp_path):
    summary = read_summary(STORED / version / "summary.json")
    render(summary, tmp_path, ReportConfig(formats=["md"]))
    assert report_text(tmp_path / "report.md") == report_text(STORED / version / "report.md")


def numbers(model, fields: tuple[str, ...]) -> dict:
    """The named fields of a model, flattened one level (metrics -> metrics.<key>), for
    pytest.approx."""
    out = {}
    for name, value in model.model_dump(include=set(fields)).items():
        if isinstance(value, dict):
            out.update({f"{name}.{k}": v for k, v in value.items()})
        elif isinstance(value, list):
            out.update({f"{name}[{i}]": v for i, v in enumerate(value)})
        else:
            out[name] = value
    return out


def test_version_0_comparison_keys_become_the_two_sides(tmp_path):
    old = read_summary(STORED / "v0" / "summary.json")
    shutil.copytree(STORED / "v0", tmp_path / "v0")
    new = rebuild(tmp_path / "v0")  # recomputed from the run directories
    side_fields = (
        "name",
        "mean_step_s",
        "repeats_s",
        "first_step_s",
        "step_cv_pct",
        "tokens_per_s",
        "metrics",
        "sanity",
    )
    assert len(old.comparisons) == len(new.comparisons) == 3
    for a, b in zip(old.comparisons, new.comparisons):
        for side in ("baseline", "variant"):
            assert numbers(getattr(a, side), side_fields) == pytest.approx(
                numbers(getattr(b, side), side_fields)
            )
        # v0 computed a "compile cost" for every variant; today only compiling variants
        # (autofuse, graph mode) have one, and this fixture's command-engine variants do not
        assert b.compile.overhead_s is None or (
            b.compile.model_dump() == pytest.approx(a.compile.model_dump())
        )
        # the parity reason's catalog message (afbench.messages) is newer than v0, and its
        # words say "round" where v0's said "pair"
        assert (a.aa, a.reasons, a.parity.model_dump(exclude={"reason_msg", "reason"})) == (
            b.aa,
            b.reasons,
            b.parity.model_dump(exclude={"reason_msg", "reason"}),
        )
        assert (a.parity.reason or "").replace("pair", "round") == (b.parity.reason or "")
        assert b.parity.reason_msg is None or b.parity.reason_msg.text == b.parity.reason
    assert [b.compile.overhead_s for b in new.comparisons] == [None, None, None]
    # the speed is recomputed by today's paired statistics; the stored one keeps v0's keys
    raw = json.loads((STORED / "v0" / "summary.json").read_text())["comparisons"]
    for a, c in zip(old.comparisons, raw):
        assert (a.speed.gain_pct, a.speed.ci_low_pct, a.speed.ci_high_pct, a.speed.kind) == (
            c.get("gain_pct"),
            c.get("gain_ci_low"),
            c.get("gain_ci_high"),
            c["verdict_kind"],
        )
    assert [b.speed.kind for b in new.comparisons] == ["fixed", "fixed", "none"]


def test_result_json_of_versions_0_and_1_loads_upgraded_to_the_current_version():
    raw_old = json.loads((STORED / "v0" / "runs" / "plain-train-r1" / "result.json").read_text())
    raw_new = json.loads((STORED / "v1" / "runs" / "plain-train-r1" / "result.json").read_text())
    assert ("schema_version" in raw_old, raw_new["schema_version"]) == (False, 1)
    old, new = load_result(raw_old), load_result(raw_new)
    assert old.schema_version == new.schema_version == SCHEMA_VERSION
    assert old.first_step_s == new.first_step_s == 3.0
    assert old.argv[-1].endswith("worker.py")  # an engine's own field is kept


def test_a_summary_of_a_newer_schema_is_refused_naming_the_file(tmp_path):
    data = json.loads((STORED / "v1" / "summary.json").read_text())
    (tmp_path / "summary.json").write_text(json.dumps({**data, "schema_version": 99}))
    with pytest.raises(OutputError, match=r"summary\.json: schema_version 99 .* newer afbench"):
        read_summary(tmp_path / "summary.json")


def test_status_json_carries_the_same_schema_version_as_the_other_outputs():
    from afbench.runspec import RunStatus

    status = RunStatus(run_id="a-train-r1", status="OK", exit_code=0, config_hash="0" * 64)
    assert status.schema_version == SCHEMA_VERSION


def original_and_copy(tmp_path: Path) -> tuple[Path, Path]:
    """The stored v1 directory as an ``original`` whose plan names its own run folders (which
    exist), and a ``copy`` of it (``cp -r``): a copy must read only its own folders."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    shutil.copytree(STORED / "v1", original)
    plan = json.loads((original / "plan.json").read_text())
    for run in plan["runs"]:
        run["run_dir"] = str(original / "runs" / run["run_id"])
    (original / "plan.json").write_text(json.dumps(plan))
    shutil.copytree(original, copy)
    return original, copy


def test_a_copied_directory_reads_its_own_runs_while_the_original_still_exists(tmp_path):
    from afbench.collect import collect

    original, copy = original_and_copy(tmp_path)
    result = copy / "runs" / "plain-train-r1" / "result.json"
    result.write_text(json.dumps({**json.loads(result.read_text()), "peak_rss_gib": 3.5}))
    assert collect(copy).results["plain-train-r1"].peak_rss_gib == 3.5
    assert collect(original).results["plain-train-r1"].peak_rss_gib is None


def test_a_run_folder_deleted_in_a_copy_is_missing_there_not_read_from_the_original(tmp_path):
    import subprocess
    import sys

    from afbench.collect import collect

    original, copy = original_and_copy(tmp_path)  # cp -r, then the user deletes one run
    shutil.rmtree(copy / "runs" / "fused-train-r2")
    runs = collect(copy).runs.set_index("run_id")
    assert runs.loc["fused-train-r2", "status"] == "NOT_RUN"
    assert collect(copy).results["fused-train-r2"] is None
    assert collect(original).runs.set_index("run_id").loc["fused-train-r2", "status"] == "OK"
    # the copy's summary.json records the run as OK: the re-render refuses rather than
    # overwrite that verdict with "not run" (and still never reads the original's folder)
    before = {f: (copy / f).read_bytes() for f in ("summary.json", "report.md")}
    proc = subprocess.run(
        [sys.executable, "-m", "afbench.report", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"{copy}/runs/fused-train-r2: missing, but summary.json records it as run" in proc.stderr
    assert str(original) not in proc.stderr
    assert {f: (copy / f).read_bytes() for f in before} == before
    assert (original / "runs" / "fused-train-r2" / "status.json").is_file()  # untouched


def _rerender(out_dir: Path, *args: str):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "afbench.report", str(out_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("lang", [[], ["--lang", "zh"]])
def test_rerendering_a_copy_missing_a_recorded_run_folder_refuses_and_rewrites_nothing(
    tmp_path, lang
):
    copy = tmp_path / "v2"
    shutil.copytree(STORED / "v2", copy)
    shutil.rmtree(copy / "runs" / "fused-train-r1")
    shutil.rmtree(copy / "runs" / "broken-train-r2")  # a FAILED run with its result
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    proc = _rerender(copy, *lang)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"afbench.report: error: {copy}/runs/fused-train-r1, {copy}/runs/broken-train-r2: "
        "missing, but summary.json records them as run; restore the folders (or re-run with "
        f"resume={copy}) — nothing was rewritten"
    ], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before


def test_a_run_the_summary_records_as_never_run_still_rerenders_without_its_folder(tmp_path):
    # an interrupted experiment: summary.json holds the run as NOT_RUN, its folder absent
    copy = tmp_path / "v2"
    shutil.copytree(STORED / "v2", copy)
    summary = json.loads((copy / "summary.json").read_text())
    row = next(r for r in summary["runs"] if r["run_id"] == "fused-train-r2")
    row.update(status="NOT_RUN", exit_code=None)
    (copy / "summary.json").write_text(json.dumps(summary))
    shutil.rmtree(copy / "runs" / "fused-train-r2")
    proc = _rerender(copy)
    assert proc.returncode == 0, proc.stderr
    report = (copy / "report.md").read_text(encoding="utf-8")
    assert "fused-train-r2: not run" in report


def test_a_damaged_calibration_in_experiment_json_is_one_line_naming_the_key(tmp_path):
    import subprocess
    import sys

    copy = tmp_path / "v2"
    shutil.copytree(STORED / "v2", copy)
    exp = json.loads((copy / "experiment.json").read_text())
    exp["calibration"] = {
        "kind": "k",
        "host_id": "h",
        "spread_pct": 3.0,
        "df": 23,
        "n_pairs": 24,
        "baseline_runs": {"step_s": -1, "n_runs": 24, "spread_pct": 3.0, "df": 23},
    }
    (copy / "experiment.json").write_text(json.dumps(exp))
    proc = subprocess.run(
        [sys.executable, "-m", "afbench.report", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        "experiment.json: calibration.baseline_runs.step_s: Input should be greater than 0"
        in proc.stderr
    )


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("spread_pct", -1.0, "calibration.spread_pct: Input should be greater than 0"),
        ("spread_pct", 0.0, "calibration.spread_pct: Input should be greater than 0"),
        ("df", 0.0, "calibration.df: Input should be greater than or equal to 1"),
        # hand-edited types were read as numbers ("3.0" as 3.0, true as 1)
        ("spread_pct", "3.0", "calibration.spread_pct: Input should be a valid number"),
        ("n_pairs", True, "calibration.n_pairs: Input should be a valid integer"),
    ],
)
def test_a_calibration_spread_out_of_range_is_one_line_naming_the_key(
    tmp_path, key, value, message
):
    import subprocess
    import sys

    copy = tmp_path / "v2"
    shutil.copytree(STORED / "v2", copy)
    exp = json.loads((copy / "experiment.json").read_text())
    exp["calibration"] = {
        "kind": "k",
        "host_id": "h",
        "spread_pct": 3.0,
        "df": 23,
        "n_pairs": 24,
        key: value,
    }
    (copy / "experiment.json").write_text(json.dumps(exp))
    proc = subprocess.run(
        [sys.executable, "-m", "afbench.report", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"experiment.json: {message}" in proc.stderr


def test_report_of_a_file_says_it_is_not_a_directory(tmp_path):
    import subprocess
    import sys

    a_file = tmp_path / "summary.json"
    a_file.write_text("{}")
    proc = subprocess.run(
        [sys.executable, "-m", "afbench.report", str(a_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{a_file} is not a directory" in proc.stderr  # it said "does not exist"
    assert a_file.read_text() == "{}"
