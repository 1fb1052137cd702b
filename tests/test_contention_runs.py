"""Contention per run, around the measurement: the command engine records its measured
window's contention in result.json; experiment.rerun_contended runs a contended verdict-phase
run again in a new directory and keeps the old one, marked; collect exposes both, keeps the
replaced run out of the verdict's input, and the report shows the contention beside each run."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from afbench import experiment
from afbench.analysis import contention as C
from afbench.collect import collect
from afbench.config.models import ReportConfig, RunConfig
from afbench.config.verdict import VerdictConfig
from afbench.engines.command import run_command
from afbench.io import write_json_atomic
from afbench.report.render import render
from afbench.runspec import Plan, RunSpec, RunStatus
from afbench.store import RunRow, Summary
from afbench.store.resume import resume_index

WORKERS = Path(__file__).parent / "fault_workers"


def spec_for(
    out: Path,
    run_id: str,
    variant: str,
    *,
    phase: str = "train",
    args: list[str] | None = None,
    steps: int = 6,
) -> RunSpec:
    config = RunConfig.model_validate(
        {
            "model": {"name": "m", "path": "/models/m"},
            "data": {"name": "d", "path": "/data/d.parquet"},
            "scheduler": {
                "workload": "sft",
                "steps": steps,
                "seq_len": 128,
                "measure": {"first_step": 2, "last_step": steps},
            },
            "engine": {
                "name": "command",
                "executable": sys.executable,
                "args": args or [str(WORKERS / "good.py"), "{steps}"],
            },
        }
    )
    return RunSpec(
        run_id=run_id,
        index=1,
        variant=variant,
        phase=phase,
        repeat=1,
        config=config,
        config_hash=run_id.ljust(64, "0")[:64],
        run_dir=str(out / "runs" / run_id),
        timeout_s=60,
        kill_grace_s=2,
    )


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux procfs")
def test_a_command_beside_planted_busy_loops_records_a_contended_window(tmp_path):
    # more busy loops than CPUs, started by the command itself (as the issue planted them):
    # the step process must wait for a CPU whatever else the machine runs
    loops = min((os.cpu_count() or 1) + 1, 17)
    spec = spec_for(
        tmp_path,
        "a-train-r1",
        "a",
        args=[str(WORKERS / "busy_steps.py"), "{steps}", str(loops)],
        steps=4,
    )
    Path(spec.run_dir).mkdir(parents=True)
    rec = run_command(spec, Path(spec.run_dir)).contention
    assert rec.scope == "window" and "steps 2-4" in rec.source
    assert C.MIN_WINDOW_S <= rec.wall_s < 30  # three steps of 40 ms CPU each
    assert rec.run_queue_wait_pct > C.RUN_QUEUE_WAIT_PCT
    contended, reasons = C.judge(rec)
    assert contended and reasons[0][0] == "cont_reason_wait"


QUIET = {
    "scope": "window",
    "source": "test",
    "wall_s": 0.5,
    "run_queue_wait_pct": 2.0,
    "steal_pct": 0.0,
    "cpu_pressure_pct": 40.0,
    "cpu_per_wall": 0.98,
    "threads": 1,
}
BUSY = {**QUIET, "run_queue_wait_pct": 45.0, "cpu_pressure_pct": 100.0, "cpu_per_wall": 0.55}


def fake_launcher(contended_runs: set[str], slow: float = 2.0):
    """A launch_run that writes what a worker writes (log, result.json with a contention
    record: contended for the run ids in ``contended_runs``, whose steps are ``slow`` times
    longer) without starting anything."""
    launched: list[str] = []

    def launch(spec: RunSpec, quiet_s: float = 0.0) -> RunStatus:
        run_dir = Path(spec.run_dir)
        run_dir.mkdir(parents=True)  # never reused: fails if the directory exists
        launched.append(spec.run_id)
        factor = slow if spec.run_id in contended_runs else 1.0
        (run_dir / "stdout.log").write_text(
            "".join(
                f"step: {k}  loss: 1.0  elapsed_time_per_step: {0.01 * factor:.4f}s\n"
                for k in range(1, 7)
            )
        )
        write_json_atomic(
            run_dir / "result.json",
            {
                "schema_version": 1,
                "workload": "sft",
                "engine": "command",
                "contention": BUSY if spec.run_id in contended_runs else QUIET,
            },
        )
        (run_dir / "runspec.json").write_text(spec.model_dump_json())
        st = RunStatus(
            run_id=spec.run_id,
            status="OK",
            exit_code=0,
            wall_s=0.1,
            config_hash=spec.config_hash,
            lock_wait_s=0.0,
        )
        write_json_atomic(run_dir / "status.json", st.model_dump())
        return st

    return launch, launched


def make_plan(out: Path, rerun_contended: int) -> Plan:
    runs = [spec_for(out, "a-train-r1", "a"), spec_for(out, "b-train-r1", "b")]
    runs[1] = runs[1].model_copy(update={"index": 2})
    return Plan(
        experiment="t",
        baseline="a",
        variants=["a", "b"],
        phases=["train"],
        rounds=1,
        skip_policy="per_variant",
        verdict_phase="train",
        profile_phase=None,
        runs=runs,
        rerun_contended=rerun_contended,
    )


@pytest.fixture
def rerun_out(tmp_path, monkeypatch):
    """A two-variant plan whose first baseline run is contended and its rerun is not."""
    launch, launched = fake_launcher({"a-train-r1"})
    monkeypatch.setattr(experiment, "launch_run", launch)
    plan = make_plan(tmp_path, rerun_contended=1)
    write_json_atomic(tmp_path / "plan.json", plan.model_dump(mode="json"))
    statuses = experiment.execute_plan(plan, plan_path=tmp_path / "plan.json")
    return tmp_path, statuses, launched


def test_a_contended_verdict_run_is_run_again_in_a_new_directory_and_the_old_one_is_marked(
    rerun_out,
):
    out, statuses, launched = rerun_out
    assert launched == ["a-train-r1", "a-train-r1-rerun1", "b-train-r1"]
    plan = Plan.model_validate_json((out / "plan.json").read_text())
    assert [r.run_id for r in plan.runs] == ["a-train-r1-rerun1", "b-train-r1"]
    (rerun,) = plan.reruns
    assert (rerun.replaced.run_id, rerun.by) == ("a-train-r1", "a-train-r1-rerun1")
    assert rerun.reasons[0].key == "cont_reason_wait" and rerun.reasons[0].args["wait"] == 45.0
    assert rerun.reasons[0].text.startswith("waited for a CPU 45%")
    old = json.loads((out / "runs" / "a-train-r1" / "status.json").read_text())
    assert old["replaced_by"] == "a-train-r1-rerun1"
    assert old["reason"]["key"] == "run_replaced_contended"
    assert old["reason"]["args"]["run"] == "a-train-r1-rerun1"
    assert old["reason"]["text"].startswith("contended (waited for a CPU 45%")
    assert statuses["a-train-r1-rerun1"] == statuses["b-train-r1"] == "OK"
    # resume never copies the contended run
    index = resume_index(out)
    assert index["a-train-r1".ljust(64, "0")[:64]].name == "a-train-r1-rerun1"


def test_the_progress_count_and_eta_count_the_rerun(tmp_path, monkeypatch, caplog):
    launch, _ = fake_launcher({"a-train-r1"})
    monkeypatch.setattr(experiment, "launch_run", launch)
    caplog.set_level("INFO", logger=experiment.log.name)
    experiment.execute_plan(make_plan(tmp_path, rerun_contended=1))
    lines = [r.getMessage() for r in caplog.records]
    counted = [line.split()[:3] for line in lines if line.startswith("[")]
    assert counted == [
        ["[1/3]", "a-train-r1", "OK"],
        ["[2/3]", "a-train-r1-rerun1", "OK"],
        ["[3/3]", "b-train-r1", "OK"],
    ]
    assert "replaced by a-train-r1-rerun1" in next(x for x in lines if x.startswith("[1/3]"))
    (eta,) = [x for x in lines if "more run(s)" in x]
    assert "for 1 more run(s)" in eta and "a rerun for each contended run" in eta


def test_collect_keeps_the_replaced_run_as_a_row_but_out_of_the_verdict(rerun_out):
    out, _, _ = rerun_out
    col = collect(out)
    rows = col.runs.set_index("run_id")
    assert list(col.runs.run_id) == ["a-train-r1", "a-train-r1-rerun1", "b-train-r1"]
    assert bool(rows.loc["a-train-r1", "contended"]) is True
    assert rows.loc["a-train-r1", "replaced_by"] == "a-train-r1-rerun1"
    assert rows.loc["a-train-r1-rerun1", "rerun_of"] == "a-train-r1"
    assert bool(rows.loc["a-train-r1-rerun1", "contended"]) is False
    assert rows.loc["a-train-r1", "contention_reasons"].startswith("waited for a CPU 45%")
    assert set(col.window_steps) == {"a-train-r1-rerun1", "b-train-r1"}
    assert col.reasons["a-train-r1"].key == "run_replaced_contended"
    assert "a-train-r1-rerun1" not in col.reasons  # an OK run has no reason
    assert col.results["b-train-r1"].contention.run_queue_wait_pct == 2.0


def test_no_rerun_when_rerun_contended_is_zero_or_the_run_is_quiet(tmp_path, monkeypatch):
    launch, launched = fake_launcher({"a-train-r1"})
    monkeypatch.setattr(experiment, "launch_run", launch)
    plan = make_plan(tmp_path, rerun_contended=0)
    experiment.execute_plan(plan)
    assert launched == ["a-train-r1", "b-train-r1"]


def test_a_run_contended_every_time_is_rerun_at_most_rerun_contended_times(tmp_path, monkeypatch):
    launch, launched = fake_launcher({"a-train-r1", "a-train-r1-rerun1", "a-train-r1-rerun2"})
    monkeypatch.setattr(experiment, "launch_run", launch)
    plan = make_plan(tmp_path, rerun_contended=2)
    write_json_atomic(tmp_path / "plan.json", plan.model_dump(mode="json"))
    experiment.execute_plan(plan, plan_path=tmp_path / "plan.json")
    assert launched == ["a-train-r1", "a-train-r1-rerun1", "a-train-r1-rerun2", "b-train-r1"]
    saved = Plan.model_validate_json((tmp_path / "plan.json").read_text())
    assert [r.by for r in saved.reruns] == ["a-train-r1-rerun1", "a-train-r1-rerun2"]
    # the runs table lists them in launch order, each replaced one before its rerun
    assert list(collect(tmp_path).runs.run_id) == [
        "a-train-r1",
        "a-train-r1-rerun1",
        "a-train-r1-rerun2",
        "b-train-r1",
    ]


def test_the_runs_table_shows_each_runs_contention_in_both_languages(tmp_path):
    rows = [
        RunRow(
            run_id="a-train-r1",
            variant="a",
            phase="train",
            repeat=1,
            status="OK",
            contended=True,
            run_queue_wait_pct=34.0,
            cpu_pressure_pct=100.0,
            steal_pct=0.0,
            cpu_per_wall=0.52,
            threads=2,
            replaced_by="a-train-r1-rerun1",
        ),
        RunRow(
            run_id="a-train-r1-rerun1",
            variant="a",
            phase="train",
            repeat=1,
            status="OK",
            contended=False,
            run_queue_wait_pct=3.0,
            steal_pct=0.0,
            cpu_per_wall=0.98,
            rerun_of="a-train-r1",
        ),
        RunRow(run_id="b-train-r1", variant="b", phase="train", repeat=1, status="OK"),
    ]
    summary = Summary(experiment="t", baseline="a", runs=rows)
    (md,) = render(summary, tmp_path, ReportConfig(formats=["md"]))
    text = md.read_text()
    assert (
        "CPU wait 34%, CPU pressure 100%, steal 0%, CPU/wall 0.52 of 2 threads: contended; "
        "replaced by a-train-r1-rerun1"
    ) in text
    assert "CPU wait 3%, steal 0%, CPU/wall 0.98: quiet; rerun of a-train-r1" in text
    assert "| `b-train-r1` |" in text and "| n/a |" in text  # not measured
    (html,) = render(summary, tmp_path, ReportConfig(formats=["html"], lang="zh"))
    assert "CPU 等待 34%" in html.read_text() and "有争用" in html.read_text()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux procfs")
def test_the_builtin_window_samples_contention_at_its_first_and_last_step(tmp_path):
    import contextlib

    import torch

    from afbench.backends import cpu as cpu_backend
    from afbench.config.models import StepWindow
    from afbench.engines import efficiency
    from afbench.engines.distributed import DistInfo
    from afbench.engines.metrics import MetricsWriter

    with contextlib.closing(MetricsWriter(tmp_path / "metrics.jsonl")) as metrics:
        window = efficiency.MeasuredWindow(
            cpu_backend.CpuBackend(), StepWindow(first_step=2, last_step=3), metrics, DistInfo()
        )
        for step in (1, 2, 3):
            window.before_step(step)
            torch.ones(256, 256) @ torch.ones(256, 256)
            window.after_step(step, 0.01)
        rec = window.result_fields()["contention"]
    assert rec["scope"] == "window" and rec["source"].endswith("steps 2-3")
    assert rec["threads"] == torch.get_num_threads()
    assert rec["wall_s"] > 0 and rec["cpu_s"] is not None
    assert rec["run_queue_wait_pct"] is not None and 0 <= rec["run_queue_wait_pct"] <= 100


def test_rerun_contended_defaults_to_one_and_is_bounded_0_to_5():
    from pydantic import ValidationError

    from afbench.config.models import ExperimentConfig

    assert ExperimentConfig().rerun_contended == 1
    assert ExperimentConfig(rerun_contended=0).rerun_contended == 0
    for bad in (-1, 6):
        with pytest.raises(ValidationError, match="rerun_contended"):
            ExperimentConfig(rerun_contended=bad)


@pytest.mark.parametrize("rerun", [0, 1])
def test_contention_reasons_are_worded_by_the_reports_language(tmp_path, monkeypatch, rerun):
    from afbench.report.render import build_report

    # a contended baseline run: set aside in the verdict (rerun=0), or replaced by a rerun
    # whose status.json reason names the measures (rerun=1)
    launch, _ = fake_launcher({"a-train-r1"})
    monkeypatch.setattr(experiment, "launch_run", launch)
    plan = make_plan(tmp_path, rerun_contended=rerun)
    write_json_atomic(tmp_path / "plan.json", plan.model_dump(mode="json"))
    experiment.execute_plan(plan, plan_path=tmp_path / "plan.json")
    build_report(tmp_path, ReportConfig(formats=["md"]))
    summary = build_report(tmp_path, ReportConfig(formats=["md"], lang="zh"))
    en = (tmp_path / "report.md").read_text()
    zh = (tmp_path / "report.zh.md").read_text()
    assert "waited for a CPU 45% of the window > 10%" in en
    assert "等待 CPU 的时间占窗口的 45% > 10%" in zh and "waited for a CPU" not in zh
    if rerun:
        assert "资源争用（等待 CPU 的时间占窗口的 45% > 10%）：已由 a-train-r1-rerun1 替代" in zh
    else:
        (aside,) = summary.comparisons[0].speed.set_aside
        assert aside.detail[0].key == "run_reason"  # structured: key and numbers, not English
        assert aside.detail[0].args["reason"][0]["args"]["wait"] == 45.0
        assert "a-train-r1：等待 CPU 的时间占窗口的 45% > 10%" in zh


def test_the_judges_reasons_are_codes_with_numbers_worded_by_the_catalog():
    from afbench.messages import labels, render, say

    # judge returns catalog keys and numbers, never English (analysis imports no catalog)
    record = {
        **BUSY,
        "steal_pct": 6.0,
        "run_queue_wait_pct": None,
        "cpu_of_threads_pct": 26.0,
        "threads": 2,
        "cpu_per_wall": 0.52,
    }
    _, reasons = C.judge(record)
    assert [code for code, _ in reasons] == [
        "cont_reason_steal",
        "cont_reason_pressure",
        "cont_reason_cpu_share",
    ]
    assert reasons[0][1] == {"steal": 6.0, "limit": C.STEAL_PCT}
    assert C.judge({**QUIET, "wall_s": 0.05})[1][0][0] == "cont_reason_short"
    zh = labels("zh")
    for code, values in reasons:
        m = say(code, **values)
        assert re.search(r"[\u4e00-\u9fff]", render(m, zh)), code
    assert say(*reasons[2][:1], **reasons[2][1]).text == "CPU/wall 0.52 of 2 thread(s) = 26% < 75%"


def _three_rounds(tmp_path, monkeypatch, contended):
    launch, _ = fake_launcher(contended, slow=1.05)
    monkeypatch.setattr(experiment, "launch_run", launch)
    runs = [
        spec_for(tmp_path, f"{v}-train-r{k}", v).model_copy(
            update={"repeat": k, "index": 2 * k - (v == "a")}
        )
        for k in (1, 2, 3)
        for v in "ab"
    ]
    plan = make_plan(tmp_path, rerun_contended=0).model_copy(update={"runs": runs, "rounds": 3})
    write_json_atomic(tmp_path / "plan.json", plan.model_dump(mode="json"))
    experiment.execute_plan(plan, plan_path=tmp_path / "plan.json")
    return collect(tmp_path)


def test_with_contention_keep_a_pair_contended_on_both_sides_decides_and_is_named(
    tmp_path, monkeypatch
):
    from afbench.compare import compare_pair, side, workload_of

    # both runs of round 2 measured contended (5% slower: no outlier): contention balanced
    # across the pair's sides, so verdict.contention=keep lets it decide, and says so
    col = _three_rounds(tmp_path, monkeypatch, {"a-train-r2", "b-train-r2"})
    base = side(col, "a", "train", workload_of(col))
    kept = compare_pair(
        col, base, "b", ReportConfig(), VerdictConfig(contention="keep"), 1e-3, False
    )
    (msg,) = [m for m in kept.caveat_msgs if m.key == "caveat_contention_kept"]
    assert msg.args["runs"] == "a-train-r2, b-train-r2" and "verdict.contention=keep" in msg.text
    assert kept.speed.n_pairs == 3  # it decided with the contended pair
    aside = compare_pair(col, base, "b", ReportConfig(), VerdictConfig(), 1e-3, False)
    assert aside.speed.n_pairs == 2
    assert not [m for m in aside.caveat_msgs if m.key == "caveat_contention_kept"]


def test_with_contention_keep_a_run_contended_on_one_side_of_its_pair_never_decides(
    tmp_path, monkeypatch
):
    from afbench.compare import compare_pair, side, workload_of

    # issue 34: every contended run on the baseline's side read AF_ON_FASTER under keep
    col = _three_rounds(tmp_path, monkeypatch, {"a-train-r2"})
    base = side(col, "a", "train", workload_of(col))
    kept = compare_pair(
        col, base, "b", ReportConfig(), VerdictConfig(contention="keep"), 1e-3, False
    )
    assert kept.verdict == "INCONCLUSIVE" and kept.speed.ci_low_pct is None
    assert kept.speed.no_interval_reason == "one_sided_contention"
    (a,) = kept.speed.set_aside
    assert (a.pair, a.side, a.reason) == (2, "baseline", "contended")
    assert a.detail[0].args["run"] == "a-train-r2"  # the one-sided run is named
    # the tables rest on the pairs left, the same runs as the verdict's
    assert kept.baseline.runs_used == ["a-train-r1", "a-train-r3"]
    assert kept.variant.runs_used == ["b-train-r1", "b-train-r3"]
    assert kept.baseline.runs_basis == "verdict"
