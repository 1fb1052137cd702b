"""Profiling status from step_trace_time.csv (docs/reference.md §1 "Profiling status", §4)."""

from __future__ import annotations

from io import StringIO

import pandas as pd
import pytest

from afbench.analysis.errors import ProfileIncomparable, ProfileUnavailable
from afbench.analysis.steptrace import (
    COMPARABLE,
    DEFAULT_PROFILE_STEPS,
    INCOMPARABLE,
    PHASE_COLUMNS,
    STEP_TRACE_COLUMNS,
    UNAVAILABLE,
    find_step_trace,
    profiling_status,
    read_step_trace,
    validate_step_trace,
)

STEPS = [5, 6, 7, 8, 9]
HEADER = ",".join(STEP_TRACE_COLUMNS)


def trace_csv(rows: list[tuple], header: str = HEADER) -> str:
    """``rows``: (device, step, computing, comm_not_overlapped, overlapped, free, stage)."""
    lines = [header]
    for dev, step, comp, comm_no, ovl, free, stage in rows:
        comm = comm_no + 1
        lines.append(f"{dev},{step},{comp},{comm_no},{ovl},{comm},{free},{stage},0,{comm_no},1.5")
    return "\n".join(lines) + "\n"


def rows_for(steps=STEPS, device=0, computing=1000.0):
    return [(device, s, computing + s, 10.0, 30.0, 5.0, computing + s + 15.0) for s in steps]


def frame(rows: list[tuple]) -> pd.DataFrame:
    """The rows as pandas reads a well-formed torch_npu file."""
    return pd.read_csv(StringIO(trace_csv(rows)))


# --- file discovery -------------------------------------------------------------------


def test_single_step_trace_is_found_in_torch_npu_layout(tmp_path, place_npu_file):
    placed = place_npu_file(tmp_path, "step_trace_time.csv")
    assert find_step_trace(tmp_path) == placed
    assert placed.parent.name == "ASCEND_PROFILER_OUTPUT"


def test_missing_step_trace_is_unavailable(tmp_path):
    (tmp_path / "node0_1_2_ascend_pt").mkdir()
    with pytest.raises(ProfileUnavailable, match="no step_trace_time.csv below"):
        find_step_trace(tmp_path)


def test_missing_profile_directory_is_unavailable(tmp_path):
    with pytest.raises(ProfileUnavailable, match="does not exist"):
        find_step_trace(tmp_path / "never_written")


def test_duplicate_step_trace_files_are_unavailable(tmp_path, place_npu_file):
    place_npu_file(tmp_path, "step_trace_time.csv", pid=1)
    place_npu_file(tmp_path, "step_trace_time.csv", pid=2)
    with pytest.raises(ProfileUnavailable, match="2 step_trace_time.csv files"):
        find_step_trace(tmp_path)


# --- reading --------------------------------------------------------------------------


def test_fixture_reads_with_all_eleven_columns(npu_dir):
    df = read_step_trace(npu_dir / "step_trace_time.csv")
    assert list(df.columns) == STEP_TRACE_COLUMNS
    assert df["Step"].tolist() == STEPS
    validate_step_trace(df, STEPS)


def test_column_with_space_before_parenthesis_is_accepted(tmp_path):
    header = HEADER.replace("Communication(Not Overlapped)", "Communication (Not Overlapped)")
    header = " " + header.replace("Device_id", "\ufeffDevice_id", 1)
    path = tmp_path / "step_trace_time.csv"
    path.write_text(trace_csv(rows_for(), header=header), encoding="utf-8")
    df = read_step_trace(path)
    assert "Communication(Not Overlapped)" in df.columns
    assert "Communication(Not Overlapped and Exclude Receive)" in df.columns
    validate_step_trace(df, STEPS)


def test_extra_columns_are_kept(tmp_path):
    path = tmp_path / "step_trace_time.csv"
    path.write_text(
        "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Free,Stage,Custom Col\n"
        "0,5,1,2,3,4,5,x\n"
    )
    assert "Custom Col" in read_step_trace(path).columns


def test_missing_phase_column_is_incomparable(tmp_path):
    path = tmp_path / "step_trace_time.csv"
    path.write_text(trace_csv(rows_for()).replace(",Free,", ",Idle,", 1))
    with pytest.raises(ProfileIncomparable, match=r"missing column\(s\) 'Free'"):
        read_step_trace(path)


def test_empty_step_trace_is_incomparable(tmp_path):
    path = tmp_path / "step_trace_time.csv"
    path.write_text("")
    with pytest.raises(ProfileIncomparable, match="empty"):
        read_step_trace(path)


# --- validation -----------------------------------------------------------------------


def test_wrong_row_count_is_incomparable():
    with pytest.raises(ProfileIncomparable, match=r"4 rows, expected 5 .*missing step\(s\) \[9\]"):
        validate_step_trace(frame(rows_for(STEPS[:4])), STEPS)


def test_duplicate_step_is_incomparable():
    reason = r"duplicate step\(s\) \[7\].*missing step\(s\) \[8\]"
    with pytest.raises(ProfileIncomparable, match=reason):
        validate_step_trace(frame(rows_for([5, 6, 7, 7, 9])), STEPS)


def test_steps_off_by_one_are_incomparable():
    reason = r"missing step\(s\) \[5\].*unexpected step\(s\) \[10\]"
    with pytest.raises(ProfileIncomparable, match=reason):
        validate_step_trace(frame(rows_for([6, 7, 8, 9, 10])), STEPS)


def test_mixed_device_id_is_incomparable():
    rows = rows_for()
    rows[2] = (1, *rows[2][1:])
    with pytest.raises(ProfileIncomparable, match=r"mixed Device_id values \[0, 1\]"):
        validate_step_trace(frame(rows), STEPS)


def test_negative_phase_value_is_incomparable():
    rows = rows_for()
    rows[1] = (0, 6, 1006.0, -3.0, 30.0, 5.0, 1021.0)
    reason = r"'Communication\(Not Overlapped\)' has negative value\(s\) \(step 6: -3.0\)"
    with pytest.raises(ProfileIncomparable, match=reason):
        validate_step_trace(frame(rows), STEPS)


@pytest.mark.parametrize(
    ("cell", "problem"),
    [
        ("inf", "infinite"),
        ("nan", "empty or non-numeric"),
        ("abc", "empty or non-numeric"),
        ("", "empty or non-numeric"),
    ],
)
def test_non_finite_or_non_numeric_phase_value_is_incomparable(tmp_path, cell, problem):
    text = trace_csv(rows_for()).replace("\n0,8,1008.0,", f"\n0,8,{cell},")
    path = tmp_path / "step_trace_time.csv"
    path.write_text(text)
    reason = rf"'Computing' has {problem} value\(s\) \(step 8"
    with pytest.raises(ProfileIncomparable, match=reason):
        validate_step_trace(read_step_trace(path), STEPS)


def test_validation_reports_missing_columns_of_a_hand_built_frame():
    with pytest.raises(ProfileIncomparable, match="'Stage'"):
        validate_step_trace(frame(rows_for()).drop(columns=["Stage"]), STEPS)


def test_expected_steps_must_be_unique_and_non_empty():
    with pytest.raises(ValueError):
        validate_step_trace(frame(rows_for()), [])
    with pytest.raises(ValueError):
        validate_step_trace(frame(rows_for()), [5, 5])


# --- status of a pair -----------------------------------------------------------------


def write_side(root, place, rows=None, **layout):
    text = None if rows is None else trace_csv(rows)
    place(root, "step_trace_time.csv", text, **layout)
    return root


def test_comparable_pair_reports_per_phase_means_in_microseconds(tmp_path, npu_dir, place_npu_file):
    base = write_side(tmp_path / "off", place_npu_file)
    variant_rows = [(0, s, 200000.0 + 100 * s, 1000.0, 2500.0, 400.0, 201000.0) for s in STEPS]
    var = write_side(tmp_path / "on", place_npu_file, variant_rows)

    result = profiling_status(base, var, DEFAULT_PROFILE_STEPS)

    assert result.status == COMPARABLE, result.reason
    assert list(result.means.index) == PHASE_COLUMNS
    assert list(result.means.columns) == ["baseline", "variant"]
    expected_base = pd.read_csv(npu_dir / "step_trace_time.csv")[PHASE_COLUMNS].mean()
    assert result.means["baseline"].tolist() == pytest.approx(expected_base.tolist())
    assert result.means.loc["Computing", "baseline"] == pytest.approx(250000.0)
    assert result.means.loc["Overlapped", "baseline"] == pytest.approx(3000.0)
    expected_variant = [200700.0, 1000.0, 2500.0, 400.0, 201000.0]
    assert result.means["variant"].tolist() == pytest.approx(expected_variant)
    assert result.device_ids == {"baseline": 0, "variant": 0}


def test_comparable_means_never_include_an_overlap_inclusive_total(tmp_path, place_npu_file):
    base = write_side(tmp_path / "off", place_npu_file)
    var = write_side(tmp_path / "on", place_npu_file)
    result = profiling_status(base, var, STEPS)
    assert set(result.means.index) == set(PHASE_COLUMNS)
    assert not any("total" in str(name).lower() for name in result.means.index)


def test_different_device_id_between_sides_is_incomparable(tmp_path, place_npu_file):
    base = write_side(tmp_path / "off", place_npu_file, rows_for(device=0))
    var = write_side(tmp_path / "on", place_npu_file, rows_for(device=1))
    result = profiling_status(base, var, STEPS)
    assert result.status == INCOMPARABLE
    assert result.reason == "different Device_id: baseline 0, variant 1"
    assert result.means is None


def test_failed_run_is_unavailable_even_with_a_valid_file(tmp_path, place_npu_file):
    base = write_side(tmp_path / "off", place_npu_file)
    var = write_side(tmp_path / "on", place_npu_file)
    result = profiling_status(base, var, STEPS, variant_failed=True)
    assert result.status == UNAVAILABLE
    assert "variant profile run failed" in result.reason


def test_side_without_step_trace_is_unavailable(tmp_path, place_npu_file):
    base = write_side(tmp_path / "off", place_npu_file)
    (tmp_path / "on").mkdir()
    result = profiling_status(base, tmp_path / "on", STEPS)
    assert result.status == UNAVAILABLE
    assert result.reason.startswith("variant: no step_trace_time.csv below")


def test_side_without_profile_dir_is_unavailable(tmp_path, place_npu_file):
    var = write_side(tmp_path / "on", place_npu_file)
    result = profiling_status(None, var, STEPS)
    assert (result.status, result.reason) == (UNAVAILABLE, "baseline has no profile directory")


def test_side_with_duplicate_step_traces_is_unavailable(tmp_path, place_npu_file):
    base = write_side(tmp_path / "off", place_npu_file, pid=1)
    write_side(base, place_npu_file, pid=2)
    var = write_side(tmp_path / "on", place_npu_file)
    result = profiling_status(base, var, STEPS)
    assert result.status == UNAVAILABLE
    assert "2 step_trace_time.csv files" in result.reason


def test_side_with_invalid_rows_is_incomparable(tmp_path, place_npu_file):
    base = write_side(tmp_path / "off", place_npu_file)
    var = write_side(tmp_path / "on", place_npu_file, rows_for([5, 6, 7, 8]))
    result = profiling_status(base, var, STEPS)
    assert result.status == INCOMPARABLE
    assert result.reason.startswith("variant: ") and "4 rows, expected 5" in result.reason
    assert result.means is None


def test_unavailable_side_outranks_incomparable_side(tmp_path, place_npu_file):
    base = write_side(tmp_path / "off", place_npu_file, rows_for([5, 6]))
    result = profiling_status(base, tmp_path / "missing", STEPS)
    assert result.status == UNAVAILABLE
