"""Step lines in two shapes real tools print, which the strict parser used to drop whole
(every step "missing"): a bracketed counter on the line (``Epoch [1/3] step: 6 ...``,
Megatron/MindSpeed-style and many PyTorch scripts) and a glog/absl header naming the
training script's file (``I1203 09:00:00.123456 12345 train.py:88] step: 6 ...``, absl
logging). Both fixtures also hold the lines that must stay out: dynamo's recompile warnings
(glog records of ``torch/_dynamo`` files, tagged with a compile id ``[0/8]``) quoting a step.
A line that reads like a step line but is still left out is named, with the reason, in the
error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from afbench.analysis.errors import InvalidLog
from afbench.analysis.steplog import excluded_step_line, parse_step_times, read_step_times

LOGS = Path(__file__).parent.parent / "fixtures" / "logs"
EXPECTED = {s: pytest.approx(0.27 + s / 1000) for s in range(6, 11)}
SHAPES = {
    "epoch_counter_steps.log": "Epoch [2/3] Batch [2/4] step: 6 loss: 2.4400",
    "absl_glog_steps.log": "I1203 09:00:07.123462 12345 train.py:88] step: 6 loss: 2.4400",
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_real_tool_step_lines_parse_with_their_decoys_left_out(name):
    text = (LOGS / name).read_text()
    assert SHAPES[name] in text and "torch/_dynamo" in text  # the shapes under test
    assert read_step_times(LOGS / name, 6, 10) == EXPECTED
    assert read_step_times(LOGS / name, 1, 12)[1] == pytest.approx(1.912)


@pytest.mark.parametrize(
    "line",
    [
        "Epoch [1/3] step: 6 loss: 2.31 elapsed_time_per_step: 0.5s",
        "epoch [1/3] iter [6/100] step: 6 loss: 2.31 elapsed_time_per_step: 0.5s",
        "I1203 09:00:00.123456 12345 train.py:88] step: 6 loss: 2.31 elapsed_time_per_step: 0.5s",
        "I1203 09:00:00.123456 12345 /srv/app/trainer/loop.py:88] step: 6 elapsed_time_per_step: 0.5s",
        "[rank0]:I1203 09:00:00.123456 12345 train.py:88] Epoch [1/3] step: 6 elapsed_time_per_step: 0.5s",
    ],
)
def test_the_newcomers_lines_are_step_lines(line):
    assert excluded_step_line(line) is None
    assert parse_step_times(line, 6, 6) == {6: 0.5}


def test_rank_prefixed_counter_lines_keep_rank_0_and_unprefixed_ones_blame_the_ranks():
    def line(s, t):
        return f"Epoch [1/3] step: {s} loss: 2.31 elapsed_time_per_step: {t}s"

    merged = "\n".join(
        f"[default{r}]:" + line(s, 0.28 + r / 10) for s in range(1, 11) for r in (1, 0)
    )
    assert parse_step_times(merged, 6, 10) == dict.fromkeys(range(6, 11), 0.28)
    both = "\n".join(line(s, 0.28) for s in range(1, 11) for _ in (0, 1))
    with pytest.raises(InvalidLog, match="several ranks are logging"):
        parse_step_times(both, 6, 10)


def test_a_step_like_line_still_left_out_is_named_with_its_reason():
    lines = [
        f"I1203 09:00:0{s}.000000 1 train.py:88] step: {s} elapsed_time_per_step: 0.3s"
        for s in range(1, 6)
    ]
    lines += [
        "[1/3] step: 6 loss: 2.31 elapsed_time_per_step: 0.3s",
        "W1203 09:00:07.000000 1 torch/_dynamo/guards.py:2997] step: 7 elapsed_time_per_step: 0.3s",
    ]
    with pytest.raises(InvalidLog) as info:
        parse_step_times("\n".join(lines), 6, 7, source="stdout.log")
    msg = str(info.value)
    assert msg.startswith("stdout.log: invalid step window 6..7: ")
    assert (
        "step 6 is missing; line 6 (it starts with a dynamo compile id ([frame/recompile], "
        "e.g. [0/8])) reads like its step line but is not one (if it is your loop's step "
        "line, set engine.step_pattern to match it)"
    ) in msg
    assert "step 7 is missing; line 7 (it is a glog record of a PyTorch file" in msg


def test_a_step_with_no_line_at_all_is_only_missing():
    with pytest.raises(InvalidLog, match=r"step 7 is missing$"):
        parse_step_times("step: 6 elapsed_time_per_step: 0.3s", 6, 7)
