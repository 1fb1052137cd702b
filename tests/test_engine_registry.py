"""The engine registry: every engine of conf/engine/ has an entry, and each entry's plan-time
check rejects a config it cannot run with a ConfigError naming the key."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml

from afbench.config import validate_config
from afbench.config.engines import EngineConfig
from afbench.engines.registry import ENGINES, engine_for
from afbench.errors import ConfigError
from afbench.plan import make_plan

CONF_ENGINES = sorted((Path(__file__).resolve().parents[1] / "conf" / "engine").glob("*.yaml"))


@pytest.mark.parametrize("path", CONF_ENGINES, ids=lambda p: p.stem)
def test_every_engine_in_conf_resolves_to_its_entry(compose_cfg, path, tmp_path):
    name = yaml.safe_load(path.read_text())["name"]
    assert ENGINES[name].name == name
    overrides = [f"engine={path.stem}"]
    if name == "command":
        overrides.append(f"engine.executable={Path('/bin/true').resolve()}")
    rc = make_plan(validate_config(compose_cfg(*overrides)), tmp_path).runs[0].config
    assert engine_for(rc) is ENGINES[name]


def test_every_engine_schema_has_an_entry():
    union = typing.get_args(typing.get_args(EngineConfig)[0])
    names = {member.model_fields["name"].default for member in union}
    assert names == set(ENGINES)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["parallel.tp_size=2"], "parallel.tp_size"),
        (
            [
                "parallel.world_size=2",
                "scheduler.micro_batch_size=4",
                "scheduler.global_batch_size=4",
            ],
            "scheduler.global_batch_size 4 is not divisible by micro_batch_size x world_size = 8",
        ),
        (["engine=command", "engine.executable=bin/train"], "engine.executable"),
        (
            [
                "engine=command",
                "engine.executable=/bin/true",
                "parallel.world_size=2",
                "parallel.nnodes=2",
            ],
            "parallel.nnodes",
        ),
        (
            [
                "engine=command",
                "engine.executable=/bin/true",
                "engine.step_pattern='step: (?P<step>[0-9]+)'",
            ],
            "engine.step_pattern",
        ),
        (["engine=torchtitan", "scheduler=infer"], "scheduler.workload"),
    ],
)
def test_each_engine_check_names_the_bad_key(compose_cfg, tmp_path, overrides, key):
    with pytest.raises(ConfigError, match=key.replace("(", r"\(")) as err:
        make_plan(validate_config(compose_cfg(*overrides)), tmp_path)
    assert "experiment.variants.baseline in phase run: " in str(err.value)
    assert "\n" not in str(err.value)


def test_builtin_check_leaves_a_user_command_its_own_batching(compose_cfg, tmp_path):
    cfg = validate_config(
        compose_cfg("engine=command", "engine.executable=/bin/true", "parallel.tp_size=2")
    )
    assert make_plan(cfg, tmp_path).runs[0].config.parallel.tp_size == 2
