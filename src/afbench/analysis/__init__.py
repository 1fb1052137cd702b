"""Pure analysis of run outputs: training logs, verdicts, profiler tables, statistics.

Nothing here imports torch or launches anything; every function takes text, paths or
DataFrames and returns plain values, DataFrames or dataclasses, raising the exception types
of :mod:`afbench.analysis.errors` when an input breaks the reference rules.
"""

# Submodules load on first use: config validation needs only steplog, and a worker of the
# command engine should not pay for pandas/scipy imports it never uses.
import importlib

_LAZY = {
    "COMPARABLE": "steptrace",
    "DEFAULT_FUSED_RMSNORM_NAMES": "kernels",
    "DEFAULT_PROFILE_STEPS": "steptrace",
    "DEFAULT_STEP_PATTERN": "steplog",
    "INCOMPARABLE": "steptrace",
    "InvalidLog": "errors",
    "KERNEL_COLUMNS": "kernels",
    "NO_GAIN": "verdict",
    "PHASE_COLUMNS": "steptrace",
    "ProfileIncomparable": "errors",
    "ProfileUnavailable": "errors",
    "ProfilingResult": "steptrace",
    "RMSNORM_PIECES": "kernels",
    "RUN_FAILED": "verdict",
    "SKIPPED": "verdict",
    "STEP_TRACE_COLUMNS": "steptrace",
    "UNAVAILABLE": "steptrace",
    "VERDICT_FIRST_STEP": "steplog",
    "VERDICT_LAST_STEP": "steplog",
    "build_kernel_table": "kernels",
    "describe": "stats",
    "diff_kernel_tables": "kernels",
    "find_step_trace": "steptrace",
    "gain_pct": "verdict",
    "load_kernel_table": "kernels",
    "mean_step_time": "steplog",
    "parse_step_times": "steplog",
    "percentile": "stats",
    "profiling_status": "steptrace",
    "quick_verdict": "verdict",
    "read_kernel_details": "kernels",
    "read_kernel_table": "kernels",
    "read_op_statistic": "kernels",
    "read_step_times": "steplog",
    "read_step_trace": "steptrace",
    "TraceSummary": "traces",
    "read_trace": "traces",
    "read_trace_events": "traces",
    "summarise_trace": "traces",
    "training_steps_of": "traces",
    "StepDeviceTime": "kernels",
    "kernel_details_per_step": "kernels",
    "us_to_ns": "timestamps",
    "Recompile": "recompiles",
    "find_recompiles": "recompiles",
    "recompile_caveat": "recompiles",
    "recompile_in_records": "recompiles",
    "recompile_in_window": "recompiles",
    "check_unique_steps": "steplog",
    "rmsnorm_evidence": "kernels",
    "rmsnorm_piece": "kernels",
    "strip_ansi": "steplog",
    "t_interval_of_gain": "stats",
    "top_n": "kernels",
    "validate_step_trace": "steptrace",
    "verdict_label": "verdict",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"afbench.analysis.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'afbench.analysis' has no attribute {name!r}")
