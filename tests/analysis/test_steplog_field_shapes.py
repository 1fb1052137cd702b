"""Step logs as the field writes them: decoy numbers, dynamo warnings, progress bars and
logs that every rank writes into (issue 10, items 1 and 5).

Shapes: torchtitan's step line (``torchtitan/components/metrics.py``, with torchtitan-npu's
``elapsed_time_per_step``), torch._dynamo's glog-style warnings (``W1201 hh:mm:ss.us pid
file:line] [frame/recompile] ...``, as in PyTorch issue 150859 and the recompile_limit
reports), tqdm bars with a postfix, and torchrun without ``--local-ranks-filter`` (torchtitan
issues 1056/1232: every rank prints every step line, no prefix).
"""

from __future__ import annotations

import pytest

from afbench.analysis.errors import InvalidLog
from afbench.analysis.steplog import parse_step_times
from afbench.analysis.steplog import check_unique_steps

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
    with pytest.raises(InvalidLog, match=r"console.log: step 3 is duplicated \(2 times, lines 3, 9\)"):
        check_unique_steps([(1, 1), (2, 2), (3, 3), (3, 9)], source="console.log")


def test_check_unique_steps_accepts_each_step_once():
    assert check_unique_steps([(1, 4), (2, 8), (3, 12)]) is None


def test_a_merged_log_with_torchrun_rank_prefixes_is_read_for_rank_0():
    # torchrun --tee 3 / a merged console: every line behind its [rankN]: prefix, ranks
    # interleaved, rank 1's numbers different from rank 0's
    lines = [f"[rank{r}]:" + titan(s, 0.28 if r == 0 else 0.35)
             for s in range(1, 11) for r in (1, 0)]
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
