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
            store.store(group="experiment", name=path.stem, node=OmegaConf.load(path),
                        package="_global_", provider=f"afbench recipes ({folder})")


def _task(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from afbench.config import validate_config
    from afbench.experiment import run_experiment

    verbose = bool(cfg.get("verbose", False)) or os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        conf = validate_config(cfg)
        out_dir = Path(HydraConfig.get().runtime.output_dir)
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


if __name__ == "__main__":
    main()
