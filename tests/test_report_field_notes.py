"""Field shapes the report must explain (issue 23 item 4): torch.profiler's step labels are
not training steps. On copies of the stored fixture directory (tests/fixtures/results/v1)
with a real torch.profiler trace (tests/fixtures/traces, written by torch 2.13 with
schedule(wait=1, warmup=2, active=3): training steps 4-6 labelled ProfilerStep#3-#5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from afbench.config.models import ReportConfig
from afbench.report.render import build_report

FIXTURES = Path(__file__).parent / "fixtures"
TRACE = FIXTURES / "traces" / "torch_profiler_wait1_warmup2_active3.json"


def with_trace(tmp_path: Path, window: dict | None = None) -> Path:
    """The v1 directory, its baseline profile run holding the real trace; ``window`` replaces
    every profile run's profiler window in plan.json."""
    out = tmp_path / "v1"
    shutil.copytree(FIXTURES / "results" / "v1", out)
    shutil.copy(TRACE, out / "runs" / "plain-profile-r1" / "profile" / "trace.json")
    if window:
        plan = json.loads((out / "plan.json").read_text())
        for run in plan["runs"]:
            run["config"]["optimization"]["profiler_window"].update(window)
        (out / "plan.json").write_text(json.dumps(plan))
    return out


def report(out: Path, lang: str = "en") -> str:
    """The Markdown report in ``lang`` (the fixture ran in English: zh is report.zh.md)."""
    build_report(out, ReportConfig(formats=["md"], lang=lang))
    return (out / ("report.md" if lang == "en" else f"report.{lang}.md")).read_text(
        encoding="utf-8"
    )


def test_the_report_says_which_training_steps_the_profiler_labels_are(tmp_path):
    out = with_trace(tmp_path, {"first_step": 4, "last_step": 6, "warmup_steps": 2})
    summary = build_report(out, ReportConfig(formats=["md"]))
    p = summary.profiling[0]
    assert p.step_labels == [3, 4, 5]
    assert p.labels_msg.args["wait"] == 1 and p.labels_msg.args["warmup"] == 2
    text = (out / "report.md").read_text(encoding="utf-8")
    assert (
        "torch.profiler labels these steps ProfilerStep#3–#5 "
        "(`runs/plain-profile-r1/profile/trace.json`): they are training steps 4–6. "
        "The label counts the profiler's own steps from 0, so afbench numbers the steps by "
        "the schedule (wait 1, warmup 2, active 3), not by the label."
    ) in text
    zh = report(out, "zh")
    assert "ProfilerStep#3–#5" in zh and "训练第 4–6 步" in zh
    assert "torch.profiler labels" not in zh


def test_labels_of_a_users_own_schedule_are_mapped_to_training_steps(tmp_path):
    # the fixture's window is training steps 3-5 (ProfilerStep#2-#4); the trace was recorded
    # by a user's own schedule(wait=1, warmup=2, active=3): #3-#5, training steps 4-6
    text = report(with_trace(tmp_path))
    assert (
        "The trace `runs/plain-profile-r1/profile/trace.json` labels its steps "
        "ProfilerStep#3–#5: they are training steps 4–6, recorded by the run's own "
        "profiler schedule (1 cycle(s) of 3 active step(s), the first after 3 unrecorded "
        "step(s): skip_first + wait + warmup), not by the profiler window (training steps "
        "3–5, ProfilerStep#2–#4)."
    ) in text
    assert "训练第 4–6 步" in report(with_trace(tmp_path / "zh"), "zh")


def test_labels_of_a_repeating_schedule_are_mapped_cycle_by_cycle(tmp_path):
    # relabelled as a schedule(wait=2, warmup=0, active=2, repeat=2) cut short records them:
    # #2-#3 and #6, training steps 3-4 and 7
    out = with_trace(tmp_path)
    trace = out / "runs" / "plain-profile-r1" / "profile" / "trace.json"
    text = trace.read_text()
    for old, new in (("#3", "#2"), ("#4", "#3"), ("#5", "#6")):
        text = text.replace(f'"ProfilerStep{old}"', f'"ProfilerStep{new}"')
    trace.write_text(text)
    assert (
        "they are training steps 3–4, 7, recorded by the run's own profiler schedule "
        "(2 cycle(s) of 2 active step(s), the first after 2 unrecorded step(s)"
    ) in report(out)


def test_label_stretches_are_the_active_periods_of_the_schedules_cycles():
    from afbench.analysis.traces import label_stretches, training_steps_of

    # torch's schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2): counters 3-4, 7-8
    schedule = {"skip_first": 1, "wait": 1, "warmup": 1, "active": 2, "repeat": 2}
    labels = [t - 1 for t in training_steps_of(4, schedule)]
    assert labels == [3, 4, 7, 8]
    assert label_stretches(labels) == [(3, 4), (7, 8)]
    assert label_stretches([5]) == [(5, 5)] and label_stretches([]) == []


def test_no_trace_no_label_sentence(tmp_path):
    out = tmp_path / "v1"
    shutil.copytree(FIXTURES / "results" / "v1", out)
    assert "ProfilerStep#" not in report(out)


def test_a_rerender_in_another_language_is_written_beside_the_runs_own_report(tmp_path):
    from afbench.report.__main__ import main as report_main

    out = tmp_path / "v1"
    shutil.copytree(FIXTURES / "results" / "v1", out)
    (out / "report.html").write_text("the run's own HTML report")
    english = (out / "report.md").read_text(encoding="utf-8")
    assert report_main([str(out), "--lang", "zh"]) == 0
    assert (out / "report.md").read_text(encoding="utf-8") == english
    assert (out / "report.html").read_text() == "the run's own HTML report"
    zh_md = (out / "report.zh.md").read_text(encoding="utf-8")
    assert zh_md.startswith("# afbench 报告") and (out / "report.zh.html").is_file()
    # afbench's own sentences are Chinese: parity of the failed round, profiling, parameters
    for text in (
        "这一轮中有运行未成功",
        "变体的 profile 运行失败",
        "两侧都恰好各包含一次步",
        "模型 ",
        "profiler 步 ",
    ):
        assert text in zh_md, text
    for english_sentence in (
        "a run of the pair did not succeed",
        "profile run failed",
        "both sides hold",
        "has the same settings",
        "profiler steps",
    ):
        assert english_sentence not in zh_md, english_sentence
    # asking for the language the directory ran with rewrites its own report
    assert report_main([str(out), "--lang", "en"]) == 0
    assert (out / "report.html").read_text() != "the run's own HTML report"
    assert not (out / "report.en.md").exists()
