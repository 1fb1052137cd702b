"""Start-up of ``python -m afbench``: what the orchestrator imports and how often it composes.

Each case runs afbench's entry point in a fresh interpreter and reports ``sys.modules`` and the
number of Hydra compositions at exit (no timing: speed lives in bench/overhead.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from afbench.cli import single_run_overrides

GOOD_WORKER = Path(__file__).parent / "fault_workers" / "good.py"
HEAVY = ("torch", "transformers", "scipy", "matplotlib", "pandas", "pyarrow")

# Runs afbench.cli.main() with the given argv; prints exit code, heavy modules, compose count.
PROBE = """
import json, sys
from hydra._internal.hydra import Hydra
composes = []
_orig = Hydra.compose_config
def _counted(self, *a, **k):
    composes.append(1)
    return _orig(self, *a, **k)
Hydra.compose_config = _counted
sys.argv = ["afbench", *json.loads(sys.argv[1])]
from afbench.cli import main
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
heavy = sorted(m for m in %r if m in sys.modules)
print("PROBE " + json.dumps({"code": code, "heavy": heavy, "composes": len(composes)}))
""" % (HEAVY,)


def probe(cwd: Path, *args: str, recipes: Path | None = None) -> tuple[dict, str]:
    env = None
    if recipes is not None:
        import os

        env = {**os.environ, "AFBENCH_RECIPE_PATH": str(recipes)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert line, proc.stdout + proc.stderr
    return json.loads(line[len("PROBE ") :]), proc.stderr


def command_recipe(folder: Path) -> Path:
    """A one-run command-engine recipe with a markdown-only report; returns the recipes dir."""
    recipes = folder / "recipes"
    recipes.mkdir()
    recipe = {
        "engine": {
            "name": "command",
            "executable": sys.executable,
            "args": [str(GOOD_WORKER), "{steps}"],
        },
        "report": {"formats": ["md"]},
        "experiment": {
            "name": "startup_one",
            "baseline": "a",
            "variants": {"a": {}},
            "phases": {
                "train": {"scheduler": {"steps": 4, "measure": {"first_step": 2, "last_step": 4}}}
            },
        },
    }
    (recipes / "startup_one.yaml").write_text("# @package _global_\n" + yaml.safe_dump(recipe))
    return recipes


def test_config_error_exits_2_before_any_heavy_import_and_writes_nothing(tmp_path):
    got, stderr = probe(tmp_path, "scheduler.stepz=3")
    assert got["code"] == 2, stderr
    assert "scheduler.stepz: unknown key; did you mean 'scheduler.steps'?" in stderr
    assert got["heavy"] == []
    assert not (tmp_path / "outputs").exists()


def test_a_key_hydra_cannot_compose_is_reported_before_any_heavy_import(tmp_path):
    # the common typo fails in Hydra's compose. The recipes' defaults come from the config
    # models (one home: afbench.verdict.DEFAULT through them), so pydantic is imported, but
    # nothing that loads a model or a table is
    code = (
        "import json, sys\nsys.argv = ['afbench', 'scheduler.stepz=3']\n"
        "from afbench.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n"
        "    print('PROBE', exc.code, sorted(m for m in ('torch', 'transformers', 'pandas',"
        " 'matplotlib', 'jinja2') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert "PROBE 2 []" in proc.stdout, proc.stdout + proc.stderr
    assert "scheduler.stepz: unknown key; did you mean 'scheduler.steps'?" in proc.stderr


def test_bad_value_exits_2_before_any_heavy_import(tmp_path):
    got, stderr = probe(tmp_path, "scheduler.steps=ten")
    assert got["code"] == 2 and "scheduler.steps: Input should be a valid integer" in stderr
    assert got["heavy"] == []


def test_command_engine_run_with_md_report_composes_once_and_imports_no_torch_scipy_matplotlib(
    tmp_path,
):
    got, stderr = probe(tmp_path, "experiment=startup_one", recipes=command_recipe(tmp_path))
    assert got["code"] == 0, stderr
    assert got["composes"] == 1
    # the results tables need pandas/pyarrow; nothing else heavy is imported
    assert set(got["heavy"]) <= {"pandas", "pyarrow"}, got["heavy"]
    (out,) = list(tmp_path.glob("outputs/*/*"))
    assert (out / "report.md").is_file() and not (out / "report.html").exists()
    assert json.loads((out / "runs" / "a-train-r1" / "status.json").read_text())["status"] == "OK"
    # what Hydra's own run writes is there: the job's overrides, its config, the job log
    assert yaml.safe_load((out / ".hydra" / "overrides.yaml").read_text()) == [
        "experiment=startup_one"
    ]
    assert (
        yaml.safe_load((out / ".hydra" / "config.yaml").read_text())["engine"]["name"] == "command"
    )
    assert "preflight" in (out / "cli.log").read_text()


def test_worker_of_the_command_engine_imports_no_torch_pandas_or_omegaconf():
    # nor the summary's models: they cost ~0.08 s per run (the store loads them lazily)
    code = (
        "import sys, afbench.worker, afbench.engines.command\n"
        "print(sorted(m for m in ('torch', 'pandas', 'omegaconf', 'scipy', 'yaml', "
        "'afbench.store.summary', 'afbench.store.comparison') "
        "if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "argv, single",
    [
        (["experiment=sft_af_compare", "scheduler.seq_len=512"], True),
        ([], True),
        (["-m", "optimization.autofuse=false,true"], False),
        (["optimization.autofuse=false,true"], False),  # a sweep: precheck points to -m
        (["hydra.mode=MULTIRUN", "scheduler.lr=0.1,0.2"], False),
        (["--cfg", "job"], False),
        (["--help"], False),
    ],
)
def test_only_a_plain_single_run_takes_the_compose_once_path(argv, single):
    assert (single_run_overrides(argv) is not None) is single
