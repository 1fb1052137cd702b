"""Every command README.md and docs/*.md show that launches work runs in a test.

The commands are read from the documents' fenced shell blocks (continuation lines joined,
comments dropped, ``&&`` chains split, ``export NAME=value`` carried to the block's later
commands), so a command added to the docs is tested the day it is added: each one falls under
exactly one of the ways below, and one that fits none fails
:func:`test_every_documented_command_is_covered`, naming it.

- ``check``: a single run on this CPU (the quick start, the calibration, the regression gate):
  ``python -m afbench <its arguments> task=check`` in a subprocess, from the repository root:
  composed, validated, planned and preflighted, exit 0 (the real runs take minutes here; the
  same paths run for real in tests/test_e2e_sft.py).
- ``plan``: a command for hardware this machine lacks (``backend=npu|cuda``, a user's
  executable under /opt): every value of every swept key composed, validated and planned in
  process, with afbench's own command-line pre-check (``hydra/launcher=...`` and its
  ``hydra.launcher.*`` keys included), exit status never 2.
- ``sweep``: every ``-m`` command, also run for real (``e2e``) with the keys that need
  hardware or weights dropped and the command engine's planted worker instead (as
  tests/test_sweep.py): its launcher, ``hydra.launcher.*`` keys and swept keys as written;
  ``hydra/launcher=submitit_slurm`` through stand-in ``sbatch`` / ``srun`` / ``sacct``
  (tests/support/slurm_bin), whose jobs run on this machine.
- ``history``: ``python -m afbench.history ...`` for real against a fresh database.
- ``help``: ``--help`` for real.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SLURM_BIN = Path(__file__).parent / "support" / "slurm_bin"
WORKER = Path(__file__).parent / "fault_workers" / "switch_timed.py"
# what a real run of a documented sweep keeps out: the keys that need devices, weights or data
# this machine lacks (everything else, the launcher and the swept keys first, is kept)
# (a run over several nodes runs for real in tests/test_multinode.py)
HARDWARE_KEYS = (
    "backend",
    "model",
    "data",
    "parallel.devices",
    "parallel.world_size",
    "parallel.nnodes",
    "launcher.device_pool",
    "scheduler.seq_len",
    "scheduler.kv_cache",
    "engine",
)
CHEAP = [
    "engine=command",
    f"engine.executable={sys.executable}",
    f"engine.args=['{WORKER}']",
    "experiment.steps=5",
    "verdict.rounds=1",
    "verdict.contention=keep",
    "experiment.rerun_contended=0",
    "launcher.timeout_s=120",
]


class Command:
    """One documented command: where it is, its environment assignments and its argv."""

    def __init__(self, where: str, env: dict[str, str], argv: list[str]) -> None:
        self.where, self.env, self.argv = where, env, argv

    @property
    def module(self) -> str:
        if self.argv[0] == "afbench":
            return "afbench"
        return self.argv[self.argv.index("-m") + 1]

    @property
    def args(self) -> list[str]:
        """The arguments after the module (``python -m afbench <args>``)."""
        return (
            self.argv[1:] if self.argv[0] == "afbench" else self.argv[self.argv.index("-m") + 2 :]
        )

    def value(self, key: str) -> str | None:
        return next((a.partition("=")[2] for a in self.args if a.partition("=")[0] == key), None)

    def __repr__(self) -> str:
        return f"{self.where}: {shlex.join(self.argv)}"


def documented_commands() -> list[Command]:
    """The afbench commands of every fenced shell block of README.md and docs/*.md."""
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.finditer(r"^\s*```(\w*)\n(.*?)^\s*```", text, re.S | re.M):
            if block.group(1) not in ("bash", "sh", "shell", "console", ""):
                continue
            line_no = text[: block.start()].count("\n") + 2
            env: dict[str, str] = {}
            body = re.sub(r"\\\n", " ", block.group(2))
            for line in body.splitlines():
                if "afbench" not in line and not line.startswith("export "):
                    continue  # prose, output, other tools
                tokens = shlex.split(line, comments=True)
                parts = [[]]
                for t in tokens:
                    parts.append([]) if t == "&&" else parts[-1].append(t)
                for words in filter(None, parts):
                    if words[:1] == ["export"]:
                        env.update(w.split("=", 1) for w in words[1:] if "=" in w)
                        continue
                    assigned = {}
                    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                        k, _, v = words.pop(0).partition("=")
                        assigned[k] = v
                    is_afbench = words[:1] == ["afbench"] or (
                        "-m" in words[:-1]
                        and words[words.index("-m") + 1].startswith("afbench")
                        and words[0].endswith(("python", "python3"))
                    )
                    if is_afbench:
                        out.append(
                            Command(
                                f"{doc.relative_to(ROOT)}:{line_no}", {**env, **assigned}, words
                            )
                        )
    return out


def way(cmd: Command) -> str | None:
    """How the test suite runs ``cmd`` (module docstring), None when no way fits it."""
    if cmd.module == "afbench.history":
        return "history"
    if cmd.module != "afbench":
        return None
    if cmd.args in (["--help"], ["-h"]):
        return "help"
    if "-m" in cmd.args or "--multirun" in cmd.args:
        return "sweep"
    if any("=" not in a and not a.startswith("~") for a in cmd.args):  # ~key: Hydra's delete
        return None
    if cmd.value("parallel.nnodes") not in (None, "1"):
        return "plan"  # and run across two local "nodes" by tests/test_multinode.py
    executable = cmd.value("engine.executable") or ""
    if cmd.value("backend") in ("npu", "cuda") or executable.startswith("/opt/"):
        return "plan"
    return "check"


COMMANDS = documented_commands()


def ways(*wanted: str) -> list:
    """The commands run one of these ways, each once (README shows some twice)."""
    seen, out = set(), []
    for c in COMMANDS:
        key = (
            tuple(sorted(c.env.items())),
            tuple(c.argv[1:] if c.argv[0] == "afbench" else c.argv[c.argv.index("-m") :]),
        )
        if way(c) in wanted and key not in seen:
            seen.add(key)
            out.append(pytest.param(c, id=c.where))
    return out


def test_the_docs_show_the_commands_this_module_reads():
    # the reader finds the main job, a sweep, the SLURM sweep and the history CLI
    text = [shlex.join(c.argv) for c in COMMANDS]
    assert any(
        "experiment=sft_af_compare" in t and "-m" not in c.args for t, c in zip(text, COMMANDS)
    )
    assert any("hydra/launcher=submitit_slurm" in t for t in text)
    assert any("hydra.launcher.gpus_per_node=4" in t for t in text)
    assert any(c.module == "afbench.history" for c in COMMANDS)
    assert len(COMMANDS) >= 30, COMMANDS


def test_every_documented_command_is_covered():
    uncovered = [c for c in COMMANDS if way(c) is None]
    assert not uncovered, (
        "documented commands no test runs; give them a way in "
        f"tests/test_documented_commands.py: {uncovered}"
    )


def _env(tmp_path: Path, cmd: Command) -> dict[str, str]:
    (tmp_path / "locks").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "AFBENCH_LOCK_DIR": str(tmp_path / "locks"),
        "AFBENCH_HISTORY_URL": f"sqlite:///{tmp_path / 'history.sqlite'}",
        **cmd.env,
    }
    env.pop("HYDRA_FULL_ERROR", None)
    if "AFBENCH_RECIPE_PATH" in cmd.env:  # written relative to the repository root
        env["AFBENCH_RECIPE_PATH"] = str(ROOT / cmd.env["AFBENCH_RECIPE_PATH"])
    return env


def _afbench(
    tmp_path: Path, cmd: Command, args: list[str], *, cwd: Path, env=None, timeout: int = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", cmd.module, *args],
        cwd=cwd,
        env=env or _env(tmp_path, cmd),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("cmd", ways("check"))
def test_a_documented_cpu_run_composes_plans_and_passes_its_preflight(cmd, tmp_path):
    proc = _afbench(tmp_path, cmd, [*cmd.args, "task=check"], cwd=ROOT)
    assert proc.returncode == 0, (cmd, proc.stderr[-2000:])
    assert "[FAIL]" not in proc.stdout + proc.stderr


def _plan_everything(cmd: Command, cwd: Path) -> None:
    """afbench's pre-check of the command line (exits 2 on a problem; the sweep folder is
    checked writable), then every combination composed, validated and planned."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from afbench.cli import precheck, register
    from afbench.cli.args import combinations_to_check, free_form_argv, user_overrides
    from afbench.config import validate_config
    from afbench.plan import make_plan

    register()
    conf_dir = str(importlib.resources.files("afbench.conf"))
    argv = free_form_argv(cmd.args)
    precheck(argv, conf_dir)
    for combo in combinations_to_check(user_overrides(argv) or []):
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
                cfg = compose(config_name="config", overrides=combo)
        finally:
            GlobalHydra.instance().clear()
        plan = make_plan(validate_config(cfg), cwd / "plan")
        assert plan.runs, (cmd, combo)


@pytest.mark.parametrize("cmd", ways("plan", "sweep"))
def test_a_documented_command_for_other_hardware_composes_prechecks_and_plans(
    cmd, tmp_path, monkeypatch
):
    for key, value in _env(tmp_path, cmd).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # a sweep's folder is checked writable under multirun/
    executable = cmd.value("engine.executable")
    if executable and not Path(executable).is_file():  # the user's own script: a stand-in
        stand_in = tmp_path / Path(executable).name
        stand_in.write_text("#!/bin/sh\n")
        stand_in.chmod(0o755)
        cmd = Command(
            cmd.where,
            cmd.env,
            [
                f"engine.executable={stand_in}" if a == f"engine.executable={executable}" else a
                for a in cmd.argv
            ],
        )
    try:
        _plan_everything(cmd, tmp_path)
    except SystemExit as exc:
        pytest.fail(f"{cmd} exits {exc.code} before it runs")


def cheap(cmd: Command) -> list[str]:
    """The command's arguments for a real run here: the keys of :data:`HARDWARE_KEYS` left
    out, :data:`CHEAP` added."""
    kept = [
        a
        for a in cmd.args
        if a.lstrip("+~").partition("=")[0].split(".")[0] not in ("backend", "model", "data")
        and a.lstrip("+~").partition("=")[0] not in HARDWARE_KEYS
    ]
    return [*kept, *CHEAP]


@pytest.mark.e2e
@pytest.mark.parametrize("cmd", ways("sweep"))
def test_a_documented_sweep_runs_its_jobs_with_its_launcher(cmd, tmp_path):
    from afbench.store import SweepDir

    env = _env(tmp_path, cmd)
    args = cheap(cmd)
    if "hydra/launcher=submitit_slurm" in args:
        (tmp_path / "slurm").mkdir()
        env.update(
            PATH=f"{SLURM_BIN}{os.pathsep}{env['PATH']}",
            AFBENCH_FAKE_SLURM_DIR=str(tmp_path / "slurm"),
        )
    proc = _afbench(tmp_path, cmd, args, cwd=tmp_path, env=env, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, (cmd, out[-3000:])
    (sweep,) = [p.parent for p in tmp_path.glob("multirun/*/*/multirun.yaml")]
    jobs = SweepDir(sweep).jobs()
    swept = SweepDir(sweep).swept_values()
    expected = 1
    for values in swept.values():
        expected *= len(values)
    assert len(jobs) == expected > 1, (cmd, swept, [j.path for j in jobs])
    assert f"sweep of {expected} jobs" in out
    assert (sweep / "sweep_report.md").is_file() and "Traceback" not in out
    if "hydra/launcher=submitit_slurm" in args:  # the jobs went through sbatch
        assert list((tmp_path / "slurm").glob("*.state"))
    nodes = cmd.value("hydra.launcher.nodes")
    if nodes and int(nodes) > 1:  # every job's other node's task stood by for task 0
        idle = [
            p
            for p in sweep.glob(".submitit/*/*_1_log.err")
            if "idle: task 0 runs the experiment" in p.read_text()
        ]
        assert len(idle) == expected, list(sweep.glob(".submitit/*/*"))


@pytest.mark.parametrize("cmd", ways("history"))
def test_a_documented_history_command_runs(cmd, tmp_path):
    import shutil

    # a stored experiment (tests/fixtures/results/v2) in outputs/, imported first
    shutil.copytree(
        Path(__file__).parent / "fixtures" / "results" / "v2", tmp_path / "outputs" / "v2"
    )
    (tmp_path / "multirun").mkdir()
    if cmd.args[:1] != ["import"]:
        seeded = _afbench(tmp_path, cmd, ["import", "outputs/"], cwd=tmp_path)
        assert seeded.returncode == 0, seeded.stderr
    proc = _afbench(tmp_path, cmd, cmd.args, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    # exit 1 is a documented answer (a regression; nothing readable to import), and so is exit
    # 2 with one line for an experiment the database has not recorded; never a crash
    assert proc.returncode in (0, 1, 2) and "Traceback" not in out, (cmd, out[-2000:])
    if proc.returncode == 2:
        assert "--experiment" in cmd.args and "recorded: fixture_results" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if cmd.args[:1] == ["report"]:
        assert (tmp_path / cmd.args[cmd.args.index("-o") + 1]).is_file()


@pytest.mark.parametrize("cmd", ways("help"))
def test_the_documented_help_runs(cmd, tmp_path):
    proc = _afbench(tmp_path, cmd, cmd.args, cwd=tmp_path)
    assert proc.returncode == 0 and "experiment=" in proc.stdout, proc.stderr
