"""``python -m afbench --help`` / ``--version``, and the one pinned use of Hydra's internals."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import hydra

from afbench.cli import hydra_run

CLI = Path(hydra_run.__file__).parent


def afbench(cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "afbench", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_help_shows_usage_recipes_groups_examples_then_hydras_flags(tmp_path):
    proc = afbench(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Usage: python -m afbench" in out
    for recipe in ("sft_af_compare", "infer_rmsnorm_compare", "infer_graph_compare"):
        assert recipe in out
    for group in ("experiment:", "model:", "engine:", "backend:", "scheduler:"):
        assert group in out
    examples = out[out.index("Examples:") :].splitlines()
    assert sum(ln.startswith("  python -m afbench ") for ln in examples) >= 5
    assert out.index("Examples:") < out.index("--multirun")  # Hydra's flags come last
    assert list(tmp_path.iterdir()) == []


def test_version_names_afbench_and_hydra(tmp_path):
    from afbench import __version__

    proc = afbench(tmp_path, "--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"afbench {__version__} (hydra-core {hydra.__version__}")


def test_only_hydra_run_imports_hydra_internals():
    for path in CLI.glob("*.py"):
        tree = ast.parse(path.read_text())
        private = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("hydra._internal")
        ]
        if path.name != "hydra_run.py":
            assert private == [], path
        else:  # inside run_once, and nowhere else in that module
            run_once = next(n for n in tree.body if getattr(n, "name", "") == "run_once")
            assert all(any(p is m for m in ast.walk(run_once)) for p in private)


def test_the_pinned_hydra_version_is_installed_and_its_internals_exist():
    # A new hydra-core: add it to SUPPORTED_HYDRA only once run_once is checked against its
    # Hydra.run; until then afbench takes hydra.main (supported() is False).
    assert hydra_run.supported(), f"hydra-core {hydra.__version__} is not pinned"
    assert not hydra_run.supported("1.4.0") and hydra_run.supported("1.3.2")
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import run_and_report

    assert callable(run_and_report) and hasattr(Callbacks, "on_run_start")
    assert "run_mode" in Hydra.compose_config.__code__.co_varnames


def test_the_readmes_regression_gate_recipe_passes_its_check_from_the_repository_root():
    # docs/history.md runs experiment=matmul_gate from examples/recipes
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "AFBENCH_RECIPE_PATH": str(root / "examples" / "recipes"),
        "PWD": str(root),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "afbench", "experiment=matmul_gate", "task=check"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "bench/workers/matmul_steps.py"
        in (root / "examples" / "recipes" / "matmul_gate.yaml").read_text()
    )
