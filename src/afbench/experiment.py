"""Run an experiment: preflight, plan, launch every run serially, collect, compare, render."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from afbench.config.models import AfbenchConfig
from afbench.errors import AssetError, ConfigError
from afbench.io import write_json_atomic
from afbench.launch.local import RunStatus, launch_run, write_skipped
from afbench.plan import Plan, make_plan, skip_reason

console = Console(stderr=True, highlight=False, soft_wrap=True)


def content_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, or of a folder's files (sorted relative paths, each file's
    sha256 and path hashed together); independent of where the folder lies."""
    from afbench.assets.manifest import sha256_file

    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f"{sha256_file(f)}  {f.relative_to(path).as_posix()}\n".encode())
    return h.hexdigest()


def check_inputs(conf: AfbenchConfig) -> dict[str, dict[str, str]]:
    """Model, data and manifest checks before any run; returns content hashes for the report.

    Raises ConfigError for a missing path (naming model.path / data.path) and AssetError when
    a file does not match the sha256 manifest.
    """
    from afbench.assets.manifest import verify_manifest

    model = Path(conf.model.path)
    if not (model / "config.json").is_file():
        raise ConfigError(f"model.path: {model} is not an HF-format model folder (no config.json); "
                          "set model.path=/abs/path/to/model")
    data = Path(conf.data.path)
    if not data.is_file():
        raise ConfigError(f"data.path: {data} does not exist; set data.path=/abs/path/to/file.parquet")
    if conf.model.manifest:
        manifest = Path(conf.model.manifest)
        if not manifest.is_file():
            raise AssetError(f"model.manifest: {manifest} does not exist; rebuild the assets with "
                             "`python -m afbench.assets build` or set model.manifest=null")
        problems = verify_manifest(manifest)
        if problems:
            raise AssetError(f"asset check against {manifest} failed:\n  " + "\n  ".join(problems)
                             + "\nrebuild with `python -m afbench.assets build`")
    return {"model": {"path": str(model), "sha256": content_sha256(model)},
            "data": {"path": str(data), "sha256": content_sha256(data)}}


def _progress(i: int, n: int, run_id: str, status: RunStatus) -> None:
    colour = {"OK": "green", "SKIPPED": "yellow"}.get(status.status, "red")
    reason = f"  ({status.reason})" if status.reason else ""
    console.print(f"[{i}/{n}] {run_id:<28} [{colour}]{status.status:<7}[/{colour}] "
                  f"{status.wall_s:7.1f}s{reason}")


def execute_plan(plan: Plan) -> dict[str, str]:
    """Run (or skip) every RunSpec in order; returns run_id -> status.

    On KeyboardInterrupt the current worker's process group is stopped (by the launcher), the
    remaining runs are recorded as SKIPPED "interrupted", and the interrupt is re-raised.
    """
    statuses: dict[str, str] = {}
    n = len(plan.runs)
    for i, run in enumerate(plan.runs, 1):
        reason = skip_reason(plan, run, statuses)
        try:
            if reason:
                st = write_skipped(run, reason)
            else:
                with console.status(f"[{i}/{n}] {run.run_id} running"):
                    st = launch_run(run)
        except KeyboardInterrupt:
            statuses[run.run_id] = "FAILED"
            for rest in plan.runs[i:]:
                write_skipped(rest, "interrupted (SIGINT/SIGTERM to afbench)")
            raise
        statuses[run.run_id] = st.status
        _progress(i, n, run.run_id, st)
    return statuses


def run_experiment(conf: AfbenchConfig, out_dir: Path) -> int:
    """Plan, launch, collect, compare and render into ``out_dir``; returns the exit code
    (0 all runs OK or SKIPPED by a backend, 1 if any run FAILED)."""
    from afbench.report import build_report

    out_dir = Path(out_dir)
    if (out_dir / "plan.json").exists():
        raise ConfigError(f"{out_dir} already holds an experiment; an output directory is never reused")
    plan = make_plan(conf, out_dir)
    assets = check_inputs(conf)
    write_json_atomic(out_dir / "experiment.json", {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": conf.model_dump(mode="json"),
        "assets": assets,
    })
    write_json_atomic(out_dir / "plan.json", plan.model_dump(mode="json"))
    console.print(f"afbench: experiment {plan.experiment}: {len(plan.runs)} runs -> {out_dir}")
    try:
        statuses = execute_plan(plan)
    finally:
        summary = build_report(out_dir)
        console.print(f"afbench: report {out_dir / 'report.md'}")
    for line in summary.get("headline", []):
        console.print(line)
    return 1 if "FAILED" in statuses.values() else 0
