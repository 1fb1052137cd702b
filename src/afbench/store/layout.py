"""The output directory's file layout: where each file lies, and its typed reader.

An experiment's output directory (``outputs/<date>/<time>-<experiment>-<pid>/``) holds
``plan.json``, ``experiment.json``, ``summary.json``, ``report.md``, ``report.html`` and one
folder per run under ``runs/<run_id>/`` (``runspec.json``, ``status.json``, ``result.json``,
``stdout.log``, ``metrics.jsonl``); a sweep folder (``multirun/...``) holds Hydra's
``multirun.yaml``, ``sweep_summary.json`` and one experiment directory per job (file names:
:mod:`afbench.store.names`). :class:`OutDir`, :class:`RunDir` and :class:`SweepDir` read
those files through their :class:`afbench.store.versioning.FileSchema` (any version, upgraded;
OutputError naming the file and the key when one does not fit) and write them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from afbench.analysis.steplog import DEFAULT_STEP_PATTERN, read_step_times
from afbench.runspec import Plan, RunSpec, RunStatus
from afbench.store.names import (
    CONFIG_YAML,
    EXPERIMENT,
    HYDRA_OVERRIDES,
    METRICS,
    MULTIRUN_YAML,
    PLAN,
    REPORT_HTML,
    REPORT_MD,
    RESULT,
    RUNS,
    RUNSPEC,
    STATUS,
    STDOUT_LOG,
    SUMMARY,
    SWEEP_SUMMARY,
)

if TYPE_CHECKING:
    from afbench.store.experiment import ExperimentRecord
    from afbench.store.result import RunResult
    from afbench.store.summary import Summary

__all__ = [
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
]


@dataclass(frozen=True)
class RunDir:
    """One run's folder, ``<out>/runs/<run_id>/``."""

    path: Path

    @property
    def stdout_log(self) -> Path:
        return self.path / STDOUT_LOG

    @property
    def result_path(self) -> Path:
        return self.path / RESULT

    def status(self) -> RunStatus | None:
        """``status.json`` as :class:`RunStatus`; None when the run never started (no file).

        Raises OutputError naming the file when it is not a valid status."""
        from afbench.store.run import STATUS_FILE

        path = self.path / STATUS
        return STATUS_FILE.read(path) if path.is_file() else None

    def result(self) -> RunResult | None:
        """``result.json`` as :class:`RunResult`; None when the run wrote none (failed,
        skipped). Raises OutputError naming the file when it does not fit the schema."""
        from afbench.store.result import RESULT_FILE

        return RESULT_FILE.read(self.result_path) if self.result_path.is_file() else None


@dataclass(frozen=True)
class OutDir:
    """One experiment's output directory (a single run's, or one sweep job's)."""

    path: Path

    @property
    def plan_path(self) -> Path:
        return self.path / PLAN

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    @property
    def report_html(self) -> Path:
        return self.path / REPORT_HTML

    @property
    def report_md(self) -> Path:
        return self.path / REPORT_MD

    def is_experiment(self) -> bool:
        """Whether the folder holds a finished experiment (plan.json and summary.json)."""
        return self.plan_path.is_file() and self.summary_path.is_file()

    def plan(self) -> Plan:
        """``plan.json``. Raises OutputError naming the file when it does not fit."""
        from afbench.store.run import PLAN_FILE

        return PLAN_FILE.read(self.plan_path)

    def summary(self) -> Summary:
        """``summary.json`` (any version). Raises OutputError naming the file."""
        from afbench.store.summary import SUMMARY_FILE

        return SUMMARY_FILE.read(self.summary_path)

    def experiment(self) -> ExperimentRecord:
        """``experiment.json`` (any version); an empty record (no config) when absent
        (directories of early versions). Raises OutputError naming the file and the key."""
        from afbench.store.experiment import EXPERIMENT_FILE, ExperimentRecord

        path = self.path / EXPERIMENT
        return EXPERIMENT_FILE.read(path) if path.is_file() else ExperimentRecord()

    def run(self, spec: RunSpec) -> RunDir:
        """The folder of ``spec``: always ``runs/<run_id>`` here, never ``spec.run_dir`` (the
        absolute path it was planned at), so a moved or copied directory reads only its own
        runs. A run whose folder is missing here reads as never run (``status()`` and
        ``result()`` are None), even while the original directory still holds it."""
        return RunDir(self.path / RUNS / spec.run_id)

    def recorded_runs_missing(self) -> list[Path]:
        """The folders ``runs/<run_id>`` (:meth:`run`) that are missing here, or hold no
        ``status.json`` (then that file is named), although
        ``summary.json`` records their run as having run (a status other than ``NOT_RUN``:
        ``OK``, ``FAILED`` with its result, ``SKIPPED``), in the summary's order: re-collecting
        would turn each stored outcome into "not run". ``[]`` when summary.json or plan.json
        is absent or unreadable (the re-render reports those), and for runs the summary
        records as never run (an interrupted experiment)."""
        from afbench.errors import AfbenchError

        if not (self.summary_path.is_file() and self.plan_path.is_file()):
            return []
        try:
            rows, plan = self.summary().runs, self.plan()
        except AfbenchError:
            return []
        specs = {s.run_id: s for s in [*plan.runs, *(r.replaced for r in plan.reruns)]}
        ran = [
            self.run(specs[row.run_id]).path
            for row in rows
            if row.run_id in specs and row.status not in ("", "NOT_RUN")
        ]
        return [
            folder / STATUS if folder.is_dir() else folder
            for folder in ran
            if not (folder / STATUS).is_file()
        ]

    def job_overrides(self) -> list[str]:
        """The job's command-line overrides, from Hydra's ``.hydra/overrides.yaml`` (``[]``
        when absent)."""
        import yaml

        path = self.path / HYDRA_OVERRIDES
        return (
            list(yaml.safe_load(path.read_text(encoding="utf-8")) or []) if path.is_file() else []
        )

    def sweep_setting(self) -> dict[str, str]:
        """A sweep job's swept keys and their values here (``{"optimization.autofuse":
        "true"}``), in the sweep's order; ``{}`` outside a sweep."""
        sweep = self.sweep()
        if sweep is None:
            return {}
        keys = sweep.swept_keys()
        mine = dict(o.lstrip("+").split("=", 1) for o in self.job_overrides() if "=" in o)
        # Hydra writes a swept false back as False: booleans as the command line spells them
        return {
            k: {"True": "true", "False": "false"}.get(mine[k], mine[k]) for k in keys if k in mine
        }

    def sweep(self) -> SweepDir | None:
        """The sweep folder this directory is a job of, None for a single run."""
        parent = SweepDir(self.path.parent)
        return parent if parent.is_sweep() else None


@dataclass(frozen=True)
class SweepDir:
    """A sweep folder (``multirun/<date>/<time>-<name>-<pid>/``): one job folder per
    combination, each an :class:`OutDir`."""

    path: Path

    def is_sweep(self) -> bool:
        return (self.path / MULTIRUN_YAML).is_file() or (self.path / SWEEP_SUMMARY).is_file()

    def swept_keys(self) -> list[str]:
        """The keys the sweep's command line sweeps (``a=1,2``, ``range(...)``, ...), from
        ``multirun.yaml`` with Hydra's override parser; ``[]`` when it cannot tell."""
        return list(self.swept_values())

    def swept_values(self) -> dict[str, list[str]]:
        """Swept key (without ``+``) -> its values as Hydra hands them to the jobs, in the
        sweeper's order (:meth:`sweep_plan`); ``{}`` when nothing is swept or it cannot
        tell."""
        return self.sweep_plan() or {}

    def sweep_plan(self) -> dict[str, list[str]] | None:
        """:func:`basic_sweep` of the sweep's ``multirun.yaml`` (written by Hydra's basic
        sweeper before the first job starts): a recipe's ``hydra.sweeper.params`` and the
        command line's sweeps; None when it cannot tell (no ``multirun.yaml``, or another
        sweeper)."""
        try:
            import yaml

            data = yaml.safe_load((self.path / MULTIRUN_YAML).read_text(encoding="utf-8"))
            return basic_sweep(data["hydra"])
        except Exception:
            return None

    def asked(self) -> list[dict[str, str]]:
        """Every combination the sweep's command line asked for (swept key -> value), in the
        order Hydra's basic sweeper runs them (the product of :meth:`swept_values`, the first
        key slowest); ``[]`` when ``multirun.yaml`` cannot tell."""
        import itertools

        values = self.swept_values()
        return (
            [dict(zip(values, combo)) for combo in itertools.product(*values.values())]
            if values
            else []
        )

    def sweep_verdict_settings(self) -> dict[str, Any]:
        """The ``verdict`` section of the sweep's own config in ``multirun.yaml`` (what the
        command line gave, before a job set its per-comparison level:
        :func:`afbench.pairing.at_sweep_level`), the keys a sweep before schema 5 held in
        ``report`` moved there (:data:`afbench.config.verdict.MOVED`); ``{}`` when it cannot
        tell."""
        try:
            import yaml

            data = yaml.safe_load((self.path / MULTIRUN_YAML).read_text(encoding="utf-8"))
            old = dict(data.get("report") or {})
            moved = {k: old[k] for k in ("confidence", "min_gain_pct", "contention") if k in old}
            return {**moved, **dict(data.get("verdict") or {})}
        except Exception:
            return {}

    def jobs(self) -> list[OutDir]:
        """The job folders that hold a finished experiment, in job-number order."""
        found = [OutDir(p) for p in self.path.iterdir() if p.is_dir() and OutDir(p).is_experiment()]
        return sorted(
            found,
            key=lambda o: (
                not o.path.name.isdigit(),
                int(o.path.name) if o.path.name.isdigit() else 0,
                o.path.name,
            ),
        )


BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def basic_sweep(hydra: Any) -> dict[str, list[str]] | None:
    """Swept key (without ``+``/``~``) -> its values, as Hydra's basic sweeper expands them
    (hydra-core 1.3 ``BasicSweeper.sweep``): ``hydra.sweeper.params`` (what a recipe holds)
    first, then the command line's ``hydra.overrides.task``, where a key given in both takes
    the command line's value (swept or not) in the params' place. The jobs are the product of the value lists, so
    the job count is the product of their lengths (1 with nothing swept).

    ``hydra``: the ``hydra`` node of a sweep's config (``multirun.yaml``'s, or the config a
    callback gets), a mapping. None when another sweeper runs the jobs (its job list is its
    own) or a value is one Hydra's override parser rejects.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweeper = hydra.get("sweeper") or {}
    if sweeper.get("_target_", BASIC_SWEEPER) != BASIC_SWEEPER:
        return None
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    try:
        parsed = OverridesParser.create().parse_overrides(
            [*params, *list(hydra.get("overrides", {}).get("task") or [])]
        )
    except Exception:
        return None
    keyed: dict[str, list[str] | None] = {}
    for o in parsed:
        key = o.key_or_group.lstrip("+~")
        keyed[key] = list(o.sweep_string_iterator()) if o.is_sweep_override() else None
    return {k: v for k, v in keyed.items() if v is not None}


def window_step_times(spec: RunSpec, run_dir: Path) -> dict[int, float]:
    """Step -> seconds of ``spec``'s measured window, parsed strictly from ``run_dir/stdout.log``
    with the engine's step pattern (null, and engines without the key, mean the reference's
    step line).

    Raises:
        InvalidLog: a measured step missing, twice, non-numeric, zero or NaN (names the log).
    """
    window = spec.config.scheduler.measure
    pattern = getattr(spec.config.engine, "step_pattern", None) or DEFAULT_STEP_PATTERN
    return read_step_times(Path(run_dir) / STDOUT_LOG, window.first_step, window.last_step, pattern)


def window_problem(spec: RunSpec, run_dir: Path) -> str:
    """``""`` when ``spec``'s measured window in ``run_dir/stdout.log`` passes the strict parse
    (:func:`window_step_times`), else the status reason ``invalid step log: <why>``. The
    launcher calls it once, where a run ends: a worker that succeeded with a log the verdict
    cannot use is FAILED in its status.json, the progress line, the skip rules and the exit
    code alike.

    Raises:
        LogNotRead: the log was not read in time or reading was stopped (afbench.analysis.reading).
    """
    from afbench.analysis.errors import InvalidLog, LogNotRead

    try:
        window_step_times(spec, run_dir)
    except LogNotRead:
        raise  # not the log's fault: the launcher says why it was not read
    except InvalidLog as exc:
        return f"invalid step log: {exc}"
    return ""


def experiment_dirs(paths: list[Path]) -> list[OutDir]:
    """Every finished experiment directory at or below ``paths`` (output directories, sweep
    folders, or folders that hold them, e.g. ``outputs/``), each once, in path order."""
    found: dict[Path, OutDir] = {}
    for root in paths:
        root = Path(root).resolve()
        candidates = (
            [root]
            if OutDir(root).is_experiment()
            else [p.parent for p in sorted(root.rglob(SUMMARY)) if OutDir(p.parent).is_experiment()]
        )
        for c in candidates:
            found.setdefault(c, OutDir(c))
    return [found[k] for k in sorted(found)]
