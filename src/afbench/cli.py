"""Entry point: ``python -m afbench [experiment=<recipe>] [dotted.key=value ...]``.

Hydra composes conf/ + the chosen recipe; afbench validates, plans, launches, collects and
renders. Errors of afbench's own types become one message and an exit code here
(2 config, 3 preflight, 1 failed runs, 130 interrupted); ``verbose=true`` or
HYDRA_FULL_ERROR=1 adds the traceback.

Messages go through :mod:`logging` (Hydra's job logging: the terminal and ``<out>/cli.log``);
only what happens before Hydra has configured logging and made the output directory (the
precheck, a broken recipe) or after it has finished (the sweep's failed jobs) is printed to
stderr directly, since there is no cli.log to write to then.
"""

from __future__ import annotations

import difflib
import importlib.resources
import logging
import os
import re
import signal
import sys
from pathlib import Path

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from afbench.assets.manifest import default_assets_dir
from afbench.errors import AfbenchError

# afbench.config (pydantic models, ~0.2 s) and afbench.plan are imported where a composed
# config is validated: a key Hydra cannot compose (the common typo) is reported without them.

log = logging.getLogger(__name__)

RECIPE_PATH_ENV = "AFBENCH_RECIPE_PATH"
EXPERIMENT_SCALARS = {"repeats": 1, "skip_policy": "per_variant", "verdict_phase": None,
                      "precision_pct": 1.0, "min_repeats": 3, "max_repeats": 8,
                      "time_budget_s": None, "order": "counterbalanced", "order_seed": None,
                      "rerun_contended": 1}


def recipe_dirs() -> list[Path]:
    """Folders searched for ``<name>.yaml`` recipes: the shipped ones, then AFBENCH_RECIPE_PATH
    (os.pathsep-separated), whose recipes win on equal names."""
    dirs = [Path(str(importlib.resources.files("afbench.recipes")))]
    extra = os.environ.get(RECIPE_PATH_ENV, "")
    dirs += [Path(p) for p in extra.split(os.pathsep) if p]
    return dirs


def register() -> None:
    """Register OmegaConf resolvers and store every recipe as ``experiment/<name>``."""
    if not OmegaConf.has_resolver("afbench_assets"):
        OmegaConf.register_new_resolver("afbench_assets", lambda: str(default_assets_dir()))
    if not OmegaConf.has_resolver("afbench_uid"):
        OmegaConf.register_new_resolver("afbench_uid", lambda: str(os.getpid()), use_cache=True)
    store = ConfigStore.instance()
    for folder in recipe_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")):
            try:
                node = OmegaConf.load(path)
            except Exception as exc:  # yaml.YAMLError and friends: name the file, stop
                detail = " ".join(str(exc).split())
                print(f"afbench: error: recipe {path}: not valid YAML: {detail}", file=sys.stderr)
                sys.exit(2)
            if "experiment" in node:
                # every scalar key exists, so `experiment.repeats=3` works without a `+`
                node = OmegaConf.merge({"experiment": dict(EXPERIMENT_SCALARS)}, node)
            store.store(group="experiment", name=path.stem, node=node,
                        package="_global_", provider=f"afbench recipes ({folder})")


def _task(cfg: DictConfig) -> None:
    # the launcher, preflight, the console and the sweep report: not needed for a config error
    from afbench.experiment import preflight, run_experiment
    from afbench.sweep import FAILED_JOBS, build_sweep_report

    from afbench.config import validate_config
    from afbench.plan import shadowed_overrides

    verbose = bool(cfg.get("verbose", False)) or os.environ.get("HYDRA_FULL_ERROR") == "1"
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        # A failing job must not end the sweep: record it, report it, go on with the next.
        job = f"job {hydra_cfg.job.num} ({','.join(hydra_cfg.overrides.task)})"
        try:
            code = run_experiment(validate_config(cfg), Path(hydra_cfg.runtime.output_dir),
                                  job_num=hydra_cfg.job.num)
        except AfbenchError as exc:
            log.error("afbench: error in %s: %s", job, exc)
            code = exc.exit_code
        except KeyboardInterrupt:
            # Ctrl-C / SIGTERM stops the whole sweep; the finished jobs still get their report
            log.error("afbench: sweep interrupted in %s; partial results are kept", job)
            try:
                build_sweep_report(Path(hydra_cfg.sweep.dir))
            except Exception as exc:  # the jobs' own reports are there in any case
                log.error("afbench: no sweep report: %s", exc)
            sys.exit(130)
        if code:
            FAILED_JOBS.append(job)
        return
    try:
        conf = validate_config(cfg)
        for line in shadowed_overrides(list(hydra_cfg.overrides.task), conf):
            log.warning("afbench: warning: %s", line)
        out_dir = Path(HydraConfig.get().runtime.output_dir)
        if conf.task == "check":
            preflight(conf, out_dir, show_all=True)
            code = 0
        else:
            code = run_experiment(conf, out_dir)
    except AfbenchError as exc:
        log.error("afbench: error: %s", exc, exc_info=verbose)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        log.error("afbench: interrupted; partial results are in the output directory")
        sys.exit(130)
    if code:
        sys.exit(code)


# Hydra flags that take a value (the value is not an override).
_VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"}


def _user_overrides(argv: list[str]) -> list[str] | None:
    """The key=value overrides of a command line (None when Hydra prints help/info instead)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--help", "-h", "--hydra-help", "--version", "--shell-completion", "-sc"):
            return None
        if arg in _VALUE_FLAGS:
            skip = True
            continue
        if arg.startswith("-") or "=" not in arg:
            continue
        if arg.lstrip("+~").startswith(("hydra.", "hydra/")):
            continue
        out.append(arg)
    return out


def _combinations_to_check(overrides: list[str]) -> list[list[str]]:
    """Override lists that together try every value of every swept key once (the other swept
    keys at their first value): enough to catch any bad value without running the product."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    values = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
              if o.is_sweep_override() else [o.input_line] for o in parsed]
    first = [v[0] for v in values]
    out = [first]
    for i, vals in enumerate(values):
        for v in vals[1:]:
            out.append(first[:i] + [v] + first[i + 1:])
    return out


def _override_problem(argv: list[str], overrides: list[str]) -> str | None:
    """One line for an override users commonly type and Hydra rejects with a bare grammar
    error, or runs as something else: a value holding ``=`` (``epoch=3-step=1200.ckpt``,
    ``split=b``: Hydra 1577, 938) and a comma value without ``-m`` (Hydra's "Ambiguous value",
    1897). None when every override is fine."""
    # Hydra's override grammar (antlr) loads only when a command line is checked
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    multirun = any(a in ("-m", "--multirun") for a in argv) or any(
        a.replace(" ", "").lower() == "hydra.mode=multirun" for a in argv)
    for line in overrides:
        key, _, value = line.partition("=")
        key = key.lstrip("+~")
        try:
            (parsed,) = parser.parse_overrides([line])
        except OverrideParseException:
            if "=" in value:
                return (f"{key}: the value {value!r} contains '=', which Hydra's override "
                        f"grammar reads as a second key; quote it for Hydra inside quotes for "
                        f"the shell: '{key}=\"{value}\"'")
            continue  # the compose below reports Hydra's own message for it
        if parsed.is_sweep_override() and not multirun:
            n = len(list(parsed.sweep_string_iterator()))
            return (f"{key}: '{value}' is a sweep over {n} values, which needs -m "
                    f"(python -m afbench -m '{line}'); for a list write '{key}=[{value}]', "
                    f"for a string '{key}=\"{value}\"'")
    return None


def _check_composed(cfg: DictConfig) -> None:
    """Validate and plan one composed config (planning writes nothing: variant and phase errors
    surface here too). Raises ConfigError and friends."""
    from afbench.config import validate_config
    from afbench.plan import make_plan

    make_plan(validate_config(cfg), Path(os.devnull) / "dry-run")


def _exit_on_config_error(exc: Exception, conf_dir: str) -> None:
    """Print the one-line message of a composition or validation error and exit (2, or the
    AfbenchError's own code); anything else is re-raised."""
    if isinstance(exc, (HydraException, OmegaConfBaseException)):
        print(f"afbench: error: {_hydra_message(exc, conf_dir)}", file=sys.stderr)
        sys.exit(2)
    if isinstance(exc, AfbenchError):
        print(f"afbench: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    raise exc


def single_run_overrides(argv: list[str]) -> list[str] | None:
    """The overrides of a command line that runs one job and nothing else (every argument an
    override, none a sweep, no ``hydra.mode``), or None (flags, ``-m``, help: Hydra's own
    command line handles those)."""
    if any(a.startswith("-") or "=" not in a for a in argv):
        return None
    if any(a.lstrip("+~").replace(" ", "").startswith("hydra.mode") for a in argv):
        return None
    try:
        parsed = OverridesParser.create().parse_overrides(argv)
    except HydraException:
        return None  # precheck gives the one-line message
    if any(o.is_sweep_override() for o in parsed):
        return None
    return list(argv)


def run_single(overrides: list[str], conf_dir: str) -> None:
    """Compose the command line once, check it, and run it as Hydra's ``run`` would.

    ``hydra.main`` composes a run three times before the task starts (afbench's precheck, then
    Hydra's ``get_mode`` and ``run``: about 0.25 s each). Here the one config Hydra would build
    (``Hydra.compose_config`` with ``run_mode=RUN``) is validated and planned before anything is
    written, and then handed to Hydra's ``run_job``, which makes the output directory, writes
    ``.hydra/``, sets up job logging and calls the task. Same steps as
    ``hydra._internal.hydra.Hydra.run`` of hydra-core 1.3 (pinned <1.4 in pyproject.toml).
    Exits 2 (config error, nothing written) or as the task does.
    """
    # Hydra's run internals: needed only here, and hydra.main imports them anyway otherwise
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.utils import run_and_report
    from hydra.core.utils import configure_log, run_job
    from hydra.types import HydraContext

    GlobalHydra.instance().clear()
    try:
        # job_name "cli": the name hydra.main would give (the task's module), so cli.log keeps it
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3", job_name="cli"):
            gh = GlobalHydra.instance()
            assert gh.hydra is not None
            try:
                cfg = gh.hydra.compose_config(config_name="config",
                                              overrides=[*overrides, "hydra.mode=RUN"],
                                              run_mode=RunMode.RUN,
                                              with_log_configuration=False)
                task_cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
                _check_composed(task_cfg)
            except Exception as exc:
                _exit_on_config_error(exc, conf_dir)

            def job() -> None:
                configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
                callbacks = Callbacks(cfg)
                callbacks.on_run_start(config=cfg, config_name="config")
                ret = run_job(hydra_context=HydraContext(config_loader=gh.config_loader(),
                                                         callbacks=callbacks),
                              task_function=_task, config=cfg, job_dir_key="hydra.run.dir",
                              job_subdir_key=None, configure_logging=True)
                callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
                _ = ret.return_value  # re-raises an exception of the task, as Hydra.run does

            # Hydra's own report of an unexpected exception (short, HYDRA_FULL_ERROR=1: all)
            run_and_report(job)
    finally:
        GlobalHydra.instance().clear()


def precheck(argv: list[str], conf_dir: str) -> None:
    """Compose and validate the command line once before Hydra runs (and makes an output
    directory): a wrong key, value or recipe costs a second and exits 2 with one line per
    problem. Sweeps are checked with the first value of each swept key."""
    overrides = _user_overrides(argv)
    if overrides is None:
        return
    problem = _override_problem(argv, overrides)
    if problem:
        print(f"afbench: error: {problem}", file=sys.stderr)
        sys.exit(2)
    try:
        for combo in _combinations_to_check(overrides):
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
                cfg = compose(config_name="config", overrides=combo)
            _check_composed(cfg)
    except (HydraException, OmegaConfBaseException, AfbenchError) as exc:
        _exit_on_config_error(exc, conf_dir)
    finally:
        GlobalHydra.instance().clear()


def _hydra_message(exc: Exception, conf_dir: str) -> str:
    """One line for a Hydra composition error, with a did-you-mean for an unknown key."""
    msg = str(exc).strip()
    unknown = re.search(r"Could not override '([^']+)'", msg)
    if unknown and "To append to your config" in msg:
        key = unknown.group(1)
        hint = ""
        try:
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
                node = compose(config_name="config")
            done: list[str] = []
            for part in key.split("."):  # suggest for the first segment that does not exist
                if not isinstance(node, DictConfig):
                    break
                if part not in node:
                    guess = difflib.get_close_matches(part, [str(k) for k in node.keys()], n=1)
                    if guess:
                        hint = f" did you mean '{'.'.join(done + [guess[0]])}'?"
                    break
                done.append(part)
                node = node[part]
        except Exception:  # no suggestion then; the message still names the key
            pass
        return f"{key}: unknown key;{hint} (to add a new key write +{key}=...)"
    lines = msg.splitlines()
    if "Could not find" in msg:
        options = []
        for line in lines[1:]:
            if line.startswith("Config search path"):
                break
            if line.startswith("\t"):
                options.append(line.strip())
        first = lines[0].replace("In 'config': ", "")
        return f"{first}; available: {', '.join(options)}" if options else first
    return " ".join(l.strip() for l in lines if l.strip() and "hydra.cc" not in l)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM takes the same path as Ctrl-C: stop the worker's process group, record the
    # run as interrupted, write the partial report, exit 130.
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    # Ctrl-C must reach us even when started from a shell that ignores SIGINT for background jobs
    signal.signal(signal.SIGINT, signal.default_int_handler)
    register()
    conf_dir = str(importlib.resources.files("afbench.conf"))
    argv = sys.argv[1:]
    single = single_run_overrides(argv)
    if single is not None and _override_problem(argv, single) is None:
        run_single(single, conf_dir)
    else:
        precheck(argv, conf_dir)
        hydra.main(version_base="1.3", config_path=conf_dir, config_name="config")(_task)()
    sweep = sys.modules.get("afbench.sweep")  # imported by the task and the sweep callback
    failed = sweep.FAILED_JOBS if sweep is not None else []
    if failed:
        print(f"afbench: {len(failed)} sweep job(s) had failures: " + "; ".join(failed),
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
