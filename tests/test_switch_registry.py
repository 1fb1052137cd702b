"""The switch contract of docs/architecture.md ("a switch"): every registered switch implements
the Switch protocol in its own module, is a bool of the config (false unless given) that
composes from Hydra, is a command placeholder, and is listed in the report when on; and a new
switch, its own module plus one registry entry and no other edit, is accepted on the command
line and flows through plan-time checks, the builtin engine's stages, the command engine,
torchtitan's command line and the report."""

from __future__ import annotations

import ast
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import afbench
from afbench.config import validate_config
from afbench.config.models import OptimizationConfig
from afbench.engines import command
from afbench.errors import ConfigError
from afbench.messages import as_written
from afbench.store import RunResult
from afbench.switches import registry
from afbench.switches.base import STAGES, Switch, SwitchContext


def test_every_registered_switch_implements_the_protocol_in_its_own_module():
    names = registry.switch_names()
    assert len(set(names)) == len(names)
    for sw in registry.SWITCHES:
        assert isinstance(sw, Switch), sw
        assert type(sw).__module__ == f"afbench.switches.{sw.name}"
        assert sw.workloads and sw.workloads <= {"sft", "infer"}
        assert isinstance(sw.compiles, bool) and sw.stage in STAGES


def test_every_switch_is_a_bool_of_the_config_off_unless_given(compose_cfg):
    conf = validate_config(compose_cfg())
    on = validate_config(compose_cfg(*(f"optimization.{n}=true" for n in registry.switch_names())))
    for name in registry.switch_names():
        assert getattr(conf.optimization, name) is False, name
        assert getattr(on.optimization, name) is True, name
        assert getattr(OptimizationConfig(), name) is False, name
    assert set(registry.switch_names()) <= set(OptimizationConfig.valid_keys())
    # a switch named like a setting (compile, profiler_window, ...) would be shadowed by it
    assert not set(registry.switch_names()) & set(OptimizationConfig.model_fields)


def test_a_switch_name_that_is_not_registered_is_an_unknown_key():
    with pytest.raises(Exception) as err:
        OptimizationConfig.model_validate({"autofuze": True, "profiler_window": {"first_step": 0}})
    problems = {(e["loc"], e["type"]) for e in err.value.errors()}
    # both problems at once: the unknown switch and the setting's own error
    assert (("autofuze",), "extra_forbidden") in problems
    assert any(loc[0] == "profiler_window" for loc, _ in problems)


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

    records = switch_records(
        plan,
        spec.run_id,
        RunResult(
            switches=[{"name": "autofuse", "applied": True, "detail": as_written("torch.compile")}]
        ),
    )
    assert [r.name for r in records] == ["autofuse"] + [
        n for n in registry.switch_names() if n != "autofuse"
    ]
    assert records[0].detail.text == "torch.compile"
    assert records[1].detail is None  # the report's label: not reported


def test_workload_restriction_comes_from_the_switch(compose_cfg, tmp_path):
    from afbench.plan import make_plan

    with pytest.raises(
        ConfigError,
        match=r"optimization\.npugraph_ex is inference-only.*"
        r"scheduler=infer",
    ):
        make_plan(validate_config(compose_cfg("optimization.npugraph_ex=true")), tmp_path)


# ------------------------------------------------------------------ a new switch, end to end

TOY = """
from afbench.errors import ConfigError
from afbench.messages import as_written
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
        return SwitchReport(self.name, True, as_written("toy rewrite"))

    def titan_args(self, cfg, flavor, run_dir):
        return ["--toy.enable"] if cfg.optimization.toy else []
"""


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A switch written in its own module (outside afbench) plus one registry entry."""
    (tmp_path / "toy_switch.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_switch

    monkeypatch.setattr(registry, "SWITCHES", registry.SWITCHES + (toy_switch.Toy(),))
    yield toy_switch
    sys.modules.pop("toy_switch", None)


def test_a_new_switch_flows_through_plan_engines_placeholders_and_report(
    toy, compose_cfg, tmp_path
):
    from afbench.compare import switch_records
    from afbench.config.engines import TorchtitanEngine
    from afbench.engines.torchtitan.cmdline import trainer_args
    from afbench.plan import make_plan

    # the command line takes it as any switch: no field, no YAML line
    cfg = validate_config(
        compose_cfg(
            "engine=command",
            f"engine.executable={sys.executable}",
            "engine.args=['--toy={toy}']",
            "scheduler.steps=12",
            "optimization.toy=true",
        )
    )
    assert cfg.optimization.toy is True
    plan = make_plan(cfg, tmp_path)
    assert toy.CHECKED == [12] * len(plan.runs)  # plan time, every run
    spec = plan.runs[0]
    assert spec.config.optimization.toy is True
    # command engine: a placeholder and an AFBENCH_TOY variable
    values = command.run_values(spec, tmp_path)
    assert "toy" in command.placeholders() and values["toy"] == "true"
    assert command.build_argv(spec.config.engine, values)[1:] == ["--toy=true"]
    # builtin engine: applied at its stage
    ctx = SwitchContext(spec.config, backend=None, model=[])
    assert [r.detail.text for r in registry.apply_stage("model", ctx)] == ["toy rewrite"]
    assert ctx.model == ["toy"]
    # torchtitan: its options in the command line
    assert "--toy.enable" in trainer_args(spec, TorchtitanEngine(hf_assets=False))
    # the report lists it even when the engine (here: command) reported nothing
    assert [r.name for r in switch_records(plan, spec.run_id, RunResult())] == ["toy"]


def test_a_new_switch_is_off_unless_given_and_its_typo_is_named(toy, compose_cfg):
    assert validate_config(compose_cfg()).optimization.toy is False
    with pytest.raises(ConfigError, match=r"optimization\.toi: unknown key; did you mean 'toy'"):
        validate_config(compose_cfg("+optimization.toi=true"))


def test_a_new_switchs_checks_fail_the_plan(toy, compose_cfg, tmp_path):
    rc = validate_config(compose_cfg("scheduler.steps=60", "optimization.toy=true"))
    with pytest.raises(ConfigError, match="optimization.toy: at most 50 steps"):
        registry.check_switches(rc)
    infer = validate_config(compose_cfg("scheduler=infer", "optimization.toy=true"))
    with pytest.raises(ConfigError, match="optimization.toy is training-only"):
        registry.check_switches(infer)


# ------------------------- the two steps of docs/architecture.md, in a copy of the package

# a command that records what afbench gave it (argv, AFBENCH_TOY) and logs 4 steps
SEEN = """import json, os, sys
with open(os.path.join(sys.argv[1], "seen.json"), "w") as f:
    json.dump({"argv": sys.argv[2:], "env": os.environ.get("AFBENCH_TOY")}, f)
for step in range(1, 5):
    print(f"step: {step}  loss: {2.0 / step:.5f}  elapsed_time_per_step: 0.010000s", flush=True)
"""


def _package_with_toy(root: Path) -> Path:
    """A copy of afbench (with its conf/ and recipes/) under ``root``, changed exactly as
    docs/architecture.md says a switch is added: ``switches/toy.py`` written, and ``Toy()``
    added to ``SWITCHES`` with its import. Returns ``root`` (for PYTHONPATH)."""
    skip = shutil.ignore_patterns("__pycache__")
    pkg = root / "afbench"
    shutil.copytree(Path(afbench.__file__).parent, pkg, ignore=skip)
    for sub in ("conf", "recipes"):
        if not (pkg / sub).is_dir():
            shutil.copytree(
                Path(str(importlib.resources.files(f"afbench.{sub}"))), pkg / sub, ignore=skip
            )
    # step 1: the switch's own module
    (pkg / "switches" / "toy.py").write_text(TOY)
    # step 2: one entry in the ordered SWITCHES tuple (and the import of its class)
    path = pkg / "switches" / "registry.py"
    source = path.read_text()
    tree = ast.parse(source)
    (node,) = [
        n
        for n in tree.body
        if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "SWITCHES"
    ]
    lines = source.splitlines(keepends=True)
    end = node.value.end_lineno - 1
    line = lines[end]
    close = node.value.end_col_offset - 1
    assert line[close] == ")", line
    lines[end] = line[:close] + ", Toy()" + line[close:]
    first_import = next(
        n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module.startswith("afbench.")
    )
    lines.insert(first_import.lineno - 1, "from afbench.switches.toy import Toy\n")
    path.write_text("".join(lines))
    return root


def test_a_switch_added_as_the_docs_say_runs_from_the_command_line_to_the_report(tmp_path):
    root = _package_with_toy(tmp_path / "pkg")
    seen = tmp_path / "seen.py"
    seen.write_text(SEEN)
    from afbench.assets.manifest import ASSETS_ENV, default_assets_dir

    env = {
        **os.environ,
        ASSETS_ENV: str(default_assets_dir()),
        "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "afbench",
            "engine=command",
            f"engine.executable={sys.executable}",
            f"engine.args=['{seen}','{{run_dir}}','--toy={{toy}}']",
            "scheduler.steps=4",
            "scheduler.measure.first_step=2",
            "scheduler.measure.last_step=4",
            "report.formats=[md]",
            "optimization.toy=true",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (out,) = list(tmp_path.glob("outputs/*/*"))
    (run_dir,) = list((out / "runs").iterdir())
    # the engine got it: the placeholder and the AFBENCH_TOY variable
    assert json.loads((run_dir / "seen.json").read_text()) == {
        "argv": ["--toy=true"],
        "env": "true",
    }
    spec = json.loads((run_dir / "runspec.json").read_text())
    assert spec["config"]["optimization"]["toy"] is True
    # the report's switch table lists it (on; the command engine reports nothing about it)
    report = (out / "report.md").read_text()
    assert f"- `{run_dir.name}`: toy: on; the engine reports nothing about it" in report
    # nothing else in the copy names the switch (no config field, no YAML line)
    named = [
        p.relative_to(root)
        for p in root.rglob("*")
        if p.is_file() and p.suffix in (".py", ".yaml") and re.search(r"\btoy\b", p.read_text())
    ]
    assert sorted(map(str, named)) == ["afbench/switches/registry.py", "afbench/switches/toy.py"]


def test_a_switch_not_registered_exits_2_naming_the_key(tmp_path, afbench_env):
    proc = subprocess.run(
        [sys.executable, "-m", "afbench", "optimization.autofuze=true"],
        cwd=tmp_path,
        env=afbench_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert (
        "optimization.autofuze: unknown key; did you mean 'optimization.autofuse'?" in proc.stderr
    )
    assert not (tmp_path / "outputs").exists()


def _spec(tmp_path, args):
    from afbench.config.models import RunConfig
    from afbench.runspec import RunSpec

    config = RunConfig.model_validate(
        {
            "model": {"name": "m", "path": "/models/m"},
            "data": {"name": "d", "path": "/d.parquet"},
            "scheduler": {
                "workload": "sft",
                "steps": 5,
                "seed": 1,
                "seq_len": 8,
                "measure": {"first_step": 2, "last_step": 5},
            },
            "optimization": {"profiler_window": {"first_step": 2, "last_step": 4}},
            "engine": {"name": "command", "executable": sys.executable, "args": args},
        }
    )
    return RunSpec(
        run_id="v-train-r1",
        index=1,
        variant="v",
        phase="train",
        repeat=1,
        config=config,
        config_hash="0" * 64,
        run_dir=str(tmp_path),
        timeout_s=60,
        kill_grace_s=2,
    )


def test_settings_the_config_checks_switch_names_against_are_its_non_switch_fields():
    from afbench.config.models import OptimizationConfig
    from afbench.config.switch_names import SETTINGS

    assert set(SETTINGS) == set(OptimizationConfig.model_fields)


@pytest.mark.parametrize(
    "name, error",
    [
        ("compile", "is the optimization setting optimization.compile: rename the switch"),
        ("fast-softmax", "use lowercase letters, digits and '_'"),
        ("autofuse", "registered twice"),
    ],
)
def test_a_switch_name_that_cannot_be_a_key_fails_naming_the_switch(monkeypatch, name, error):
    from afbench.config.switch_names import switch_names as names_the_config_reads

    # a newcomer registered a switch called compile: the report said "compile: on", the
    # command engine printed a settings object for {compile}, history recording crashed
    clash = type("Clash", (registry.SWITCHES[0].__class__,), {"name": name})()
    monkeypatch.setattr(registry, "SWITCHES", registry.SWITCHES + (clash,))
    with pytest.raises(ValueError, match=re.escape(error)):
        names_the_config_reads()


def test_a_switch_named_like_a_command_placeholder_fails_naming_both(monkeypatch):
    from afbench.engines.command import placeholders

    clash = type("Clash", (registry.SWITCHES[0].__class__,), {"name": "mode"})()
    monkeypatch.setattr(registry, "SWITCHES", registry.SWITCHES + (clash,))
    with pytest.raises(ConfigError, match=r"switch name 'mode' .* placeholder \{mode\}"):
        placeholders()


def test_no_registered_switch_takes_a_placeholders_name():
    from afbench.engines.command import RUN_PLACEHOLDERS

    assert not set(registry.switch_names()) & set(RUN_PLACEHOLDERS)
