"""Recompiles inside the measured window, from the log (every engine) and from the builtin
engine's dynamo counters (issue 10, item 4).

Log shapes are torch._dynamo's own: the glog header ``<level><mmdd> <time> <pid>
<file>:<line>] [<frame>/<recompile>]``, the default ``hit config.recompile_limit (8)`` /
``cache_size_limit (8)`` warning block (PyTorch issue 150859 and the public recompile_limit
reports), and ``[__recompiles] Recompiling function`` lines under ``TORCH_LOGS=recompiles``.
"""

from __future__ import annotations

from afbench.analysis.recompiles import (
    find_recompiles,
    recompile_caveat,
    recompile_in_records,
    recompile_in_window,
)
from afbench.analysis.steplog import parse_step_times

PREFIX = "[rank0]:[titan] 2025-11-29 11:00:00,000 - root - INFO - "


def step(n: int) -> str:
    return f"{PREFIX}step: {n:2}  loss:  2.31000  elapsed_time_per_step: 0.{270 + n}s"


LIMIT_BLOCK = [
    "[rank0]:W1201 12:00:07.332000 4242 torch/_dynamo/convert_frame.py:1551] [0/8] "
    "torch._dynamo hit config.recompile_limit (8)",
    "[rank0]:W1201 12:00:07.332000 4242 torch/_dynamo/convert_frame.py:1551] [0/8]    "
    "function: 'forward' (/work/model.py:120)",
    "[rank0]:W1201 12:00:07.332000 4242 torch/_dynamo/convert_frame.py:1551] [0/8]    "
    "last reason: 0/7: tensor 'L['x']' size mismatch at index 1. expected 256, actual 7",
    "[rank0]:W1201 12:00:07.332000 4242 torch/_dynamo/convert_frame.py:1551] [0/8] To log all "
    'recompilation reasons, use TORCH_LOGS="recompiles".',
]

RECOMPILING = [
    "V1201 12:00:05.101000 4242 torch/_dynamo/guards.py:2997] [0/1] [__recompiles] "
    "Recompiling function forward in /work/model.py:120",
    "V1201 12:00:05.101000 4242 torch/_dynamo/guards.py:2997] [0/1] [__recompiles]     "
    "triggered by the following guard failure(s):",
    "V1201 12:00:05.101000 4242 torch/_dynamo/guards.py:2997] [0/1] [__recompiles]     "
    "- 0/0: tensor 'L['input_ids']' size mismatch at index 1. expected 256, actual 200",
]


def log(lines_after: dict[int, list[str]], steps: int = 10) -> str:
    out: list[str] = []
    for n in range(1, steps + 1):
        out.append(step(n))
        out += lines_after.get(n, [])
    return "\n".join(out) + "\n"


def test_limit_warning_during_step_8_is_flagged_after_step_7():
    text = log({7: LIMIT_BLOCK})
    rec = recompile_in_window(text, 6, 10)
    assert rec is not None and rec.after_step == 7
    assert "hit config.recompile_limit (8)" in rec.text
    assert recompile_caveat(rec) == "recompiled inside the measured window, after step 7"


def test_recompile_warnings_do_not_break_the_strict_step_parse():
    text = log({7: LIMIT_BLOCK, 8: RECOMPILING})
    assert sorted(parse_step_times(text, 6, 10)) == [6, 7, 8, 9, 10]


def test_recompiling_function_line_is_found_with_its_step():
    found = find_recompiles(log({2: RECOMPILING}))
    assert [(r.after_step, r.line) for r in found] == [(2, 3)]
    assert "Recompiling function forward" in found[0].text


def test_recompile_during_warmup_is_not_in_the_window():
    # after step 4 the recompile runs in step 5, the last warm-up step
    assert recompile_in_window(log({4: RECOMPILING}), 6, 10) is None


def test_recompile_right_before_the_window_counts_for_its_first_step():
    rec = recompile_in_window(log({5: RECOMPILING}), 6, 10)
    assert rec is not None and rec.after_step == 5


def test_older_cache_size_limit_warning_is_recognised():
    old = (
        "[2024-04-16 22:28:39,856] torch._dynamo.convert_frame: [WARNING] torch._dynamo hit "
        "config.cache_size_limit (8)"
    )
    rec = recompile_in_window(log({8: [old]}), 6, 10)
    assert rec is not None and rec.after_step == 8


def test_compile_before_the_first_step_is_after_step_0():
    text = RECOMPILING[0] + "\n" + log({})
    assert [r.after_step for r in find_recompiles(text)] == [0]


def test_log_without_recompiles_has_none():
    assert recompile_in_window(log({}), 6, 10) is None


def test_graph_count_growing_in_a_window_step_is_a_recompile():
    graphs = {1: 3, 2: 3, 3: 3, 4: 3, 5: 3, 6: 3, 7: 3, 8: 4, 9: 4, 10: 4}
    records = [{"step": s, "dynamo_unique_graphs": g} for s, g in graphs.items()]
    rec = recompile_in_records(records, 6, 10)
    assert rec is not None and rec.after_step == 7 and "3 -> 4" in rec.text


def test_first_compile_and_eager_records_are_not_recompiles():
    compiled = [{"step": s, "dynamo_unique_graphs": 2 if s > 1 else 1} for s in range(1, 11)]
    eager = [{"step": s, "dynamo_unique_graphs": None} for s in range(1, 11)]
    assert recompile_in_records(compiled, 6, 10) is None
    assert recompile_in_records(eager, 6, 10) is None
