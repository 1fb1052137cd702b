"""Entry point: ``python -m afbench [experiment=<recipe>] [dotted.key=value ...]``.

Hydra composes conf/ + the chosen recipe; afbench validates, plans, launches, collects and
renders. Errors of afbench's own types become one message and an exit code here
(2 config, 3 preflight, 1 failed runs, 130 interrupted); ``verbose=true`` or
HYDRA_FULL_ERROR=1 adds the traceback.
"""

from __future__ import annotations

import importlib.resources
import os
import sys
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from afbench.errors import AfbenchError

RECIPE_PATH_ENV = "AFBENCH_RECIPE_PATH"
EXPERIMENT_SCALARS = {"repeats": 1, "skip_policy": "per_variant", "verdict_phase": None}


def recipe_dirs() -> list[Path]:
    """Folders searched for ``<name>.yaml`` recipes: the shipped ones, then AFBENCH_RECIPE_PATH
    (os.pathsep-separated), whose recipes win on equal names."""
    dirs = [Path(str(importlib.resources.files("afbench.recipes")))]
    extra = os.environ.get(RECIPE_PATH_ENV, "")
    dirs += [Path(p) for p in extra.split(os.pathsep) if p]
    return dirs


def register() -> None:
    """Register OmegaConf resolvers and store every recipe as ``experiment/<name>``."""
    from afbench.assets.manifest import default_assets_dir

    if not OmegaConf.has_resolver("afbench_assets"):
        OmegaConf.register_new_resolver("afbench_assets", lambda: str(default_assets_dir()))
    if not OmegaConf.has_resolver("afbench_uid"):
        OmegaConf.register_new_resolver("afbench_uid", lambda: str(os.getpid()), use_cache=True)
    store = ConfigStore.instance()
    for folder in recipe_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")):
            node = OmegaConf.load(path)
            if "experiment" in node:
                # every scalar key exists, so `experiment.repeats=3` works without a `+`
                node = OmegaConf.merge({"experiment": dict(EXPERIMENT_SCALARS)}, node)
            store.store(group="experiment", name=path.stem, node=node,
                        package="_global_", provider=f"afbench recipes ({folder})")


def _task(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from afbench.config import validate_config
    from afbench.experiment import run_experiment
    from afbench.sweep import FAILED_JOBS

    verbose = bool(cfg.get("verbose", False)) or os.environ.get("HYDRA_FULL_ERROR") == "1"
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        # A failing job must not end the sweep: record it, report it, go on with the next.
        job = f"job {hydra_cfg.job.num} ({','.join(hydra_cfg.overrides.task)})"
        try:
            code = run_experiment(validate_config(cfg), Path(hydra_cfg.runtime.output_dir))
        except AfbenchError as exc:
            print(f"afbench: error in {job}: {exc}", file=sys.stderr)
            code = exc.exit_code
        if code:
            FAILED_JOBS.append(job)
        return
    try:
        conf = validate_config(cfg)
        out_dir = Path(HydraConfig.get().runtime.output_dir)
        if conf.task == "check":
            from afbench.experiment import preflight

            preflight(conf, out_dir, show_all=True)
            code = 0
        else:
            code = run_experiment(conf, out_dir)
    except AfbenchError as exc:
        if verbose:
            import traceback

            traceback.print_exc()
        print(f"afbench: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("afbench: interrupted; partial results are in the output directory", file=sys.stderr)
        sys.exit(130)
    if code:
        sys.exit(code)


def main() -> None:
    register()
    conf_dir = str(importlib.resources.files("afbench.conf"))
    hydra.main(version_base="1.3", config_path=conf_dir, config_name="config")(_task)()
    from afbench.sweep import FAILED_JOBS

    if FAILED_JOBS:
        print(f"afbench: {len(FAILED_JOBS)} sweep job(s) had failures: " + "; ".join(FAILED_JOBS),
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
