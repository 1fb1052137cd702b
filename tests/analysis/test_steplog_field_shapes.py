"""Step logs as the field writes them: decoy numbers, dynamo warnings, progress bars and
logs that every rank writes into (issue 10, items 1 and 5).

Shapes: torchtitan's step line (``torchtitan/components/metrics.py``, with torchtitan-npu's
``elapsed_time_per_step``), torch._dynamo's glog-style warnings (``W1201 hh:mm:ss.us pid
file:line] [frame/recompile] ...``, as in PyTorch issue 150859 and the recompile_limit
reports), tqdm bars with a postfix, and torchrun without ``--local-ranks-filter`` (torchtitan
issues 1056/1232: every rank prints every step line, no prefix).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from afbench.analysis.errors import InvalidLog
from afbench.analysis.steplog import (
    check_unique_steps,
    log_lines,
    parse_step_times,
    read_log,
    read_step_times,
)

HEADER = "[titan] 2025-11-29 11:00:{sec:02d},000 - root - INFO - "


def titan(step: int, seconds: float) -> str:
    return (
        HEADER.format(sec=step)
        + f"step: {step:2}  loss:  {2.5 - step / 100:8.5f}  grad_norm:  1.2345  "
        f"memory: 12.34GiB(20.50%)  tps: 3,650  tflops: 12.34  mfu: 3.21%  "
        f"elapsed_time_per_step: {seconds:.3f}s"
    )


def real_steps(n: int = 10) -> list[str]:
    return [titan(s, 0.27 + s / 1000) for s in range(1, n + 1)]


def test_decoy_step_6_5_is_not_step_6():
    lines = real_steps()
    # a fractional "step" (epoch progress) printed between real steps 6 and 7
    lines.insert(6, HEADER.format(sec=6) + "step: 6.5  loss: 2.44  elapsed_time_per_step: 9.999s")
    times = parse_step_times("\n".join(lines), 6, 10)
    assert times[6] == pytest.approx(0.276)
    assert sorted(times) == [6, 7, 8, 9, 10]


def test_step_followed_by_a_counter_is_not_a_step():
    lines = real_steps()
    lines.insert(7, "step: 7/10  elapsed_time_per_step: 9.999s")
    assert parse_step_times("\n".join(lines), 6, 10)[7] == pytest.approx(0.277)


def test_progress_bar_postfix_is_not_a_step_line():
    lines = real_steps()
    lines.insert(
        7,
        "Training:  70%|███████   | 7/10 [00:02<00:01,  3.1it/s, "
        "step: 7 elapsed_time_per_step: 9.999s]",
    )
    assert parse_step_times("\n".join(lines), 6, 10)[7] == pytest.approx(0.277)


@pytest.mark.parametrize(
    "decoy",
    [
        # the recompile-limit warning block, with a guard reason quoting a step line
        "W1201 12:00:07.123000 4242 torch/_dynamo/convert_frame.py:964] [0/8]    last reason: "
        "0/7: L['line'] == 'step: 7 elapsed_time_per_step: 9.999s'",
        "[rank0]:W1201 12:00:07.123000 4242 torch/_dynamo/guards.py:2997] [0/8] step: 7 "
        "elapsed_time_per_step: 9.999s",
        "[0/8] step: 7  loss: 2.3  elapsed_time_per_step: 9.999s",
    ],
)
def test_dynamo_warning_lines_are_never_step_lines(decoy):
    lines = real_steps()
    lines.insert(7, decoy)
    assert parse_step_times("\n".join(lines), 6, 10)[7] == pytest.approx(0.277)


def test_every_step_once_per_rank_names_step_count_and_rank_filter():
    # two ranks, no prefix: each step line arrives twice, interleaved
    lines = [line for s in range(1, 11) for line in (titan(s, 0.28), titan(s, 0.29))]
    with pytest.raises(InvalidLog) as info:
        parse_step_times("\n".join(lines), 6, 10, source="stdout.log")
    msg = str(info.value)
    assert "step 6 is duplicated (2 times, lines 11, 12)" in msg
    assert "every step appears 2 times" in msg
    assert "several ranks are logging" in msg and "LOG_RANK" in msg


def test_one_duplicated_step_does_not_blame_the_ranks():
    lines = real_steps()
    lines.insert(8, titan(8, 0.5))
    with pytest.raises(InvalidLog, match=r"step 8 is duplicated \(2 times") as info:
        parse_step_times("\n".join(lines), 6, 10)
    assert "ranks" not in str(info.value)


def test_check_unique_steps_rejects_a_repeated_step_instead_of_keeping_the_first():
    with pytest.raises(
        InvalidLog, match=r"console.log: step 3 is duplicated \(2 times, lines 3, 9\)"
    ):
        check_unique_steps([(1, 1), (2, 2), (3, 3), (3, 9)], source="console.log")


def test_check_unique_steps_accepts_each_step_once():
    assert check_unique_steps([(1, 4), (2, 8), (3, 12)]) is None


def test_a_merged_log_with_torchrun_rank_prefixes_is_read_for_rank_0():
    # torchrun --tee 3 / a merged console: every line behind its [rankN]: prefix, ranks
    # interleaved, rank 1's numbers different from rank 0's
    lines = [
        f"[rank{r}]:" + titan(s, 0.28 if r == 0 else 0.35) for s in range(1, 11) for r in (1, 0)
    ]
    times = parse_step_times("\n".join(lines), 6, 10, source="stdout.log")
    assert list(times) == [6, 7, 8, 9, 10]
    assert all(t == pytest.approx(0.28) for t in times.values())


def test_a_rank_0_step_logged_twice_behind_its_prefix_is_still_an_error():
    lines = [f"[rank{r}]:" + titan(s, 0.28) for s in range(1, 11) for r in (0, 1)]
    lines.insert(12, "[rank0]:" + titan(7, 0.5))
    with pytest.raises(InvalidLog, match=r"step 7 is duplicated \(2 times"):
        parse_step_times("\n".join(lines), 6, 10)


def test_a_long_run_of_duplicates_is_listed_three_times_then_counted():
    lines = [line for s in range(1, 31) for line in (titan(s, 0.28), titan(s, 0.29))]
    with pytest.raises(InvalidLog) as info:
        parse_step_times("\n".join(lines), 6, 30)
    msg = str(info.value)
    assert msg.count("is duplicated") == 3 and "and 22 more duplicated steps" in msg
    assert "every step appears 2 times" in msg


# tqdm writing to a redirected file: every redraw starts with a carriage return, and the
# training loop's print() lands right after the last redraw, on the same physical line.
# tests/fixtures/logs/tqdm_glued.log was written by real tqdm (make_tqdm_glued.py beside it).
TQDM_LOG = Path(__file__).parent.parent / "fixtures" / "logs" / "tqdm_glued.log"
BAR = "\rTraining:  {pct:>2d}%|{fill:<10}| {n}/10 [00:01<00:00, 1.2it/s, loss=2.31, step={n}]"


def glued_log(steps: int = 10, redraws: int = 3) -> str:
    """``redraws`` bar updates, then the step's metrics line with no newline before it; the
    bar's postfix names the step that just ended (``step=3`` before ``step: 4``)."""
    out = []
    for step in range(1, steps + 1):
        bars = "".join(
            BAR.format(pct=(step - 1) * 10, fill="█" * (step - 1), n=step - 1)
            for _ in range(redraws)
        )
        out.append(
            bars + f"step: {step:2d}  loss: {2.5 - step / 100:8.5f}  "
            f"elapsed_time_per_step: {0.27 + step / 1000:.6f}s\n"
        )
    return "".join(out) + BAR.format(pct=100, fill="█" * 10, n=10) + "\n"


#: A pattern loose enough to read the bar's own ``step=`` postfix if the bar were kept.
LOOSE = (
    r"\bstep[:=]\s*(?P<step>\d+)(?:.*?\bloss[:=]\s*(?P<loss>[^\s,\]]+))?"
    r".*?\belapsed_time_per_step:\s*(?P<value>\S+?)s?(?=\s|$)"
)


def test_a_tqdm_bar_glued_before_each_metrics_line_is_cut_off_and_the_line_read_once():
    times = parse_step_times(glued_log(), 6, 10, source="stdout.log")
    assert times == {s: pytest.approx(0.27 + s / 1000) for s in range(6, 11)}


def test_the_bars_own_step_postfix_is_never_read_as_a_step():
    # with the bar kept, LOOSE would read "step=5" of the bar before "step:  6" (step 5 twice)
    times = parse_step_times(glued_log(), 6, 10, LOOSE)
    assert times == {s: pytest.approx(0.27 + s / 1000) for s in range(6, 11)}


def test_a_log_written_by_real_tqdm_parses_from_the_file_with_physical_line_numbers():
    raw = TQDM_LOG.read_bytes()
    assert b"\r" in raw and b"step=3]step:  4" in raw  # the shape under test
    assert read_step_times(TQDM_LOG, 6, 10) == {
        s: pytest.approx(0.27 + s / 1000) for s in range(6, 11)
    }
    assert read_step_times(TQDM_LOG, 6, 10, LOOSE) == read_step_times(TQDM_LOG, 6, 10)
    # line numbers count newlines, not redraws: a duplicated step names the editor's lines
    lines = list(log_lines(read_log(TQDM_LOG)))
    assert [n for n, line in lines if line.startswith("step:  7")] == [7]


def test_the_bar_alone_on_a_line_and_a_bar_without_total_leave_nothing_to_read():
    assert list(log_lines(BAR.format(pct=30, fill="███", n=3) + "\n")) == []
    assert list(log_lines("\rTraining: 7it [00:02, 3.10it/s, loss=2.4, step=7]\n")) == []
    # text after a bar that has no total is kept
    assert list(log_lines("\rTraining: 7it [00:02, 3.10s/it]step: 8  x\n")) == [(1, "step: 8  x")]


def test_a_metrics_line_that_only_looks_like_a_bar_prefix_keeps_its_step():
    # a logger header with a time in brackets is not a bar: nothing before step: is lost
    line = "2025-11-29 [11:00:06,123] INFO step:  6  elapsed_time_per_step: 0.3s"
    assert [t for _, t in log_lines(line)] == [line]


# Bars without tqdm's [elapsed, rate] part, written by real tqdm with a bar_format and by a
# loop's own "\r[#####     ] 4/12" bar (make_bars_glued.py beside the fixtures): the metrics
# line follows the bar's count or its ", loss=2.49, step=1" postfix on the same line.
LOGS = Path(__file__).parent.parent / "fixtures" / "logs"
NO_RATE = {
    "tqdm_no_rate_glued.log": b"| 5/12 , loss=2.45, step=5step:  6",
    "tqdm_ascii_no_rate_glued.log": b"|####1     | 5/12 , loss=2.45, step=5 step:  6",
    "hand_bar_glued.log": b"\r[#####       ] 5/12step:  6",
}


@pytest.mark.parametrize("name", sorted(NO_RATE))
def test_a_bar_without_a_rate_glued_before_each_metrics_line_is_cut_off(name):
    log = LOGS / name
    assert NO_RATE[name] in log.read_bytes()  # the shape under test
    expected = {s: pytest.approx(0.27 + s / 1000) for s in range(6, 11)}
    assert read_step_times(log, 6, 10) == expected
    # the bar's own step= postfix is never read: LOOSE would take "step=5" for step 6's line
    assert read_step_times(log, 6, 10, LOOSE) == expected
    lines = list(log_lines(read_log(log)))
    assert [n for n, line in lines if line.startswith("step:  7")] == [7]
    assert all("%|" not in line and "/12" not in line for _, line in lines)


@pytest.mark.parametrize(
    "bar",
    [
        "Training:  40%|####      | 4/10 ",
        "\rTraining:  30%|###       | 3/10\rTraining:  40%|####      | 4/10 ",
        "Training:  40%|████      | 4/10 [00:01<00:02]",
        "[####      ] 4/10 ",
        "Epoch [1/3]: [====>     ] 4/10",
    ],
)
def test_a_hand_made_or_rateless_bar_before_a_metrics_line_keeps_the_line(bar):
    metrics = "step: 5 loss: 2.31 elapsed_time_per_step: 0.281s"
    assert [t for _, t in log_lines(bar + metrics + "\n")] == [metrics]
    text = "\n".join(
        bar + f"step: {s} loss: 2.31 elapsed_time_per_step: 0.28{s}s" for s in range(1, 11)
    )
    assert parse_step_times(text, 6, 9) == {s: pytest.approx(0.28 + s / 1000) for s in range(6, 10)}


def test_text_that_is_not_a_bar_before_a_step_is_kept():
    for line in (
        "[rank0]: step:  6  elapsed_time_per_step: 0.3s",
        "epoch 1 [12/40 batches] step: 6  elapsed_time_per_step: 0.3s",
        "progress 60% | step: 6  elapsed_time_per_step: 0.3s",
    ):
        assert [t for _, t in log_lines(line)] == [line]
