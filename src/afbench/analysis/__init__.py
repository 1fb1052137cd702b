"""Pure analysis of run outputs: training logs, verdicts, profiler tables, statistics.

Nothing here imports torch or launches anything; every function takes text, paths or
DataFrames and returns plain values, DataFrames or dataclasses, raising the exception types
of :mod:`afbench.analysis.errors` when an input breaks the reference rules.
"""

from afbench.analysis.errors import InvalidLog, ProfileIncomparable, ProfileUnavailable
from afbench.analysis.kernels import (
    DEFAULT_FUSED_RMSNORM_NAMES,
    KERNEL_COLUMNS,
    RMSNORM_PIECES,
    build_kernel_table,
    diff_kernel_tables,
    load_kernel_table,
    read_kernel_details,
    read_kernel_table,
    read_op_statistic,
    rmsnorm_evidence,
    rmsnorm_piece,
    top_n,
)
from afbench.analysis.stats import describe, percentile, t_interval_of_gain
from afbench.analysis.steplog import (
    DEFAULT_STEP_PATTERN,
    VERDICT_FIRST_STEP,
    VERDICT_LAST_STEP,
    mean_step_time,
    parse_step_times,
    read_step_times,
    strip_ansi,
)
from afbench.analysis.steptrace import (
    COMPARABLE,
    DEFAULT_PROFILE_STEPS,
    INCOMPARABLE,
    PHASE_COLUMNS,
    STEP_TRACE_COLUMNS,
    UNAVAILABLE,
    ProfilingResult,
    find_step_trace,
    profiling_status,
    read_step_trace,
    validate_step_trace,
)
from afbench.analysis.verdict import (
    NO_GAIN,
    RUN_FAILED,
    SKIPPED,
    gain_pct,
    quick_verdict,
    verdict_label,
)

__all__ = [
    "COMPARABLE",
    "DEFAULT_FUSED_RMSNORM_NAMES",
    "DEFAULT_PROFILE_STEPS",
    "DEFAULT_STEP_PATTERN",
    "INCOMPARABLE",
    "KERNEL_COLUMNS",
    "NO_GAIN",
    "PHASE_COLUMNS",
    "RMSNORM_PIECES",
    "RUN_FAILED",
    "SKIPPED",
    "STEP_TRACE_COLUMNS",
    "UNAVAILABLE",
    "VERDICT_FIRST_STEP",
    "VERDICT_LAST_STEP",
    "InvalidLog",
    "ProfileIncomparable",
    "ProfileUnavailable",
    "ProfilingResult",
    "build_kernel_table",
    "describe",
    "diff_kernel_tables",
    "find_step_trace",
    "gain_pct",
    "load_kernel_table",
    "mean_step_time",
    "parse_step_times",
    "percentile",
    "profiling_status",
    "quick_verdict",
    "read_kernel_details",
    "read_kernel_table",
    "read_op_statistic",
    "read_step_times",
    "read_step_trace",
    "rmsnorm_evidence",
    "rmsnorm_piece",
    "strip_ansi",
    "t_interval_of_gain",
    "top_n",
    "validate_step_trace",
    "verdict_label",
]
