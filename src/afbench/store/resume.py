"""``resume=<dir>``: which finished runs of an earlier output (or sweep) directory an
experiment may reuse instead of running them again, and the copy that reuses one. A run is
reused by its config hash; nothing is read or copied from outside the directory given."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from afbench.errors import ConfigError, OutputError
from afbench.messages import say
from afbench.runspec import RunSpec, RunStatus
from afbench.store.layout import window_problem
from afbench.store.names import (
    EXPERIMENT,
    MULTIRUN_YAML,
    PLAN,
    RESULT,
    RUNS,
    RUNSPEC,
    STATUS,
    SWEEP_SUMMARY,
)
from afbench.store.run import RUNSPEC_FILE, STATUS_FILE


def _window_parses(run_dir: Path, config_hash: str) -> bool:
    """Whether ``run_dir``'s runspec.json has ``config_hash`` and its log's measured window
    passes the strict parse. The launcher decides that when a run ends (status FAILED,
    ``invalid step log``); an earlier directory given to ``resume`` may come from an afbench
    that did not, so a run reused from it is held to the same rule here."""
    try:
        spec = RUNSPEC_FILE.read(run_dir / RUNSPEC)
    except OutputError:
        return False
    return spec.config_hash == config_hash and not window_problem(spec, run_dir)


#: the files whose presence makes a folder one ``resume=`` can read: an experiment's output
#: directory (plan.json, experiment.json: written when it starts) or a sweep folder
#: (multirun.yaml, written by Hydra before its first job; sweep_summary.json)
RESUMABLE_FILES = (PLAN, EXPERIMENT, MULTIRUN_YAML, SWEEP_SUMMARY)


def resume_problem(root: Path) -> str | None:
    """What is wrong with ``resume=root`` (one line naming ``resume``, the folder and what to
    do), or None: the command line checks it, for a single run and every swept value of a
    sweep, before Hydra makes an output directory, so a refusal writes and launches nothing.

    Refused: a path that is not a directory, and a directory holding none of
    :data:`RESUMABLE_FILES` directly in it (an empty folder, a folder of other files, or a
    folder of several output directories), whose runs would all have run again."""
    root = Path(root)
    if not root.is_dir():
        return (
            f"resume: {root} is not a directory; give an earlier afbench output or sweep directory"
        )
    if not any((root / name).is_file() for name in RESUMABLE_FILES):
        return (
            f"resume: {root} holds no afbench experiment (none of "
            f"{', '.join(RESUMABLE_FILES)} in it); point resume= at the experiment's "
            "output directory (the folder of the report.md printed at the end of its run, "
            "e.g. outputs/<date>/<time>-<experiment>-<pid>) or at its sweep folder "
            "(multirun/<date>/<time>-<name>-<pid>), or drop resume= to start a new "
            "experiment"
        )
    return None


def resume_index(root: Path) -> dict[str, Path]:
    """config_hash -> run directory of every finished run below ``root``: status OK, a
    result.json, and a measured window that parses strictly. Failed, skipped, interrupted or
    invalid-log runs are left out, so they run again.

    Raises ConfigError naming ``resume`` when ``root`` is not a directory or holds no
    afbench experiment (:func:`resume_problem`), or naming the link when a run folder holds
    a symlink or is one (:func:`_refuse_links`): nothing is read outside ``root``."""
    root = Path(root)
    problem = resume_problem(root)
    if problem:
        raise ConfigError(problem)
    index: dict[str, Path] = {}
    for status_path in sorted(root.rglob(f"{RUNS}/*/{STATUS}")):
        run_dir = status_path.parent
        _refuse_links(run_dir, root)  # before reading any of its files
        try:
            status = STATUS_FILE.read(status_path)
        except OutputError:
            continue
        digest = status.config_hash
        if (
            digest
            and digest not in index
            and status.status == "OK"
            and not status.replaced_by  # a contended run, run again
            and (run_dir / RESULT).is_file()
            and _window_parses(run_dir, digest)
        ):
            index[digest] = run_dir
    return index


def _refuse_links(run_dir: Path, root: Path) -> None:
    """Raises ConfigError naming ``resume`` and the first symlink found in ``run_dir`` (or
    on its way from ``root``): a reused run is copied into the new output directory, and a
    link in it would copy (or read) whatever it points to, /etc/passwd or a whole folder."""
    rel = run_dir.relative_to(root)
    links = [root / q for q in (*reversed(rel.parents), rel) if q.parts and (root / q).is_symlink()]
    links = links or sorted(p for p in run_dir.rglob("*") if p.is_symlink())
    if links:
        raise ConfigError(
            f"resume: {links[0]} is a symlink (to {os.readlink(links[0])}); a "
            "reused run is copied and a link would bring what it points to: "
            f"remove the link from {root}, or drop resume="
        )


def resume_root(resume: Path, job_num: int | None) -> Path | None:
    """Where a run of this experiment may be reused from: all of ``resume``, except for a sweep
    job resuming a sweep (its ``multirun.yaml``), which reuses only from the same job's folder
    (None when that job never started). A sweep paired beside the baseline runs the baseline
    combination in every job under one config hash, and a baseline run of another job ran
    minutes away from this job's runs: reusing it would undo the pairing in time."""
    if job_num is None or not (resume / "multirun.yaml").is_file():
        return resume
    job = resume / str(job_num)
    return job if job.is_dir() else None


def reuse_run(spec: RunSpec, source: Path) -> RunStatus:
    """Copy a finished run (same config hash) into this experiment instead of running it."""
    run_dir = Path(spec.run_dir)
    # links as links (resume_index refused any): never a file from outside ``source``
    shutil.copytree(source, run_dir, symlinks=True, ignore=shutil.ignore_patterns("cache", "tmp"))
    RUNSPEC_FILE.write(run_dir / RUNSPEC, spec)
    status = STATUS_FILE.read(run_dir / STATUS).model_copy(
        update={"run_id": spec.run_id, "reason": say("run_resumed", source=str(source))}
    )
    STATUS_FILE.write(run_dir / STATUS, status)
    return status
