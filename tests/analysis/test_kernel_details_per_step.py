"""torch_npu ``kernel_details.csv`` per step (issue 10, item 7).

Shape as torch_npu's profiler writes it (``Step Id`` first when a schedule ran; absolute
``Start Time(us)`` with a nanosecond fraction and a trailing tab so spreadsheets keep the
digits; quoted shape columns holding commas), as in Ascend/pytorch issue 167.
"""

from __future__ import annotations

import pytest

from afbench.analysis.kernels import kernel_details_per_step, read_kernel_details

HEADER = (
    "Step Id,Device_id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),"
    "Block Num,Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,"
    "Output Formats"
)


def row(step, name, typ, start, dur, shapes='"4,1024;2048,1024"'):
    return (
        f"{step},0,{name},{typ},AI_CORE,{start}\t,{dur},0.52,24,{shapes},BF16;BF16,ND;ND,"
        f'"4,2048",BF16,ND'
    )


ROWS = [
    # step 5: starts .125 and .375 us apart from a 1.7e15 base, where float64 steps by 0.25 us
    row(5, "aclnnMatmul_MatMulV2", "MatMul", "1732873000000000.125", "0.25"),
    row(5, "aclnnAdd_AddAiCore_Add", "Add", "1732873000000000.375", "0.5", '"4,1024;4,1024"'),
    row(6, "aclnnMatmul_MatMulV2", "MatMul", "1732873000000100.000", "120.5"),
    row(6, "aclnnRmsNorm_RmsNormAiCore_RmsNorm", "RmsNorm", "1732873000000221.250", "3.25"),
    row(6, "aclnnMatmul_MatMulV2", "MatMul", "1732873000000230.000", "80.25"),
]


@pytest.fixture
def details(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text(HEADER + "\n" + "\n".join(ROWS) + "\n")
    return path


def test_device_time_per_step_from_step_id(details):
    table = kernel_details_per_step(details).table
    assert table["step"].tolist() == [5, 6]
    assert table["kernels"].tolist() == [2, 3]
    assert table["kernel_us"].tolist() == pytest.approx([0.75, 204.0])
    # 1732873000000230.000 + 80.25 - 1732873000000100.000
    assert table["span_us"].tolist()[1] == 210.25


def test_span_keeps_sub_microsecond_start_times_exact(details):
    # .125 -> .375 + 0.5: exactly 0.75 us; float64 starts would round .125 to .0 or .25
    assert kernel_details_per_step(details).table["span_us"].tolist()[0] == 0.75


def test_quoted_shapes_and_tab_padded_starts_still_aggregate_by_type(details):
    table = read_kernel_details(details).set_index("op_type")
    assert table.loc["MatMul", "count"] == 3
    assert table.loc["MatMul", "total_us"] == pytest.approx(0.25 + 120.5 + 80.25)
    assert set(table.index) == {"MatMul", "Add", "RmsNorm"}


def test_without_step_id_the_breakdown_is_unavailable(tmp_path):
    path = tmp_path / "kernel_details.csv"
    no_step = [r.split(",", 1)[1] for r in ROWS]
    path.write_text(HEADER.split(",", 1)[1] + "\n" + "\n".join(no_step) + "\n")
    result = kernel_details_per_step(path)
    assert result.table is None
    assert result.note.startswith("per-step breakdown unavailable")
    assert len(read_kernel_details(path)) == 3  # the by-Type table does not need Step Id


def test_start_time_that_is_not_a_number_names_the_column(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text(HEADER + "\n" + row(5, "k", "MatMul", "n/a", "1.0") + "\n")
    with pytest.raises(ValueError, match=r"Start Time\(us\)"):
        kernel_details_per_step(path)
