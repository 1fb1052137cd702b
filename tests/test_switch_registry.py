"""The switch contract of docs/architecture.md ("a switch"): every registered switch implements
the Switch protocol in its own module, has its bool field in OptimizationConfig and its line in
conf/optimization/default.yaml, is a command placeholder, and is listed in the report when on;
and a new switch (a module of its own plus one registry entry) flows through plan-time
checks, the builtin engine's stages, the command placeholders, torchtitan's command line and
the report without any other edit."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import yaml

from afbench.config import validate_config
from afbench.config.models import OptimizationConfig
from afbench.engines import command
from afbench.errors import ConfigError
from afbench.store import RunResult
from afbench.switches import registry
from afbench.switches.base import STAGES, Switch, SwitchContext

REPO = Path(__file__).resolve().parents[1]


def test_every_registered_switch_implements_the_protocol_in_its_own_module():
    names = registry.switch_names()
    assert len(set(names)) == len(names)
    for sw in registry.SWITCHES:
        assert isinstance(sw, Switch), sw
        assert type(sw).__module__ == f"afbench.switches.{sw.name}"
        assert sw.workloads and sw.workloads <= {"sft", "infer"}
        assert isinstance(sw.compiles, bool) and sw.stage in STAGES


def test_every_switch_is_a_bool_of_the_config_and_off_in_the_default_yaml():
    defaults = yaml.safe_load((REPO / "conf/optimization/default.yaml").read_text())
    for name in registry.switch_names():
        assert OptimizationConfig.model_fields[name].annotation is bool, name
        assert defaults[name] is False, f"conf/optimization/default.yaml: {name}"


def test_every_switch_is_a_command_placeholder(tmp_path):
    spec = _spec(tmp_path, ["{autofuse}"])
    values = command.run_values(spec, tmp_path)
    for name in registry.switch_names():
        assert name in command.placeholders() and values[name] == "false"


def test_every_switch_turned_on_is_listed_in_the_report(tmp_path):
    spec = _spec(tmp_path, [])
    on = spec.config.optimization.model_copy(update=dict.fromkeys(registry.switch_names(), True))
    spec = spec.model_copy(update={"config": spec.config.model_copy(update={"optimization": on})})
    plan = types.SimpleNamespace(runs=[spec])
    from afbench.compare import switch_records

    records = switch_records(plan, spec.run_id, RunResult(switches=[
        {"name": "autofuse", "applied": True, "detail": "torch.compile"}]))
    assert [r.name for r in records] == ["autofuse"] + [n for n in registry.switch_names()
                                                         if n != "autofuse"]
    assert records[0].detail == "torch.compile" and records[1].detail == ""  # label: not reported


def test_workload_restriction_comes_from_the_switch(compose_cfg, tmp_path):
    from afbench.plan import make_plan

    with pytest.raises(ConfigError, match=r"optimization\.npugraph_ex is inference-only.*"
                                          r"scheduler=infer"):
        make_plan(validate_config(compose_cfg("optimization.npugraph_ex=true")), tmp_path)


# ------------------------------------------------------------------ a new switch, end to end

TOY = '''
from afbench.errors import ConfigError
from afbench.switches import SwitchReport
from afbench.switches.base import BuiltinOnlySwitch

CHECKED = []


class Toy(BuiltinOnlySwitch):
    name = "toy"
    workloads = frozenset({"sft"})
    stage = "model"

    def check(self, cfg):
        CHECKED.append(cfg.scheduler.steps)
        if cfg.scheduler.steps > 50:
            raise ConfigError("optimization.toy: at most 50 steps")

    def apply(self, ctx):
        ctx.model.append("toy")
        return SwitchReport(self.name, True, "toy rewrite")

    def titan_args(self, cfg, flavor, run_dir):
        return ["--toy.enable"] if cfg.optimization.toy else []
'''


class ToyOptimization(OptimizationConfig):
    toy: bool = False  # the switch's one config field


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A switch written in its own module (outside afbench) plus one registry entry."""
    (tmp_path / "toy_switch.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_switch

    monkeypatch.setattr(registry, "SWITCHES", registry.SWITCHES + (toy_switch.Toy(),))
    yield toy_switch
    sys.modules.pop("toy_switch", None)


def _with_toy(rc, on: bool):
    return rc.model_copy(update={"optimization": ToyOptimization(
        **rc.optimization.model_dump(), toy=on)})


def test_a_new_switch_flows_through_plan_engines_placeholders_and_report(toy, compose_cfg,
                                                                          tmp_path, monkeypatch):
    import afbench.plan as plan_mod
    from afbench.compare import switch_records
    from afbench.config.engines import TorchtitanEngine
    from afbench.engines.torchtitan.cmdline import trainer_args

    # the config field: afbench.config is the leaf layer, so the test stands in for the one
    # field a real switch adds to OptimizationConfig
    validate = plan_mod.validate_run_config
    monkeypatch.setattr(plan_mod, "validate_run_config",
                        lambda data, where, *rest: _with_toy(validate(data, where, *rest),
                                                             True))
    cfg = validate_config(compose_cfg("engine=command", f"engine.executable={sys.executable}",
                                      "engine.args=['--toy={toy}']", "scheduler.steps=12"))
    plan = plan_mod.make_plan(cfg, tmp_path)
    assert toy.CHECKED == [12] * len(plan.runs)  # plan time, every run
    spec = plan.runs[0]
    # command engine: a placeholder and an AFBENCH_TOY variable
    values = command.run_values(spec, tmp_path)
    assert "toy" in command.placeholders() and values["toy"] == "true"
    assert command.build_argv(spec.config.engine, values)[1:] == ["--toy=true"]
    # builtin engine: applied at its stage
    ctx = SwitchContext(spec.config, backend=None, model=[])
    assert [r.detail for r in registry.apply_stage("model", ctx)] == ["toy rewrite"]
    assert ctx.model == ["toy"]
    # torchtitan: its options in the command line
    assert "--toy.enable" in trainer_args(spec, TorchtitanEngine(hf_assets=False))
    # the report lists it even when the engine (here: command) reported nothing
    assert [r.name for r in switch_records(plan, spec.run_id, RunResult())] == ["toy"]


def test_a_new_switchs_checks_fail_the_plan(toy, compose_cfg, tmp_path):
    rc = _with_toy(validate_config(compose_cfg("scheduler.steps=60")), True)
    with pytest.raises(ConfigError, match="optimization.toy: at most 50 steps"):
        registry.check_switches(rc)
    infer = _with_toy(validate_config(compose_cfg("scheduler=infer")), True)
    with pytest.raises(ConfigError, match="optimization.toy is training-only"):
        registry.check_switches(infer)


def _spec(tmp_path, args):
    from afbench.config.models import RunConfig
    from afbench.runspec import RunSpec

    config = RunConfig.model_validate({
        "model": {"name": "m", "path": "/models/m"}, "data": {"name": "d", "path": "/d.parquet"},
        "scheduler": {"workload": "sft", "steps": 5, "seed": 1, "seq_len": 8,
                      "measure": {"first_step": 2, "last_step": 5}},
        "optimization": {"profiler_window": {"first_step": 2, "last_step": 4}},
        "engine": {"name": "command", "executable": sys.executable, "args": args}})
    return RunSpec(run_id="v-train-r1", index=1, variant="v", phase="train", repeat=1,
                   config=config, config_hash="0" * 64, run_dir=str(tmp_path),
                   timeout_s=60, kill_grace_s=2)
