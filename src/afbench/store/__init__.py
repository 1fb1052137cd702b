"""The output directory's owner: its file layout and a typed, versioned model per file.

An experiment's output directory (``outputs/<date>/<time>-<experiment>-<pid>/``) and a sweep
folder (``multirun/...``) are read and written only through this package:

- :mod:`~afbench.store.layout`: the file names and the directory objects :class:`OutDir`,
  :class:`RunDir`, :class:`SweepDir` (their ``plan()``, ``experiment()``, ``summary()``,
  ``status()``, ``result()`` readers), and the strict parse of a run's measured window;
- :mod:`~afbench.store.versioning`: the directory's one ``schema_version`` and the upgrade
  chain every file is read through (:class:`FileSchema`); unknown keys are an error naming
  the file and the key;
- one module per file family: :mod:`~afbench.store.experiment` (experiment.json),
  :mod:`~afbench.store.result` (result.json, metrics.jsonl lines),
  :mod:`~afbench.store.summary` and :mod:`~afbench.store.comparison` (summary.json),
  :mod:`~afbench.store.sweep` (sweep_summary.json), :mod:`~afbench.store.run`
  (plan.json, runspec.json, status.json: models of :mod:`afbench.runspec`),
  :mod:`~afbench.store.names` (the file names).

Every name below is importable from ``afbench.store``; each loads its module on first use
(PEP 562), so that the worker, which writes result.json, does not build the summary's models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "layout": (
        "OutDir",
        "RunDir",
        "SweepDir",
        "window_step_times",
        "window_problem",
        "experiment_dirs",
        "basic_sweep",
        "PLAN",
        "EXPERIMENT",
        "SUMMARY",
        "REPORT_MD",
        "REPORT_HTML",
        "RUNS",
        "RUNSPEC",
        "STATUS",
        "RESULT",
        "STDOUT_LOG",
        "METRICS",
        "SWEEP_SUMMARY",
        "MULTIRUN_YAML",
        "HYDRA_OVERRIDES",
        "CONFIG_YAML",
    ),
    "versioning": ("SCHEMA_VERSION", "FileSchema", "Record", "StoredFile", "OpenRecord"),
    "run": ("PLAN_FILE", "RUNSPEC_FILE", "STATUS_FILE"),
    "experiment": (
        "ExperimentRecord",
        "Asset",
        "Assets",
        "HostCalibration",
        "HostFingerprint",
        "Provenance",
        "EXPERIMENT_FILE",
    ),
    "result": (
        "StepRecord",
        "SwitchRecord",
        "RankAgreement",
        "Environment",
        "Contention",
        "RankMemory",
        "RunMemory",
        "Efficiency",
        "FLAT_FIGURES",
        "nest_figures",
        "RunResult",
        "RESULT_FILE",
        "load_result",
    ),
    "comparison": (
        "WindowMetrics",
        "MEMORY_MEASURES",
        "Memory",
        "Side",
        "SetAsidePair",
        "Speed",
        "CurvePoint",
        "Divergence",
        "Parity",
        "Compile",
        "MemoryChange",
        "Comparison",
    ),
    "summary": (
        "PhaseMeans",
        "ProfilingComparison",
        "KernelRow",
        "KernelDiffRow",
        "StepDeviceRow",
        "StepDeviceTime",
        "PieceCount",
        "FusedCount",
        "FusedEvidence",
        "RunRow",
        "PhaseParameters",
        "Summary",
        "SUMMARY_FILE",
        "load_summary",
        "read_summary",
    ),
    "sweep": (
        "SweepRow",
        "EffectPair",
        "MainEffect",
        "SweepSummary",
        "SWEEP_SUMMARY_FILE",
        "load_sweep_summary",
        "read_sweep_summary",
    ),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'afbench.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"afbench.store.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from afbench.store.comparison import *  # noqa: F401,F403
    from afbench.store.experiment import *  # noqa: F401,F403
    from afbench.store.layout import *  # noqa: F401,F403
    from afbench.store.result import *  # noqa: F401,F403
    from afbench.store.run import *  # noqa: F401,F403
    from afbench.store.summary import *  # noqa: F401,F403
    from afbench.store.sweep import *  # noqa: F401,F403
    from afbench.store.versioning import *  # noqa: F401,F403
