"""Kernel tables from torch_npu kernel_details.csv / op_statistic.csv and their diff
(docs/reference.md §2 profiler summary, §4 formats)."""

from __future__ import annotations

import pandas as pd
import pytest

from afbench.analysis.fusion import RMSNORM_PIECES, rmsnorm_evidence, rmsnorm_piece
from afbench.analysis.kernels import (
    KERNEL_COLUMNS,
    build_kernel_table,
    diff_kernel_tables,
    read_kernel_details,
    read_kernel_table,
    read_op_statistic,
    top_n,
)
from afbench.analysis.op_table import load_kernel_table


def table(rows: list[tuple[str, int, float]]) -> pd.DataFrame:
    return build_kernel_table(pd.DataFrame(rows, columns=["op_type", "count", "total_us"]))


# --- kernel_details.csv ---------------------------------------------------------------


def test_kernel_details_are_aggregated_by_type_over_steps(npu_dir):
    df = read_kernel_details(npu_dir / "kernel_details.csv")
    # keyed by Type; each launch's Name kept beside it
    assert list(df.columns) == [*KERNEL_COLUMNS, "kernel_names"]
    assert df.set_index("op_type").loc["Pow", "kernel_names"] == (
        "aclnnPowTensorScalar_PowAiCore_Pow"
    )
    rows = {r.op_type: (r.count, r.total_us) for r in df.itertuples()}
    assert rows == {
        "MatMul": (4, pytest.approx(401.5)),
        "AddRmsNorm": (2, pytest.approx(10.5)),
        "ReduceMean": (2, pytest.approx(9.0)),
        "Mul": (4, pytest.approx(9.0)),
        "Pow": (2, pytest.approx(6.0)),
        "Add": (2, pytest.approx(3.5)),
        "Rsqrt": (2, pytest.approx(3.0)),
        "Adds": (2, pytest.approx(2.5)),
        "Cast": (2, pytest.approx(2.0)),
    }


def test_kernel_table_is_sorted_by_total_time_with_ratio_of_the_sum(npu_dir):
    df = read_kernel_details(npu_dir / "kernel_details.csv")
    assert df["total_us"].is_monotonic_decreasing
    assert df.loc[0, "op_type"] == "MatMul"
    assert df.loc[0, "ratio_pct"] == pytest.approx(401.5 / 447.0 * 100)
    assert df["ratio_pct"].sum() == pytest.approx(100.0)
    assert df["count"].dtype == "int64"


def test_kernel_details_without_step_id_and_with_spaced_unit_are_read(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text(
        "\ufeff Device_id , Name , type , Accelerator Core , Start Time (us) , Duration (us) \n"
        "0,aclnnMatmul,MatMul,AI_CORE,1.0\t,\t10.5\t\n"
        "0,aclnnMatmul,MatMul,AI_CORE,2.0\t,4.5\n",
        encoding="utf-8",
    )
    df = read_kernel_details(path)
    assert df.to_dict("records") == [
        {
            "op_type": "MatMul",
            "count": 2,
            "total_us": 15.0,
            "ratio_pct": 100.0,
            "kernel_names": "aclnnMatmul",
        }
    ]


def test_kernel_details_without_duration_column_names_file_and_column(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text("Step Id,Device_id,Name,Type,Start Time(us)\n5,0,a,MatMul,1\n")
    with pytest.raises(ValueError, match=rf"{path}: missing column 'Duration\(us\)'"):
        read_kernel_details(path)


def test_kernel_details_with_non_numeric_duration_is_rejected(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text("Type,Duration(us)\nMatMul,1.0\nPow,N/A\n")
    with pytest.raises(ValueError, match=r"'Duration\(us\)' .* line 3"):
        read_kernel_details(path)


# --- op_statistic.csv -----------------------------------------------------------------


def test_op_statistic_sums_core_types_and_recomputes_ratio(npu_dir):
    df = read_op_statistic(npu_dir / "op_statistic.csv")
    assert list(df.columns) == KERNEL_COLUMNS
    cast = df.set_index("op_type").loc["Cast"]
    assert (cast["count"], cast["total_us"]) == (3, pytest.approx(32.0))
    assert cast["ratio_pct"] == pytest.approx(32.0 / 477.0 * 100)
    assert df["op_type"].tolist()[:2] == ["MatMul", "Cast"]
    assert df["op_type"].is_unique


def test_op_statistic_with_leading_model_name_is_read(tmp_path):
    path = tmp_path / "op_statistic.csv"
    path.write_text(
        "Model Name,OP Type,Core Type,Count,Total Time(us),"
        "Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
        "qwen3,Mul,AI_VECTOR_CORE,978,1500.0,1.0,1.5,3.0,60.0\n"
        "qwen3,Pow,AI_VECTOR_CORE,435,1000.0,2.0,2.3,4.0,40.0\n"
    )
    df = read_op_statistic(path)
    assert df[["op_type", "count"]].values.tolist() == [["Mul", 978], ["Pow", 435]]


def test_op_statistic_without_count_column_names_it(tmp_path):
    path = tmp_path / "op_statistic.csv"
    path.write_text("OP Type,Core Type,Total Time(us)\nMul,AI_CORE,1.0\n")
    with pytest.raises(ValueError, match="missing column 'Count'"):
        read_op_statistic(path)


# --- own table and discovery ----------------------------------------------------------


def test_own_kernel_table_round_trips(tmp_path, npu_dir):
    original = read_kernel_details(npu_dir / "kernel_details.csv")
    path = tmp_path / "kernel_table.csv"
    original.to_csv(path, index=False)
    pd.testing.assert_frame_equal(read_kernel_table(path), original)


def test_load_prefers_kernel_table_then_op_statistic_then_kernel_details(tmp_path, place_npu_file):
    assert load_kernel_table(tmp_path / "absent") is None
    assert load_kernel_table(tmp_path) is None

    place_npu_file(tmp_path, "kernel_details.csv")
    assert load_kernel_table(tmp_path)["total_us"].sum() == pytest.approx(447.0)

    place_npu_file(tmp_path, "op_statistic.csv")
    assert load_kernel_table(tmp_path)["total_us"].sum() == pytest.approx(477.0)

    table([("Own", 1, 5.0)]).to_csv(tmp_path / "kernel_table.csv", index=False)
    assert load_kernel_table(tmp_path)["op_type"].tolist() == ["Own"]


def test_load_sums_tables_of_several_ranks(tmp_path, place_npu_file):
    place_npu_file(tmp_path, "op_statistic.csv", pid=1)
    place_npu_file(tmp_path, "op_statistic.csv", pid=2)
    df = load_kernel_table(tmp_path)
    assert df.set_index("op_type").loc["MatMul", "count"] == 8
    assert df["ratio_pct"].sum() == pytest.approx(100.0)


# --- top-N and diff -------------------------------------------------------------------


def test_top_n_keeps_largest_and_ratios_of_full_table():
    df = table([("A", 1, 10.0), ("B", 1, 60.0), ("C", 1, 30.0)])
    top = top_n(df, 2)
    assert top["op_type"].tolist() == ["B", "C"]
    assert top["ratio_pct"].tolist() == pytest.approx([60.0, 30.0])
    with pytest.raises(ValueError):
        top_n(df, -1)


def test_diff_is_an_outer_join_sorted_by_absolute_time_delta():
    baseline = table([("MatMul", 4, 400.0), ("Pow", 435, 50.0), ("Mul", 978, 80.0)])
    variant = table([("MatMul", 4, 390.0), ("Mul", 543, 45.0), ("AddRmsNorm", 435, 20.0)])
    diff = diff_kernel_tables(baseline, variant)
    assert list(diff.columns) == [
        "op_type",
        "count_baseline",
        "count_variant",
        "count_delta",
        "total_us_baseline",
        "total_us_variant",
        "total_us_delta",
    ]
    assert diff["op_type"].tolist() == ["Pow", "Mul", "AddRmsNorm", "MatMul"]
    pow_row = diff.iloc[0]
    counts = (pow_row["count_baseline"], pow_row["count_variant"], pow_row["count_delta"])
    assert counts == (435, 0, -435)
    assert pow_row["total_us_delta"] == pytest.approx(-50.0)
    added = diff.set_index("op_type").loc["AddRmsNorm"]
    assert (added["count_baseline"], added["total_us_baseline"]) == (0, 0.0)
    assert diff["count_baseline"].dtype == "int64"


# --- RMSNorm evidence -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("op_type", "piece"),
    [
        ("aten::pow", "pow"),
        ("Pow", "pow"),
        ("ReduceMean", "mean"),
        ("aten::mean", "mean"),
        ("Rsqrt", "rsqrt"),
        ("Mul", "mul"),
        ("Muls", "mul"),
        ("aten::mul_", "mul"),
        ("Add", "add"),
        ("Adds", "add"),
        ("aten::add.Tensor", "add"),
        ("MatMul", None),
        ("BatchMatMul", None),
        ("aten::addmm", None),
        ("AddRmsNorm", None),
        ("triton_poi_fused_add_mul_pow_0", None),
        ("Cast", None),
        ("Sqrt", None),
    ],
)
def test_rmsnorm_pieces_match_whole_op_names_only(op_type, piece):
    assert rmsnorm_piece(op_type) == piece


def test_fused_rmsnorm_replaces_its_small_ops():
    baseline = table(
        [
            ("MatMul", 1000, 9000.0),
            ("Mul", 978, 700.0),
            ("Pow", 435, 560.0),
            ("ReduceMean", 435, 450.0),
            ("Adds", 435, 120.0),
            ("Rsqrt", 435, 100.0),
            ("Add", 100, 90.0),
            ("Cast", 300, 270.0),
        ]
    )
    variant = table(
        [
            ("MatMul", 1000, 9000.0),
            ("Mul", 108, 80.0),
            ("AddRmsNorm", 400, 300.0),
            ("RmsNorm", 35, 20.0),
            ("Add", 100, 90.0),
            ("Cast", 300, 270.0),
        ]
    )
    evidence = rmsnorm_evidence(baseline, variant, ("add_rms_norm", "rms_norm"))
    assert list(evidence["pieces"]) == list(RMSNORM_PIECES)
    assert evidence["pieces"]["pow"] == {"baseline": 435, "variant": 0, "delta": -435}
    assert evidence["pieces"]["mean"]["baseline"] == 435
    assert evidence["pieces"]["add"] == {"baseline": 535, "variant": 100, "delta": -435}
    assert evidence["pieces"]["mul"]["variant"] == 108
    assert evidence["fused"] == {
        "baseline": 0,
        "variant": 435,
        "delta": 435,
        "op_types": ["AddRmsNorm", "RmsNorm"],
    }
    assert evidence["fusion_evident"] is True


def test_aten_op_names_count_as_pieces_and_fused_ops():
    baseline = table(
        [("aten::pow", 8, 1.0), ("aten::mean", 8, 1.0), ("aten::rsqrt", 8, 1.0)]
        + [("aten::mul", 16, 1.0)]
    )
    variant = table([("npu::npu_add_rms_norm", 8, 1.0)])
    evidence = rmsnorm_evidence(baseline, variant, ("add_rms_norm",))
    assert evidence["pieces_baseline"] == 40 and evidence["pieces_variant"] == 0
    assert evidence["fused"]["variant"] == 8


def test_no_fused_op_is_no_evidence():
    same = table([("Pow", 4, 1.0), ("Mul", 8, 1.0)])
    evidence = rmsnorm_evidence(same, same, ("add_rms_norm",))
    assert evidence["fused"]["variant"] == 0
    assert evidence["fusion_evident"] is False


def test_rmsnorm_evidence_needs_fused_names():
    with pytest.raises(ValueError):
        rmsnorm_evidence(table([]), table([]), ())
