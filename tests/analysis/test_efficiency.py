"""Memory, TFLOPs and MFU read from torchtitan's step lines (afbench.analysis.efficiency), and
the command engine's "not reported"."""

from __future__ import annotations

import pytest

from afbench.analysis.efficiency import TITAN_MEMORY_SOURCE, not_reported, titan_efficiency
from afbench.engines.torchtitan.parsers import parse_titan_log

# torchtitan 0.3.0's colours (torchtitan/tools/utils.py Color) and header, docs/reference.md §7.
RED, GREEN, ORANGE, TURQ, BLUE, CYAN, MAGENTA, RESET = (
    "\033[31m",
    "\033[32m",
    "\033[38;2;180;60;0m",
    "\033[38;2;54;234;195m",
    "\033[34m",
    "\033[36m",
    "\033[35m",
    "\033[39m",
)
HEADER = "[rank0]:[titan] 2026-09-21 10:15:06,000 - root - INFO - "


def titan_line(
    step: int,
    gib: float,
    pct: float,
    tps: float,
    tflops: float,
    mfu: float | None,
    prefix: str = "",
) -> str:
    """One step line as torchtitan's MetricsProcessor.log prints it."""
    mfu_str = f"{mfu:.2f}%" if mfu is not None else "N/A"
    return (
        f"{HEADER}{RED}{prefix}step: {step:2}  {GREEN}loss: {2.5:8.5f}  "
        f"{ORANGE}grad_norm: {1.25:7.4f}  {TURQ}memory: {gib:5.2f}GiB({pct:.2f}%)  "
        f"{BLUE}tps: {round(tps):,}  {CYAN}tflops: {tflops:,.2f}  {MAGENTA}mfu: {mfu_str}{RESET}"
    )


def test_window_peak_is_the_largest_memory_line_and_tflops_mfu_are_window_means():
    memory = {1: 61.5, 2: 38.27, 3: 38.29, 4: 38.31, 5: 38.30}  # step 1 holds compile workspaces
    tflops = {1: 0.47, 2: 1025.5, 3: 1030.25, 4: 1010.0, 5: 1020.0}
    mfu = {1: 0.13, 2: 7.12, 3: 7.20, 4: 7.05, 5: 7.10}
    lines = [titan_line(s, memory[s], memory[s] / 0.616, 3000.0, tflops[s], mfu[s]) for s in memory]
    # a validation line in the window must not count as a training step
    lines.insert(3, titan_line(3, 70.0, 99.0, 1.0, 1.0, 1.0, prefix="validate "))
    out = titan_efficiency(parse_titan_log("\n".join(lines)), first_step=2, last_step=5)
    assert out["peak_memory_reserved_gib"] == max(memory[s] for s in range(2, 6))
    assert out["peak_memory_reserved_pct"] == pytest.approx(round(38.31 / 0.616, 2))
    assert out["tflops_per_device"] == pytest.approx(sum(tflops[s] for s in range(2, 6)) / 4)
    assert out["mfu_pct"] == pytest.approx(sum(mfu[s] for s in range(2, 6)) / 4)
    assert out["memory_source"] == {"key": TITAN_MEMORY_SOURCE, "args": {}}  # a catalog key
    assert out["peak_memory_allocated_gib"] is None and out["peak_rss_gib"] is None


def test_mfu_na_when_torchtitan_knows_no_peak_while_tflops_stay():
    text = "\n".join(titan_line(s, 12.0, 20.0, 1234.0, 3.5, None) for s in range(1, 4))
    out = titan_efficiency(parse_titan_log(text), 1, 3)
    assert out["mfu_pct"] is None and out["tflops_per_device"] == pytest.approx(3.5)


def test_lines_without_memory_fields_say_not_reported():
    text = "step:  1  loss:  2.50000  elapsed_time_per_step: 0.5s\nstep:  2  loss:  2.4  elapsed_time_per_step: 0.5s"
    out = titan_efficiency(parse_titan_log(text), 1, 2)
    assert out["peak_memory_reserved_gib"] is None and out["tflops_per_device"] is None
    assert out["memory_source"] == {
        "key": "src_titan_no_field",
        "args": {"field": "memory:", "first": 1, "last": 2},
    }
    assert out["tflops_source"]["args"]["field"] == "tflops:"


def test_command_engine_reports_no_memory():
    out = not_reported("command")
    assert out["memory_source"] == {"key": "src_not_reported", "args": {"engine": "command"}}
    assert all(
        out[k] is None
        for k in (
            "peak_memory_allocated_gib",
            "peak_memory_reserved_gib",
            "peak_rss_gib",
            "tflops_per_device",
            "mfu_pct",
        )
    )
