"""Entry point: ``python -m afbench [experiment=<recipe>] [dotted.key=value ...]``.

Hydra composes conf/ + the chosen recipe; afbench validates, plans, launches, collects and
renders. Errors of afbench's own types become one message and an exit code here
(2 config, 3 preflight, 1 failed runs, 130 interrupted); ``verbose=true`` or
HYDRA_FULL_ERROR=1 adds the traceback.

Two paths, one behaviour. A plain single run (every argument an override, no sweep) is
composed once, checked, preflighted, and only then given an output directory
(:func:`afbench.cli.hydra_run.run_once`, the one place that uses Hydra's internals, pinned to
the hydra-core versions it supports). Everything else (sweeps, ``--help``, ``--cfg``, another
hydra-core) goes through Hydra's public ``compose`` (the precheck) and ``hydra.main``.

Messages go through :mod:`logging` (Hydra's job logging: the terminal and ``<out>/cli.log``);
what happens before an output directory exists (config errors, preflight before the run) is
printed to stderr, since there is no cli.log to write to then.
"""

from __future__ import annotations

import importlib.resources
import logging
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from afbench.cli import hydra_run
from afbench.cli.args import (
    combinations_to_check,
    free_form_argv,
    is_multirun,
    override_problems,
    parses,
    single_run_overrides,
    sweep_values,
    user_overrides,
)
from afbench.cli.problems import config_problems
from afbench.cli.recipes import RECIPE_PATH_ENV, recipe_dirs, register, selected_recipes
from afbench.errors import AfbenchError
from afbench.store.names import MULTIRUN_YAML, PLAN

# afbench.config (pydantic models, ~0.2 s) and afbench.plan are imported where a composed
# config is validated: a key Hydra cannot compose (the common typo) is reported without them.

__all__ = ["main", "register", "recipe_dirs", "single_run_overrides", "RECIPE_PATH_ENV"]

log = logging.getLogger(__name__)


def _verbose(conf: Any = None) -> bool:
    return bool(getattr(conf, "verbose", False)) or os.environ.get("HYDRA_FULL_ERROR") == "1"


def _fail(
    lines: list[str], code: int, exc: BaseException | None = None, verbose: bool = False
) -> NoReturn:
    """Print ``afbench: error: <line>`` per line (after the traceback of ``exc`` when
    ``verbose``) and exit ``code``."""
    if verbose and exc is not None:
        traceback.print_exception(exc)
    for line in lines:
        print(f"afbench: error: {line}", file=sys.stderr)
    sys.exit(code)


def mask_hydra_files(folder: Path) -> None:
    """Rewrite Hydra's copies of the config in ``folder`` (``.hydra/config.yaml``,
    ``hydra.yaml``, ``overrides.yaml``; a sweep folder's ``multirun.yaml``), which Hydra
    writes before the task starts, with every secret masked
    (:func:`afbench.config.secrets.mask_text`); a file without one is left as it is, a link
    is never followed."""
    from afbench.config.secrets import mask_text
    from afbench.io import write_text_atomic

    for path in (*sorted((folder / ".hydra").glob("*.yaml")), folder / MULTIRUN_YAML):
        if path.is_file() and not path.is_symlink():
            text = path.read_text(encoding="utf-8")
            if mask_text(text) != text:
                write_text_atomic(path, mask_text(text))


def _task(cfg: DictConfig, checks: list | None = None) -> None:
    """Hydra's task: one job, run from the directory afbench was started in, so that the
    config's relative paths (``data.path``, ``model.path``, ``engine.executable``, ...) mean
    the same under ``hydra.job.chdir=True`` as without it (Hydra's ``get_original_cwd``;
    afbench writes only to the job's output directory, which is absolute). ``checks``: the
    preflight already run before the output directory existed (single runs)."""
    job_dir = os.getcwd()
    os.chdir(HydraConfig.get().runtime.cwd)
    try:
        _job(cfg, checks)
    finally:
        os.chdir(job_dir)


def _job(cfg: DictConfig, checks: list | None) -> None:
    # the launcher, preflight, the console and the sweep report: not needed for a config error
    from afbench.config import validate_config
    from afbench.experiment import preflight, run_experiment
    from afbench.pairing import beside_baseline
    from afbench.plan import misspelt_entries, shadowed_overrides
    from afbench.sweep import build_sweep_report

    verbose = bool(cfg.get("verbose", False)) or os.environ.get("HYDRA_FULL_ERROR") == "1"
    hydra_cfg = HydraConfig.get()
    mask_hydra_files(Path(hydra_cfg.runtime.output_dir))  # first: Hydra has just written them
    if hydra_cfg.mode == RunMode.MULTIRUN:
        mask_hydra_files(Path(hydra_cfg.sweep.dir))
        if (
            os.environ.get("SUBMITIT_EXECUTOR") == "slurm"
            and os.environ.get("SLURM_PROCID", "0") != "0"
        ):
            # a job of several nodes (hydra.launcher.nodes) runs this on every node; the first
            # runs the experiment, its torchrun agents reach the others (srun, parallel.nnodes)
            log.info(
                "afbench: SLURM task %s idle: task 0 runs the experiment",
                os.environ["SLURM_PROCID"],
            )
            return
        # A failing job must not end the sweep: its files say it failed (sweep_summary.json).
        job = f"job {hydra_cfg.job.num} ({','.join(hydra_cfg.overrides.task)})"
        try:
            cfg, unpaired = beside_baseline(
                cfg,
                Path(hydra_cfg.sweep.dir),
                list(hydra_cfg.overrides.task),
                set(hydra_cfg.runtime.choices),
            )
            if unpaired:
                log.info("afbench: sweep pairing: %s", unpaired)
            run_experiment(
                validate_config(cfg), Path(hydra_cfg.runtime.output_dir), job_num=hydra_cfg.job.num
            )
        except AfbenchError as exc:
            log.error("afbench: error in %s: %s", job, exc)
        except KeyboardInterrupt:
            # Ctrl-C / SIGTERM stops the whole sweep; the finished jobs still get their report
            log.error("afbench: sweep interrupted in %s; partial results are kept", job)
            try:
                build_sweep_report(
                    Path(hydra_cfg.sweep.dir),
                    template_dir=OmegaConf.select(cfg, "report.template_dir"),
                )
            except Exception as exc:  # the jobs' own reports are there in any case
                log.error("afbench: no sweep report: %s", exc)
            sys.exit(130)
        return
    try:
        conf = validate_config(cfg)
        task_overrides = list(hydra_cfg.overrides.task)
        for line in shadowed_overrides(task_overrides, conf) + misspelt_entries(
            task_overrides, conf
        ):
            log.warning("afbench: warning: %s", line)
        out_dir = Path(hydra_cfg.runtime.output_dir)
        if conf.task == "check":
            preflight(conf, out_dir, show_all=True)
            code = 0
        else:
            code = run_experiment(conf, out_dir, checks=checks)
    except AfbenchError as exc:
        log.error("afbench: error: %s", exc, exc_info=verbose)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        log.error("afbench: interrupted; partial results are in %s", hydra_cfg.runtime.output_dir)
        sys.exit(130)
    if code:
        sys.exit(code)


def _preflight_before_output(conf: Any, out_dir: Path) -> list:
    """Preflight of a single run before its output directory exists: the lines go to the
    terminal (all of them for ``task=check``), exit 3 on a failure and 0 after ``task=check``;
    nothing is written either way. Returns the checks for the run."""
    from afbench.experiment import preflight
    from afbench.logs import ConsoleHandler

    # task=check: every line; a run: the [FAIL] lines (the passed count goes to its cli.log)
    handler = ConsoleHandler(logging.INFO if conf.task == "check" else logging.WARNING)
    logging.getLogger().addHandler(handler)
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.INFO)
    try:
        checks = preflight(conf, out_dir, show_all=conf.task == "check")
    except AfbenchError as exc:
        _fail([str(exc)], exc.exit_code, exc, _verbose(conf))
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(level)
    if conf.task == "check":
        sys.exit(0)
    return checks


def run_single(overrides: list[str], conf_dir: str) -> None:
    """A plain single run: composed once, validated and planned, preflighted (exit 2 or 3,
    nothing written), then run in its new output directory (exit 0, 1 or 130)."""
    held: dict[str, list] = {}

    def check(cfg: DictConfig) -> None:
        from afbench.config import validate_config
        from afbench.plan import make_plan

        task_cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        try:
            conf = validate_config(task_cfg)
            make_plan(conf, Path(os.devnull) / "dry-run")
        except AfbenchError as exc:  # every bad value, variant and phase: one line each
            _fail(str(exc).splitlines(), exc.exit_code, exc, _verbose())
        if conf.resume:
            from afbench.store.resume import resume_problem

            problem = resume_problem(Path(conf.resume))
            if problem:  # before Hydra makes the output directory: nothing is left behind
                _fail([problem], 2)
        if conf.task == "check":  # the run's own log would say these; check has none
            from afbench.plan import misspelt_entries, shadowed_overrides

            for line in shadowed_overrides(overrides, conf) + misspelt_entries(overrides, conf):
                print(f"afbench: warning: {line}", file=sys.stderr)
        run_dir = Path(str(cfg.hydra.run.dir))
        if (run_dir / PLAN).exists():  # refused before Hydra rewrites its .hydra/ there
            _fail(
                [f"{run_dir} already holds an experiment; an output directory is never reused"], 2
            )
        held["checks"] = _preflight_before_output(conf, run_dir)
        from afbench.store.owner import OutputBusy, claim

        try:  # one owner: a second afbench on this folder is refused before Hydra writes
            claim(run_dir)
        except OutputBusy as exc:
            _fail([str(exc)], exc.exit_code)
        if (run_dir / PLAN).exists():  # the owner before us finished meanwhile
            _fail(
                [f"{run_dir} already holds an experiment; an output directory is never reused"], 2
            )

    try:
        hydra_run.run_once(
            overrides, conf_dir, check, lambda cfg: _task(cfg, checks=held.get("checks"))
        )
    except (HydraException, OmegaConfBaseException) as exc:
        _fail(config_problems(overrides, conf_dir, failed=exc), 2)


def precheck(argv: list[str], conf_dir: str) -> None:
    """Compose and validate the command line before Hydra runs (and makes a directory): every
    problem of it at once, one line each, exit 2. Sweeps are checked with each value of each
    swept key once, ``report.sweep_baseline`` against the swept values, and the sweep folder
    is checked writable (``[FAIL] output root``, exit 3)."""
    overrides = user_overrides(argv)
    if overrides is None:
        return
    problems = override_problems(argv, overrides)
    # the overrides Hydra can parse are composed too, so their problems come in the same list
    for combo in combinations_to_check([o for o in overrides if parses(o)]):
        found = config_problems(combo, conf_dir)
        if found:
            problems += found
            break
    if problems:
        _fail(problems, 2)
    if is_multirun(argv):
        _check_sweep(argv, overrides, conf_dir)


def _check_sweep(argv: list[str], overrides: list[str], conf_dir: str) -> None:
    from afbench.pairing import same_value, split_override
    from afbench.preflight import check_output_root

    # Hydra's own settings as typed, the chosen launcher and sweeper (hydra/launcher=...)
    # before the keys they bring (hydra.launcher.partition=...)
    hydra_args = [
        a
        for a in argv
        if "=" in a
        and a.lstrip("+~").startswith(("hydra.", "hydra/"))
        and not a.replace(" ", "").lower().startswith("hydra.mode")
    ]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            cfg = compose(
                config_name="config",
                return_hydra_config=True,
                overrides=[*combinations_to_check(overrides)[0], *hydra_args],
            )
        sweep_dir = Path(str(cfg.hydra.sweep.dir))
        wanted = OmegaConf.select(cfg, "report.sweep_baseline")
        resume = OmegaConf.select(cfg, "resume")
    except (HydraException, OmegaConfBaseException) as exc:
        _fail(
            [
                f"{' '.join(hydra_args)}: {' '.join(str(exc).split())}"
                + (" (pip install hydra-submitit-launcher)" if "submitit" in str(exc) else "")
            ],
            2,
        )
    finally:
        GlobalHydra.instance().clear()
    if resume:  # as a single run checks it: before the sweep folder is made
        from afbench.store.resume import resume_problem

        swept_resume = sweep_values(overrides).get("resume", ([str(resume)], ""))[0]
        problems = [p for p in (resume_problem(Path(r)) for r in swept_resume) if p]
        if problems:
            _fail(problems, 2)
    root = check_output_root(sweep_dir)
    if not root.ok:
        print(root.line(), file=sys.stderr)
        _fail(["preflight: the sweep folder cannot be written; nothing was run"], 3)
    if not wanted:
        return
    swept = sweep_values(overrides)
    problems = []
    for item in str(wanted).split(","):
        key, value = split_override(item)
        if key not in swept:
            problems.append(
                f"report.sweep_baseline: {key} is not swept on this command line "
                f"(swept: {', '.join(swept) or 'nothing'})"
            )
        elif not any(same_value(value, v) for v in swept[key][0]):
            problems.append(
                f"report.sweep_baseline: {key}={value} is none of the swept values "
                f"{key}={swept[key][1]}"
            )
    if problems:
        _fail(problems, 2)


def _recipes_or_exit(broken: dict[str, str], overrides: list[str] | None) -> None:
    """Exit 2 when the command line selects a recipe that is not valid YAML; otherwise warn
    once per such file and go on."""
    wanted = selected_recipes(overrides or [])
    chosen = [msg for name, msg in broken.items() if name in wanted]
    if chosen:
        _fail(chosen, 2)
    for name, msg in broken.items():
        print(
            f"afbench: warning: {msg}; left out (only experiment={name} needs it)", file=sys.stderr
        )


def _version() -> str:
    import omegaconf

    from afbench import __version__

    return (
        f"afbench {__version__} (hydra-core {hydra.__version__}, omegaconf "
        f"{omegaconf.__version__}, python {sys.version.split()[0]})"
    )


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM takes the same path as Ctrl-C: stop the worker's process group, record the
    # run as interrupted, write the partial report, exit 130.
    raise KeyboardInterrupt


def _quiet_broken_pipe() -> None:
    """After ``| tee`` or ``| head`` closed the pipe (Ctrl-C reaches the whole pipeline),
    point stdout and stderr at /dev/null, so Python's final flush does not turn exit 130
    into 120 with a BrokenPipeError (Python docs, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            os.dup2(devnull, stream.fileno())


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    # Ctrl-C must reach us even when started from a shell that ignores SIGINT for background jobs
    signal.signal(signal.SIGINT, signal.default_int_handler)
    argv = free_form_argv(sys.argv[1:])
    # afbench's own flag, not Hydra's: the config key verbose=true (each verdict's Why on the
    # console under its headline, and the traceback of an error)
    argv = [("verbose=true" if a == "--verbose" else a) for a in argv]
    if "--version" in argv:
        print(_version())
        return
    try:
        broken = register()
        _recipes_or_exit(broken, user_overrides(argv))
        conf_dir = str(importlib.resources.files("afbench.conf"))
        single = single_run_overrides(argv)
        if single is not None and not override_problems(argv, single) and hydra_run.supported():
            run_single(single, conf_dir)
            return
        precheck(argv, conf_dir)
        sys.argv = [sys.argv[0], *argv]
        # a failed sweep job exits 1 from the sweep callback, read from sweep_summary.json
        hydra.main(version_base="1.3", config_path=conf_dir, config_name="config")(_task)()
    finally:
        _quiet_broken_pipe()


if __name__ == "__main__":
    main()
