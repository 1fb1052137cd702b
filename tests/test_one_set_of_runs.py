"""issue 34: every number of a report rests on the runs its verdict used, and says which: the
speed, tokens/s, memory and TFLOPs tables, the history record; with no pair left, the quiet
runs' numbers labelled as no verdict; a contended profile run is rerun and never makes a
comparison COMPARABLE; a rerun contended again is named so."""

from __future__ import annotations

import dataclasses
import json
import logging
from types import SimpleNamespace as NS

from afbench import experiment
from afbench.collect import collect
from afbench.config.models import ReportConfig
from afbench.io import write_json_atomic
from afbench.report.render import build_report, labels
from afbench.store import ProfilingComparison
from test_contention_runs import BUSY, fake_launcher, make_plan, spec_for


def _rounds(tmp_path, monkeypatch, contended, n=3, rerun=0):
    launch, launched = fake_launcher(contended)
    monkeypatch.setattr(experiment, "launch_run", launch)
    runs = [
        spec_for(tmp_path, f"{v}-train-r{k}", v).model_copy(
            update={"repeat": k, "index": 2 * k - (v == "a")}
        )
        for k in range(1, n + 1)
        for v in "ab"
    ]
    plan = make_plan(tmp_path, rerun_contended=rerun).model_copy(update={"runs": runs, "rounds": n})
    write_json_atomic(tmp_path / "plan.json", plan.model_dump(mode="json"))
    experiment.execute_plan(plan, plan_path=tmp_path / "plan.json")
    return launched


def test_the_tables_rest_on_the_verdicts_runs_and_say_which(tmp_path, monkeypatch):
    # a-train-r2 contended (2x slower): the verdict sets its pair aside; the mean step time
    # and the history record left it in before (the report's 1.27x against the history's)
    _rounds(tmp_path, monkeypatch, {"a-train-r2"})
    summary = build_report(tmp_path, ReportConfig(formats=["md"]))
    (c,) = summary.comparisons
    assert [a.pair for a in c.speed.set_aside] == [2]
    assert c.baseline.runs_used == ["a-train-r1", "a-train-r3"]
    assert c.variant.runs_used == ["b-train-r1", "b-train-r3"]
    assert c.baseline.runs_basis == c.variant.runs_basis == "verdict"
    assert c.baseline.mean_step_s == c.variant.mean_step_s  # 0.01 s each: no 2x run in it
    md = (tmp_path / "report.md").read_text()
    rests = (
        "Runs behind these numbers: b vs a: the runs of the rounds the verdict rests on "
        "(a-train-r1, a-train-r3, b-train-r1, b-train-r3)"
    )
    assert md.count(rests) >= 2  # under the speed table and under the memory/TFLOPs table
    from afbench.history.records import extract
    from afbench.store import OutDir

    rec = {v.record["variant"]: v.record for v in extract(OutDir(tmp_path)).variants}
    assert rec["a"]["mean_step_s"] == rec["b"]["mean_step_s"]  # the 2x run is not in it
    assert rec["a"]["n_runs_ok"] == 3  # every run still listed


def test_with_no_pair_left_the_quiet_runs_are_shown_labelled_as_no_verdict(tmp_path, monkeypatch):
    _rounds(tmp_path, monkeypatch, {"a-train-r1"}, n=1)
    summary = build_report(tmp_path, ReportConfig(formats=["md"]))
    (c,) = summary.comparisons
    assert c.speed.no_interval_reason == "no_pairs_left"
    assert (c.variant.runs_basis, c.variant.runs_used) == ("quiet", ["b-train-r1"])
    assert c.variant.mean_step_s is not None  # the quiet run's number, shown
    assert c.baseline.runs_basis == "all"  # its only run was contended: said beside it
    md = (tmp_path / "report.md").read_text()
    assert "b no round decided, so the runs not measured as contended: not a verdict" in md
    assert "a every OK run, contended ones included" in md


def test_a_rerun_contended_again_is_named_so(tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger=experiment.log.name):
        launched = _rounds(tmp_path, monkeypatch, {"a-train-r1", "a-train-r1-rerun1"}, n=1, rerun=1)
    assert launched == ["a-train-r1", "a-train-r1-rerun1", "b-train-r1"]
    assert "a-train-r1-rerun1 (rerun of a-train-r1) was contended again" in caplog.text
    build_report(tmp_path, ReportConfig(formats=["md"]))
    row = next(
        line
        for line in (tmp_path / "report.md").read_text().splitlines()
        if line.startswith("| 2 | `a-train-r1-rerun1`")
    )
    assert labels("en")["contended_again"] in row


def test_a_contended_profile_run_is_rerun_and_its_comparison_is_not_comparable(
    tmp_path, monkeypatch
):
    from afbench.compare import _contended_profile

    launch, launched = fake_launcher({"a-profile-r1"})
    monkeypatch.setattr(experiment, "launch_run", launch)
    plan = make_plan(tmp_path, rerun_contended=1)
    profile = [
        spec_for(tmp_path, f"{v}-profile-r1", v, phase="profile").model_copy(
            update={"index": 3 + (v == "b")}
        )
        for v in "ab"
    ]
    plan = plan.model_copy(
        update={
            "runs": [*plan.runs, *profile],
            "phases": ["train", "profile"],
            "profile_phase": "profile",
        }
    )
    write_json_atomic(tmp_path / "plan.json", plan.model_dump(mode="json"))
    experiment.execute_plan(plan, plan_path=tmp_path / "plan.json")
    assert "a-profile-r1-rerun1" in launched  # rerun like a train run
    col = collect(tmp_path)
    ok = ProfilingComparison(variant="b", baseline="a", phase="profile", status="COMPARABLE")
    assert _contended_profile(col, ok) == ok  # the rerun was quiet
    # a profile run still contended (no rerun left): its comparison says so
    busy = {**col.results, "b-profile-r1": NS(contention=BUSY)}
    col = dataclasses.replace(col, results=busy)
    got = _contended_profile(col, ok)
    assert got.status == "INCOMPARABLE"
    assert got.reason.startswith("a profile run was measured as contended")
    assert "b-profile-r1: waited for a CPU 45%" in got.reason
    assert json.loads(got.model_dump_json())["reason_msg"]["key"] == "clauses"


def test_a_replaced_contended_run_in_the_time_to_first_step_is_said_beside_it(
    tmp_path, monkeypatch
):
    # the contended run's rerun found the kernels it built: its cold first step still counts
    # (a first compile is one however busy the machine), and the report says so
    _rounds(tmp_path, monkeypatch, {"a-train-r1"}, n=1, rerun=1)
    summary = build_report(tmp_path, ReportConfig(formats=["md"]))
    (c,) = summary.comparisons
    assert c.baseline.runs_used == ["a-train-r1-rerun1"]
    assert c.baseline.first_step_set_aside == ["a-train-r1"]
    md = (tmp_path / "report.md").read_text()
    assert (
        "Time to first step of `a` includes a-train-r1, which the verdict set aside: a "
        "run's first step is a compile however busy"
    ) in md
    assert "Time to first step of `b` includes" not in md
