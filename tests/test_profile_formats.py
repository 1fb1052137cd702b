"""Every profiler format torch_npu writes, read into one op table keyed by op type and carried
to the store as one typed record (issue 31, item 1).

The fixture folders (tests/fixtures/npu_profiles, written by make_npu_profiles.py) hold the
same launches in each format: kernel_details.csv with and without ``Step Id``,
op_statistic.csv, trace_view.json only, the ``ascend_pytorch_profiler_0.db`` export, and a
graph-mode (npugraph_ex) variant with only step_trace_time.csv. The end-to-end test replays
them through the command engine (tests/fault_workers/npu_profile_replay.py) in one sweep,
one job per format, then re-renders every job and imports the sweep into the history."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from afbench.analysis.kernels import build_kernel_table, kernel_op_type, read_kernel_details
from afbench.analysis.op_table import (
    NO_KERNELS,
    NO_SOURCE,
    UNREADABLE,
    OpRow,
    load_op_table,
    op_rows,
    read_profiler_db,
)
from afbench.store import KernelRow, read_summary

PROFILES = Path(__file__).parent / "fixtures" / "npu_profiles"
WORKER = Path(__file__).parent / "fault_workers" / "npu_profile_replay.py"
FORMATS = ["kernel_details_step", "kernel_details", "op_statistic", "trace_view", "db"]
UNFUSED = {"MatMulV2", "Pow", "ReduceMean", "Adds", "Rsqrt", "Mul", "Add", "Cast"}
FUSED = {"MatMulV2", "AddRmsNorm", "Cast"}


def table_of(fmt: str, variant: str) -> pd.DataFrame:
    found = load_op_table(PROFILES / fmt / variant)
    assert found.problem == "", (fmt, variant, found)
    return found.table


# ------------------------------------------------------------------ readers and the record


def test_the_readers_record_and_the_stores_record_have_the_same_fields():
    assert [f.name for f in dataclasses.fields(OpRow)] == list(KernelRow.model_fields)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_gives_the_same_op_table_keyed_by_op_type(fmt):
    for variant, types in (("af_off", UNFUSED), ("af_on", FUSED)):
        table = table_of(fmt, variant)
        assert set(table["op_type"]) == types, (fmt, variant)
        reference = table_of("kernel_details_step", variant).set_index("op_type")
        mine = table.set_index("op_type").loc[reference.index]
        assert mine["count"].tolist() == reference["count"].tolist()
        assert mine["total_us"].tolist() == pytest.approx(reference["total_us"].tolist())
    # 5 profiled steps of the fused variant: one AddRmsNorm per step, 5.25 us each
    rows = {r.op_type: r for r in op_rows(table_of(fmt, "af_on"))}
    assert rows["AddRmsNorm"].count == 5 and rows["AddRmsNorm"].total_us == pytest.approx(26.25)
    if fmt != "op_statistic":  # the only format that names no kernel
        assert rows["AddRmsNorm"].kernel_names == ("aclnnAddRmsNorm_AddRmsNorm",)


@pytest.mark.parametrize(
    "name, op_type",
    [
        ("aclnnAddRmsNorm_AddRmsNorm", "AddRmsNorm"),
        ("aclnnPowTensorScalar_PowAiCore_Pow", "Pow"),
        ("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2"),
        ("autofused_add_mul_0", "autofused_add_mul_0"),
        ("aclnnFoo", "aclnnFoo"),  # no type part: its own name
    ],
)
def test_aclnn_kernel_names_resolve_to_their_op_type(name, op_type):
    assert kernel_op_type(name) == op_type


def test_a_kernel_details_type_that_names_none_takes_the_kernels_type(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text(
        "Name,Type,Duration(us)\n"
        "aclnnAddRmsNorm_AddRmsNorm,N/A,5.0\n"
        "aclnnAddRmsNorm_AddRmsNorm,AddRmsNorm,5.0\n"
        "aclnnAddRmsNorm_AddRmsNorm,aclnnAddRmsNorm_AddRmsNorm,5.0\n"
    )
    table = read_kernel_details(path)
    assert table["op_type"].tolist() == ["AddRmsNorm"] and table["count"].tolist() == [3]


def test_a_readers_extra_column_never_reaches_the_store():
    table = build_kernel_table(
        pd.DataFrame(
            {
                "op_type": ["Mul", "Mul"],
                "count": [1, 1],
                "total_us": [1.0, 2.0],
                "kernel_names": ["b; a", "a"],
            }
        )
    )
    table["core_type"] = "AI_VECTOR_CORE"  # a column no record knows
    stored = [KernelRow.model_validate(r, from_attributes=True) for r in op_rows(table)]
    assert stored[0].model_dump() == {
        "op_type": "Mul",
        "count": 2,
        "total_us": 3.0,
        "ratio_pct": 100.0,
        "kernel_names": ["a", "b"],
    }


def test_a_table_without_names_concatenated_with_one_with_names_gives_empty_names():
    named = build_kernel_table(
        pd.DataFrame({"op_type": ["Mul"], "count": [1], "total_us": [1.0], "kernel_names": ["m"]})
    )
    plain = build_kernel_table(pd.DataFrame({"op_type": ["Add"], "count": [1], "total_us": [1.0]}))
    rows = op_rows(pd.concat([named, plain], ignore_index=True))
    assert [r.kernel_names for r in rows] == [("m",), ()]


# ------------------------------------------------------------------- no op table, and why


def test_a_graph_mode_profile_without_kernel_files_says_what_it_holds():
    found = load_op_table(PROFILES / "graph_mode" / "af_on")
    assert found.table is None and found.problem == NO_SOURCE
    assert found.detail == "step_trace_time.csv"


def test_a_trace_without_device_kernels_is_no_kernels(tmp_path):
    out = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "trace_view.json").write_text(
        json.dumps(
            [
                {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Python"}},
                {"ph": "X", "name": "ProfilerStep#5", "pid": 1, "tid": 1, "ts": "10.0", "dur": 5},
            ]
        )
    )
    found = load_op_table(tmp_path)
    assert found.problem == NO_KERNELS and found.files == (out / "trace_view.json",)


def test_a_torch_profiler_trace_gives_its_device_kernels_or_says_it_has_none(tmp_path):
    import gzip

    cpu_only = (
        Path(__file__).parent
        / "fixtures"
        / "traces"
        / ("torch_profiler_wait1_warmup2_active3.json")
    )
    (tmp_path / "cpu").mkdir()
    shutil.copy(cpu_only, tmp_path / "cpu" / "trace.json")
    assert load_op_table(tmp_path / "cpu").problem == NO_KERNELS
    # torchtitan's per-rank trace of a CUDA run: its kernels, each its own type
    folder = tmp_path / "cuda" / "iteration_10"
    folder.mkdir(parents=True)
    events = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ampere_sgemm_128x64_tn",
                "pid": 0,
                "tid": 7,
                "ts": 100 + 10 * i,
                "dur": 4,
            }
            for i in range(3)
        ]
    }
    with gzip.open(folder / "rank0_trace.json.gz", "wt", encoding="utf-8") as fh:
        json.dump(events, fh)
    rows = op_rows(load_op_table(tmp_path / "cuda").table)
    assert [(r.op_type, r.count, r.total_us) for r in rows] == [("ampere_sgemm_128x64_tn", 3, 12.0)]


def test_a_file_that_does_not_parse_is_unreadable_with_the_readers_message(tmp_path):
    (tmp_path / "ascend_pytorch_profiler_0.db").write_bytes(b"not sqlite at all" * 100)
    found = load_op_table(tmp_path)
    assert found.problem == UNREADABLE and "not a torch_npu profiler database" in found.detail
    with pytest.raises(ValueError, match="ascend_pytorch_profiler_0.db"):
        read_profiler_db(tmp_path / "ascend_pytorch_profiler_0.db")


def test_a_db_without_the_compute_table_names_the_tables_it_needs(tmp_path):
    path = tmp_path / "ascend_pytorch_profiler_1.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT)")
    with pytest.raises(ValueError, match=r"COMPUTE_TASK_INFO, TASK, STRING_IDS"):
        read_profiler_db(path)


def test_a_db_task_without_an_end_is_named_not_summed(tmp_path):
    source = next((PROFILES / "db" / "af_on").rglob("ascend_pytorch_profiler_0.db"))
    path = tmp_path / source.name
    shutil.copy(source, path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE TASK SET endNs = NULL WHERE globalTaskId = 1")
    with pytest.raises(ValueError, match=r"'aclnnAddRmsNorm_AddRmsNorm' has a startNs/endNs"):
        read_profiler_db(path)


# ------------------------------------------------------------------- end to end, a sweep


def afbench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    recipe = {
        "scheduler": {"steps": 10, "measure": {"first_step": 6, "last_step": 10}},
        "engine": {
            "name": "command",
            "executable": sys.executable,
            "args": [str(WORKER), "{steps}", "{mode}", "{profile_dir}", "{variant}"],
        },
        "experiment": {
            "name": "npu_formats",
            "baseline": "af_off",
            "variants": {"af_off": {}, "af_on": {"optimization": {"autofuse": True}}},
            "phases": {
                "train": {},
                "profile": {
                    "optimization": {
                        "profiler": True,
                        "profiler_window": {"first_step": 6, "last_step": 10},
                    }
                },
            },
            # the planted step times are not wall times: a busy machine must not rerun them
            "rerun_contended": 0,
        },
        "verdict": {"rounds": 1, "contention": "keep"},
    }
    (cwd / "recipes").mkdir(exist_ok=True)
    (cwd / "recipes" / "npu_formats.yaml").write_text(
        "# @package _global_\n" + yaml.safe_dump(recipe, sort_keys=False)
    )
    (cwd / "locks").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(
        AFBENCH_RECIPE_PATH=str(cwd / "recipes"),
        AFBENCH_LOCK_DIR=str(cwd / "locks"),
        AFBENCH_HISTORY_URL=f"sqlite:///{cwd / 'runs.sqlite'}",
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "afbench",
            *args,
            "experiment=npu_formats",
            "backend=cpu",
            "preflight.min_free_gib=0",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("npu_formats")
    proc = afbench(cwd, "-m", f"+engine.env.NPU_PROFILE_FORMAT={','.join(FORMATS)},graph_mode")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    root = next(cwd.glob("multirun/*/*/multirun.yaml")).parent
    jobs = {}
    for job in root.iterdir():
        overrides = job / ".hydra" / "overrides.yaml"
        if overrides.is_file():
            fmt = next(
                o.split("=", 1)[1]
                for o in yaml.safe_load(overrides.read_text())
                if "NPU_PROFILE_FORMAT" in o
            )
            jobs[fmt] = job
    assert set(jobs) == {*FORMATS, "graph_mode"}
    return cwd, root, jobs


@pytest.mark.e2e
@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_ends_in_a_report_whose_op_tables_are_keyed_by_op_type(sweep, fmt):
    _cwd, _root, jobs = sweep
    job = jobs[fmt]
    summary = read_summary(job / "summary.json")
    assert {r.op_type for r in summary.kernels["af_off"]} == UNFUSED
    assert {r.op_type for r in summary.kernels["af_on"]} == FUSED
    diff = [r.op_type for r in summary.kernel_diffs["af_on"]]
    assert diff.count("AddRmsNorm") == 1 and len(diff) == len(set(diff))
    assert summary.fused_evidence["af_on"].fusion_evident
    assert summary.op_table_notes == {}
    if fmt != "op_statistic":
        fused = next(r for r in summary.kernels["af_on"] if r.op_type == "AddRmsNorm")
        assert fused.kernel_names == ["aclnnAddRmsNorm_AddRmsNorm"]
    report = (job / "report.md").read_text(encoding="utf-8")
    assert "| `AddRmsNorm` | 5 | 26.2 |" in report  # the af_on op table's row
    # step_trace_time.csv, where the format has it, makes the profile phase comparable
    status = summary.profiling[0].status
    assert status == (
        "COMPARABLE" if fmt in ("kernel_details_step", "op_statistic") else "UNAVAILABLE"
    ), summary.profiling[0].reason
    if fmt == "kernel_details_step":
        assert [r.step for r in summary.step_device_time["af_on"].rows] == [5, 6, 7, 8, 9]
    # the re-render from the folder alone gives the same op tables
    from afbench.report.__main__ import main as report_main

    before = summary.model_dump(include={"kernels", "kernel_diffs", "op_table_notes"})
    (job / "summary.json").unlink()
    assert report_main([str(job)]) == 0
    again = read_summary(job / "summary.json")
    assert again.model_dump(include={"kernels", "kernel_diffs", "op_table_notes"}) == before


@pytest.mark.e2e
def test_a_graph_mode_variant_without_an_op_table_says_why_in_the_report(sweep):
    _cwd, _root, jobs = sweep
    job = jobs["graph_mode"]
    summary = read_summary(job / "summary.json")
    assert set(summary.kernels) == {"af_off"} and summary.kernel_diffs == {}
    note = summary.op_table_notes["af_on"]
    assert note.key == "op_table_no_source" and note.args["found"] == "step_trace_time.csv"
    report = (job / "report.md").read_text(encoding="utf-8")
    assert (
        "No op table, af_on: `runs/af_on-profile-r1/profile` holds none of the files an "
        "op table is read from (kernel_table.csv, op_statistic.csv, kernel_details.csv, "
        "ascend_pytorch_profiler_*.db, trace_view.json, trace.json or rank*_trace.json[.gz]); "
        "it holds: step_trace_time.csv."
    ) in report
    html = (job / "report.html").read_text(encoding="utf-8")
    assert "No op table, af_on: <code>runs/af_on-profile-r1/profile</code> holds none" in html
    # the documented re-render command, in the other language
    rerender = subprocess.run(
        [sys.executable, "-m", "afbench.report", str(job), "--lang", "zh"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rerender.returncode == 0, rerender.stderr[-2000:]
    zh = (job / "report.zh.md").read_text(encoding="utf-8")
    assert "没有算子表, af_on: `runs/af_on-profile-r1/profile` 中没有可读取算子表的文件" in zh
    assert "其中只有：step_trace_time.csv" in zh
    assert "holds none of the files" not in zh


@pytest.mark.e2e
def test_the_sweep_of_every_format_is_recorded_in_the_history(sweep, tmp_path):
    cwd, root, jobs = sweep
    recorded = subprocess.run(
        [
            sys.executable,
            "-m",
            "afbench.history",
            "--url",
            f"sqlite:///{cwd / 'runs.sqlite'}",
            "list",
            "--experiment",
            "npu_formats",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert recorded.returncode == 0, recorded.stderr
    # each job records its af_on variant (af_off too): 6 jobs
    assert len(recorded.stdout.splitlines()) >= len(jobs)
    url = f"sqlite:///{tmp_path / 'imported.sqlite'}"
    imported = subprocess.run(
        [sys.executable, "-m", "afbench.history", "--url", url, "import", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "afbench.history", "--url", url, "list"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.splitlines()
    assert len(listed) == len(recorded.stdout.splitlines())
