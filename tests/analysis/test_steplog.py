"""Strict training-log rules of the training verdict (docs/reference.md §1)."""

from __future__ import annotations

import pytest

from afbench.analysis.errors import InvalidLog
from afbench.analysis.steplog import (
    DEFAULT_STEP_PATTERN,
    mean_step_time,
    parse_step_times,
    read_step_times,
    strip_ansi,
)

PREFIX = "[rank0]:[titan] 2025-11-29 11:00:00,000 - root - INFO - "


def line(step: int, value: str) -> str:
    return (
        f"{PREFIX}step: {step:2}  loss:  2.31000  elapsed_time_per_step: {value}  "
        "tokens_per_s: 3650"
    )


def log(values: dict[int, str], extra: list[str] = ()) -> str:
    header = [f"{PREFIX}Starting job: sft_qwen3_1_7b_wordle", f"{PREFIX}Compiling model"]
    return "\n".join([*header, *(line(s, v) for s, v in values.items()), *extra]) + "\n"


GOOD = {s: f"0.{270 + s}s" for s in range(1, 11)}


def test_valid_window_returns_each_step_time_in_seconds():
    times = parse_step_times(log(GOOD), 6, 10)
    assert times == {6: 0.276, 7: 0.277, 8: 0.278, 9: 0.279, 10: 0.28}
    assert mean_step_time(times) == pytest.approx(0.278)


def test_value_with_s_suffix_and_without_parse_alike():
    with_s = parse_step_times(log({s: "0.281s" for s in range(6, 11)}), 6, 10)
    without = parse_step_times(log({s: "0.281" for s in range(6, 11)}), 6, 10)
    assert with_s == without == {s: 0.281 for s in range(6, 11)}


def test_default_pattern_allows_other_fields_between_step_and_time():
    text = "step: 7  loss: 2.31  grad_norm: 1.02  memory: 3.10GiB(4.2%)  elapsed_time_per_step: 0.3"
    assert parse_step_times(text, 7, 7) == {7: 0.3}


def test_default_pattern_does_not_read_step_inside_elapsed_time_per_step():
    import re

    match = re.search(DEFAULT_STEP_PATTERN, "elapsed_time_per_step: 0.3s step: 4")
    assert match is None


def test_window_with_missing_step_is_invalid():
    values = {s: v for s, v in GOOD.items() if s != 8}
    with pytest.raises(InvalidLog, match=r"step 8 is missing"):
        parse_step_times(log(values), 6, 10)


def test_window_with_duplicate_step_is_invalid():
    text = log(GOOD, extra=[line(9, "0.300s")])
    with pytest.raises(InvalidLog, match=r"step 9 is duplicated \(2 times, lines \d+, \d+\)"):
        parse_step_times(text, 6, 10)


def test_duplicate_step_outside_window_is_ignored():
    text = log(GOOD, extra=[line(3, "9.0s"), line(11, "nan")])
    assert parse_step_times(text, 6, 10)[6] == 0.276


def test_window_with_nan_value_is_invalid():
    with pytest.raises(InvalidLog, match=r"step 7 \(line \d+\): value 'nan' is NaN"):
        parse_step_times(log({**GOOD, 7: "nan"}), 6, 10)


def test_window_with_infinite_value_is_invalid():
    with pytest.raises(InvalidLog, match=r"step 7 .*infinite"):
        parse_step_times(log({**GOOD, 7: "inf"}), 6, 10)


def test_window_with_zero_time_is_invalid():
    with pytest.raises(InvalidLog, match=r"step 10 .*is zero"):
        parse_step_times(log({**GOOD, 10: "0.000s"}), 6, 10)


def test_window_with_negative_time_is_invalid():
    with pytest.raises(InvalidLog, match=r"step 6 .*'-0.25s' is negative"):
        parse_step_times(log({**GOOD, 6: "-0.25s"}), 6, 10)


def test_window_with_non_numeric_time_is_invalid():
    with pytest.raises(InvalidLog, match=r"step 8 .*'n/a' is not a number"):
        parse_step_times(log({**GOOD, 8: "n/a"}), 6, 10)


def test_time_in_milliseconds_is_not_mistaken_for_seconds():
    with pytest.raises(InvalidLog, match=r"step 8 .*'281ms' is not a number"):
        parse_step_times(log({**GOOD, 8: "281ms"}), 6, 10)


def test_invalid_log_lists_every_problem_and_names_the_source():
    values = {**GOOD, 7: "nan"}
    del values[9]
    with pytest.raises(InvalidLog) as info:
        parse_step_times(log(values), 6, 10, source="runs/af_off/train.log")
    message = str(info.value)
    assert message.startswith("runs/af_off/train.log: invalid step window 6..10")
    assert "step 7" in message and "step 9 is missing" in message


def test_ansi_coloured_log_is_valid_after_stripping():
    coloured = "\n".join(
        f"\x1b[31mstep: {s:2}\x1b[39m  \x1b[32mloss:  2.3\x1b[39m  "
        f"\x1b[33melapsed_time_per_step: 0.28{s % 10}s\x1b[39m\x1b[0m"
        for s in range(1, 11)
    )
    times = parse_step_times(coloured, 6, 10)
    assert times == {6: 0.286, 7: 0.287, 8: 0.288, 9: 0.289, 10: 0.280}


def test_strip_ansi_removes_colour_cursor_and_osc_sequences():
    text = "\x1b[1;32mok\x1b[0m \x1b[2K\x1b]0;title\x07done \x1b(B"
    assert strip_ansi(text) == "ok done "


def test_custom_pattern_with_named_groups_is_used():
    text = "it=6 t=0.5\nit=7 t=0.7\n"
    times = parse_step_times(text, 6, 7, pattern=r"it=(?P<step>\d+) t=(?P<value>\S+)")
    assert times == {6: 0.5, 7: 0.7}


def test_custom_pattern_value_with_unit_suffix_is_accepted():
    text = "it=6 t=0.5s\n"
    assert parse_step_times(text, 6, 6, pattern=r"it=(?P<step>\d+) t=(?P<value>\S+)") == {6: 0.5}


@pytest.mark.parametrize("pattern", [r"step: (\d+) (?P<value>\S+)", r"(?P<step>\d+) (\S+)", "("])
def test_pattern_without_step_and_value_groups_is_rejected(pattern):
    with pytest.raises(ValueError, match="pattern"):
        parse_step_times("step: 6 0.1", 6, 6, pattern=pattern)


def test_empty_window_is_rejected():
    with pytest.raises(ValueError, match="empty"):
        parse_step_times(log(GOOD), 10, 6)


def test_read_step_times_names_the_file(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(log({s: v for s, v in GOOD.items() if s != 6}))
    with pytest.raises(InvalidLog, match=f"{path}.*step 6 is missing"):
        read_step_times(path)
    path.write_text(log(GOOD))
    assert list(read_step_times(path)) == [6, 7, 8, 9, 10]


def test_missing_log_file_is_an_invalid_log(tmp_path):
    with pytest.raises(InvalidLog, match="cannot read"):
        read_step_times(tmp_path / "absent.log")


def test_mean_of_no_step_times_is_an_error():
    with pytest.raises(ValueError):
        mean_step_time({})
