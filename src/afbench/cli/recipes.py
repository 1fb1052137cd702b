"""What Hydra's ConfigStore holds beside conf/: the recipes and the switches.

Recipes: ``experiment=<name>`` from the shipped folder and ``AFBENCH_RECIPE_PATH``. Every
recipe file is loaded once at start-up and stored as ``experiment/<name>``. A file that is not
valid YAML is left out and returned, so that only a command line that selects it fails
(:func:`broken_recipe_problems`); every other command warns once and goes on.

The verdict settings: :class:`afbench.config.verdict.VerdictConfig`'s defaults, stored as
``verdict/default`` (``conf/config.yaml`` selects it): the model is their one home, so
``verdict.rounds=5`` composes with no second list of them in YAML.

Switches: every name in :mod:`afbench.switches.registry`, false, stored as
``optimization/switches``, which ``conf/optimization/default.yaml`` lists first in its
defaults: ``optimization.<name>=true`` composes (Hydra's struct mode rejects a key the config
lacks) with no line per switch in the YAML.
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from afbench.assets.manifest import default_assets_dir
from afbench.config.models import ExperimentConfig
from afbench.config.verdict import VerdictConfig
from afbench.switches.registry import switch_names

RECIPE_PATH_ENV = "AFBENCH_RECIPE_PATH"
# every scalar key exists, so `experiment.order=random` works without a `+`
# (their defaults: the schema's)
EXPERIMENT_SCALARS = {
    key: ExperimentConfig.model_fields[key].default
    for key in (
        "skip_policy",
        "verdict_phase",
        "order",
        "order_seed",
        "steps",
        "rerun_contended",
        "sweep_pairing",
    )
}


def recipe_dirs() -> list[Path]:
    """Folders searched for ``<name>.yaml`` recipes: the shipped ones, then AFBENCH_RECIPE_PATH
    (os.pathsep-separated), whose recipes win on equal names."""
    dirs = [Path(str(importlib.resources.files("afbench.recipes")))]
    extra = os.environ.get(RECIPE_PATH_ENV, "")
    dirs += [Path(p) for p in extra.split(os.pathsep) if p]
    return dirs


def register() -> dict[str, str]:
    """Register OmegaConf resolvers, store the verdict settings' defaults as
    ``verdict/default``, the switches as ``optimization/switches`` and every loadable recipe
    as ``experiment/<name>``.

    Returns ``{name: message}`` for the recipe files that are not valid YAML (left out): the
    message names the file and the parser's complaint on one line.
    """
    if not OmegaConf.has_resolver("afbench_assets"):
        OmegaConf.register_new_resolver("afbench_assets", lambda: str(default_assets_dir()))
    if not OmegaConf.has_resolver("afbench_uid"):
        OmegaConf.register_new_resolver("afbench_uid", lambda: str(os.getpid()), use_cache=True)
    store = ConfigStore.instance()
    store.store(
        group="optimization",
        name="switches",
        node=dict.fromkeys(switch_names(), False),
        provider="afbench switches (afbench.switches.registry)",
    )
    store.store(
        group="verdict",
        name="default",
        node=VerdictConfig().model_dump(mode="json"),
        provider="afbench verdict settings (afbench.config.verdict.VerdictConfig)",
    )
    broken: dict[str, str] = {}
    for folder in recipe_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")):
            try:
                node = OmegaConf.load(path)
            except Exception as exc:  # yaml.YAMLError and friends: name the file, go on
                broken[path.stem] = f"recipe {path}: not valid YAML: {' '.join(str(exc).split())}"
                continue
            broken.pop(path.stem, None)  # a later folder's valid file of that name wins
            if "experiment" in node:
                node = OmegaConf.merge({"experiment": dict(EXPERIMENT_SCALARS)}, node)
            store.store(
                group="experiment",
                name=path.stem,
                node=node,
                package="_global_",
                provider=f"afbench recipes ({folder})",
            )
    return broken


def selected_recipes(overrides: list[str]) -> set[str]:
    """Recipe names that ``experiment=...`` overrides select (every value of a sweep)."""
    names: set[str] = set()
    for line in overrides:
        key, _, value = line.partition("=")
        if key.lstrip("+~") == "experiment":
            names.update(v.strip().strip("'\"") for v in value.split(","))
    return names
