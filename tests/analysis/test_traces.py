"""Chrome-format traces as torch_npu and torch.profiler write them (issue 10, items 6, 8).

torch_npu ``trace_view.json`` (Ascend/pytorch issue 133): a bare JSON array; ``ts`` strings of
absolute microseconds with a nanosecond fraction; ``dur`` numbers; an ``Ascend Hardware``
process for kernels beside ``Overlap Analysis``; ``s``/``f`` flows with ids above 2**53.
torch.profiler ``export_chrome_trace``: ``{"traceEvents": [...]}``, numeric ``ts``, each step a
``user_annotation`` and a ``gpu_user_annotation`` ``ProfilerStep#N`` (PyTorch issues 121126,
148314: the label number starts one off, so training steps come from the schedule).
"""

from __future__ import annotations

import gzip
import json

import pytest

from afbench.analysis.traces import read_trace, read_trace_events, training_steps_of

BASE = 1732873000000000  # us, 2024-11-29: ~1.7e15, where float64 steps by 0.25 us
HOST, DEV, OVERLAP = 2041, 2042, 2043
FLOW_BASE = 1732873000000000000  # torch_npu flow ids are ns timestamps: > 2**53


def npu_trace(steps=(5, 6)) -> list[dict]:
    events = [
        {"ph": "M", "name": "process_name", "pid": HOST, "tid": 0, "args": {"name": "Python"}},
        {
            "ph": "M",
            "name": "process_name",
            "pid": DEV,
            "tid": 0,
            "args": {"name": "Ascend Hardware"},
        },
        {
            "ph": "M",
            "name": "process_name",
            "pid": OVERLAP,
            "tid": 0,
            "args": {"name": "Overlap Analysis"},
        },
    ]
    for k, step in enumerate(steps):
        t0 = BASE + k * 10_000
        events.append(
            {
                "ph": "X",
                "name": f"ProfilerStep#{step}",
                "pid": HOST,
                "tid": HOST,
                "ts": f"{t0}.000",
                "dur": 2000.0,
                "cat": "cpu_op",
                "args": {},
            }
        )
        # two kernels launched inside the host step that run after it has ended (async)
        for j, (frac, dur, name) in enumerate(
            [("125", 0.25, "aclnnMatmul_MatMulV2"), ("375", 0.5, "aclnnAdd_AddAiCore_Add")]
        ):
            launch = f"{t0 + 100 + j}.{frac}"
            start = f"{t0 + 2500}.{frac}"
            fid = FLOW_BASE + k * 10 + j
            events += [
                {
                    "ph": "X",
                    "name": "aclnnMatmul" if j == 0 else "aclnnAdd",
                    "pid": HOST,
                    "tid": HOST,
                    "ts": launch,
                    "dur": 1.0,
                    "cat": "cpu_op",
                    "args": {},
                },
                {
                    "ph": "s",
                    "name": "HostToDevice",
                    "id": fid,
                    "pid": HOST,
                    "tid": HOST,
                    "ts": launch,
                    "cat": "HostToDevice",
                },
                {
                    "ph": "f",
                    "name": "HostToDevice",
                    "id": fid,
                    "pid": DEV,
                    "tid": 3,
                    "ts": start,
                    "cat": "HostToDevice",
                    "bp": "e",
                },
                {
                    "ph": "X",
                    "name": name,
                    "pid": DEV,
                    "tid": 3,
                    "ts": start,
                    "dur": dur,
                    "args": {"Task Type": "AI_CORE", "Model Id": 4294967295},
                },
            ]
        events.append(
            {
                "ph": "X",
                "name": "Computing",
                "pid": OVERLAP,
                "tid": 1,
                "ts": f"{t0 + 2500}.125",
                "dur": 1.0,
                "args": {},
            }
        )
    return events


def test_trace_view_gives_the_kernel_table_without_overlap_analysis(tmp_path):
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(npu_trace()))
    kernels = read_trace(path).kernels.set_index("op_type")
    assert set(kernels.index) == {"aclnnMatmul_MatMulV2", "aclnnAdd_AddAiCore_Add"}
    assert kernels.loc["aclnnAdd_AddAiCore_Add", "count"] == 2
    assert kernels.loc["aclnnAdd_AddAiCore_Add", "total_us"] == 1.0
    assert kernels["ratio_pct"].sum() == pytest.approx(100.0)


def test_trace_view_step_device_span_is_exact_to_the_nanosecond(tmp_path):
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(npu_trace()))
    steps = read_trace(path, schedule={"wait": 4, "warmup": 0, "active": 2, "repeat": 1}).steps
    assert steps["profiler_step"].tolist() == [5, 6]
    assert steps["training_step"].tolist() == [5, 6]
    # kernels ran after their host step ended and still count for it (by their flow)
    assert steps["kernels"].tolist() == [2, 2]
    # .125 -> .375 + 0.5 = 0.75 us; float64 timestamps near 1.7e15 would give 0.5 or 1.0
    assert steps["device_span_us"].tolist() == [0.75, 0.75]
    assert steps["kernel_us"].tolist() == [0.75, 0.75]
    assert steps["host_span_us"].tolist() == [2000.0, 2000.0]


def test_flow_ids_above_2_53_stay_distinct(tmp_path):
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(npu_trace()))
    ids = [e["id"] for e in read_trace_events(path) if e.get("ph") == "s"]
    assert min(ids) > 2**53 and len(set(ids)) == len(ids) == 4


def cuda_trace(labels, gpu=True) -> dict:
    events = []
    for k, n in enumerate(labels):
        t0 = 1712000000000 + k * 10_000
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{n}",
                "pid": 1234,
                "tid": 1234,
                "ts": t0 + 0.123,
                "dur": 5000.0,
                "args": {"External id": k * 100},
            }
        )
        if gpu:
            events.append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": f"ProfilerStep#{n}",
                    "pid": 0,
                    "tid": 7,
                    "ts": t0 + 100.5,
                    "dur": 4900.0,
                    "args": {"External id": k * 100},
                }
            )
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1234,
                "tid": 1234,
                "ts": t0 + 10,
                "dur": 30.0,
                "args": {},
            }
        )
        if gpu:
            corr = 1000 + k
            events += [
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1234,
                    "tid": 1234,
                    "ts": t0 + 20,
                    "dur": 5.0,
                    "args": {"correlation": corr},
                },
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "ampere_sgemm_128x64_tn",
                    "pid": 0,
                    "tid": 7,
                    "ts": t0 + 200,
                    "dur": 1500.0,
                    "args": {"correlation": corr, "device": 0, "stream": 7},
                },
                {
                    "ph": "X",
                    "cat": "gpu_memcpy",
                    "name": "Memcpy DtoH (Device -> Pinned)",
                    "pid": 0,
                    "tid": 7,
                    "ts": t0 + 1800,
                    "dur": 2.5,
                    "args": {"device": 0},
                },
                {
                    "ph": "s",
                    "cat": "ac2g",
                    "name": "ac2g",
                    "id": corr,
                    "pid": 1234,
                    "tid": 1234,
                    "ts": t0 + 20,
                },
                {
                    "ph": "f",
                    "cat": "ac2g",
                    "name": "ac2g",
                    "id": corr,
                    "pid": 0,
                    "tid": 7,
                    "ts": t0 + 200,
                    "bp": "e",
                },
            ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [],
        "traceEvents": events,
        "traceName": "trace.json",
    }


SCHEDULE = {"wait": 4, "warmup": 1, "active": 5, "repeat": 1}


@pytest.mark.parametrize("labels", [range(5, 10), range(6, 11)])
def test_chrome_trace_step_is_counted_once_and_numbered_by_the_schedule(tmp_path, labels):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(cuda_trace(list(labels))))
    steps = read_trace(path, schedule=SCHEDULE).steps
    assert len(steps) == 5  # not 10: user_annotation and gpu_user_annotation are one step
    assert steps["training_step"].tolist() == [6, 7, 8, 9, 10]
    assert steps["profiler_step"].tolist() == list(labels)


def test_chrome_trace_kernel_time_per_step_comes_from_gpu_events(tmp_path):
    path = tmp_path / "rank0_trace.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(cuda_trace([5, 6, 7, 8, 9]), fh)
    summary = read_trace(path, schedule=SCHEDULE)
    assert summary.steps["kernels"].tolist() == [2] * 5
    assert summary.steps["kernel_us"].tolist() == [1502.5] * 5
    assert summary.steps["device_span_us"].tolist() == [4900.0] * 5
    table = summary.kernels.set_index("op_type")
    assert table.loc["ampere_sgemm_128x64_tn", "count"] == 5
    assert "aten::mm" not in table.index and "cudaLaunchKernel" not in table.index


def test_cpu_only_chrome_trace_has_steps_but_no_device_time(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(cuda_trace([5, 6, 7, 8, 9], gpu=False)))
    summary = read_trace(path, schedule=SCHEDULE)
    assert summary.steps["host_span_us"].tolist() == [5000.0] * 5
    assert summary.steps["kernels"].tolist() == [0] * 5
    assert summary.steps["device_span_us"].isna().all()
    assert summary.kernels.empty


def test_more_steps_than_the_schedule_records_is_an_error(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(cuda_trace(list(range(5, 11)))))
    with pytest.raises(ValueError, match="6 profiled steps, but schedule"):
        read_trace(path, schedule=SCHEDULE)


def test_schedule_with_skip_first_and_repeat_numbers_each_cycle():
    sched = {"skip_first": 2, "wait": 1, "warmup": 1, "active": 2, "repeat": 2}
    assert training_steps_of(4, sched) == [5, 6, 9, 10]


def test_not_a_trace_is_a_clear_error(tmp_path):
    path = tmp_path / "trace_view.json"
    path.write_text('{"schemaVersion": 1}')
    with pytest.raises(ValueError, match="traceEvents"):
        read_trace(path)


def test_trace_view_is_the_kernel_table_of_last_resort(tmp_path):
    from afbench.analysis.op_table import load_kernel_table

    out = tmp_path / "profile" / "host_123_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "trace_view.json").write_text(json.dumps(npu_trace()))
    table = load_kernel_table(tmp_path / "profile").set_index("op_type")
    # aclnn<API>_<Type> (one implementation) is its type too
    assert table.loc["MatMulV2", "count"] == 2
    # keyed by op type as kernel_details.csv is (aclnn<API>_<impl>_<Type>), the name kept
    assert table.loc["Add", "total_us"] == 1.0
    assert table.loc["Add", "kernel_names"] == "aclnnAdd_AddAiCore_Add"
    # any CSV wins over the trace
    (out / "op_statistic.csv").write_text(
        "OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
        "MatMul,AI_CORE,3,30.0,10.0,10.0,10.0,100.0\n"
    )
    assert load_kernel_table(tmp_path / "profile")["op_type"].tolist() == ["MatMul"]


def rmsnorm_trace(names: list[str]) -> list[dict]:
    """A torch_npu trace_view.json with one step and one device launch per name."""
    events = npu_trace(steps=())
    events.append(
        {
            "ph": "X",
            "name": "ProfilerStep#5",
            "pid": HOST,
            "tid": HOST,
            "ts": f"{BASE}.000",
            "dur": 5000.0,
            "cat": "cpu_op",
            "args": {},
        }
    )
    for j, name in enumerate(names):
        events.append(
            {
                "ph": "X",
                "name": name,
                "pid": DEV,
                "tid": 3,
                "ts": f"{BASE + 10 * j}.125",
                "dur": 2.0,
                "args": {"Task Type": "AI_CORE"},
            }
        )
    return events


def test_a_diff_across_kernel_details_and_trace_view_shows_each_op_once(tmp_path):
    from afbench.analysis.fusion import rmsnorm_evidence
    from afbench.analysis.kernels import diff_kernel_tables
    from afbench.analysis.op_table import load_kernel_table

    # baseline: torch_npu's CSV export; variant: only its trace_view.json (the CSV export off)
    base = tmp_path / "base" / "h_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    base.mkdir(parents=True)
    (base / "kernel_details.csv").write_text(
        "Step Id,Device_id,Name,Type,Accelerator Core,Start Time(us),Duration(us)\n"
        + "".join(
            f"5,0,{name},{kind},AI_VECTOR_CORE,{BASE + j}.125\t,2.0\n"
            for j, (name, kind) in enumerate(
                [
                    ("aclnnPowTensorScalar_PowAiCore_Pow", "Pow"),
                    ("aclnnMean_ReduceMeanAiCore_ReduceMean", "ReduceMean"),
                    ("aclnnAdds_AddsAiCore_Adds", "Adds"),
                    ("aclnnRsqrt_RsqrtAiCore_Rsqrt", "Rsqrt"),
                    ("aclnnMul_MulAiCore_Mul", "Mul"),
                    ("aclnnMul_MulAiCore_Mul", "Mul"),
                ]
            )
        )
    )
    var = tmp_path / "var" / "h_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    var.mkdir(parents=True)
    (var / "trace_view.json").write_text(
        json.dumps(
            rmsnorm_trace(
                [
                    "aclnnPowTensorScalar_PowAiCore_Pow",
                    "aclnnMean_ReduceMeanAiCore_ReduceMean",
                    "aclnnAddRmsNorm_AddRmsNorm_AddRmsNorm",
                    "aclnnMul_MulAiCore_Mul",
                ]
            )
        )
    )
    b, v = load_kernel_table(tmp_path / "base"), load_kernel_table(tmp_path / "var")
    diff = diff_kernel_tables(b, v)
    assert diff["op_type"].is_unique
    assert set(diff["op_type"]) == {"Pow", "ReduceMean", "Adds", "Rsqrt", "Mul", "AddRmsNorm"}
    row = diff.set_index("op_type").loc["Pow"]
    assert (row["count_baseline"], row["count_variant"]) == (1, 1)
    # both sides keep their kernel names
    assert b.set_index("op_type").loc["Mul", "kernel_names"] == "aclnnMul_MulAiCore_Mul"
    assert v.set_index("op_type").loc["AddRmsNorm", "kernel_names"] == (
        "aclnnAddRmsNorm_AddRmsNorm_AddRmsNorm"
    )
    # the unfused RMSNorm pieces are found on the trace side too
    ev = rmsnorm_evidence(b, v)
    assert {p: (n["baseline"], n["variant"]) for p, n in ev["pieces"].items()} == {
        "pow": (1, 1),
        "mean": (1, 1),
        "rsqrt": (1, 0),
        "mul": (2, 1),
        "add": (1, 0),
    }
    assert ev["fused"]["variant"] == 1 and ev["fusion_evident"]


def test_a_trace_kernel_takes_its_type_from_kernel_details_beside_it(tmp_path):
    from afbench.analysis.kernels import kernel_op_type, kernel_types

    (tmp_path / "kernel_details.csv").write_text(
        "Device_id,Name,Type,Duration(us)\n0,aclnnMatmul_MatMulCommon_MatMulV2,MatMul,1.0\n"
    )
    known = kernel_types(tmp_path)
    assert kernel_op_type("aclnnMatmul_MatMulCommon_MatMulV2", known) == "MatMul"
    assert kernel_op_type("aclnnMatmul_MatMulCommon_MatMulV2") == "MatMulV2"
    # generated and CUDA kernels are their own type
    assert kernel_op_type("autofused_add_mul_pow_0") == "autofused_add_mul_pow_0"
    assert kernel_op_type("void at::native::vectorized_elementwise_kernel<4>") == (
        "void at::native::vectorized_elementwise_kernel<4>"
    )


def test_a_trace_is_summarised_in_one_streaming_pass_whatever_its_event_order(
    tmp_path, monkeypatch
):
    """torch_npu writes metadata anywhere in the array: a process named after its kernels
    still counts as the device, and flows with string ids join like numeric ones. The reader
    never loads the file whole (json.load/loads raise) and never keeps the events as a list."""
    import afbench.analysis.traces as T

    events = npu_trace()
    meta = [e for e in events if e["ph"] == "M"]
    rest = [e for e in events if e["ph"] != "M"]
    for e in rest:
        if e["ph"] in ("s", "f"):
            e["id"] = f"flow-{e['id']}"  # a string id
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(rest + meta))  # metadata last
    monkeypatch.setattr(json, "load", lambda *a, **k: pytest.fail("json.load called"))
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("json.loads called"))
    monkeypatch.setattr(T, "read_trace_events", lambda *a, **k: pytest.fail("list of events"))
    summary = read_trace(path, schedule={"wait": 4, "warmup": 0, "active": 2, "repeat": 1})
    kernels = summary.kernels.set_index("op_type")
    assert set(kernels.index) == {"aclnnMatmul_MatMulV2", "aclnnAdd_AddAiCore_Add"}
    assert summary.steps["kernels"].tolist() == [2, 2]  # by their flows, after the host step
    assert summary.steps["device_span_us"].tolist() == [0.75, 0.75]
    only_kernels = read_trace(path, steps=False)
    assert only_kernels.kernels.equals(summary.kernels) and only_kernels.steps.empty
